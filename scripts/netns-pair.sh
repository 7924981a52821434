#!/usr/bin/env bash
# Split roles across two network namespaces joined by a veth pair:
# `keel-bench serve` in one, the clients (`keel-bench --connect`) in the
# other, addresses from 192.0.2.0/24 (TEST-NET-1, never routed). Prints the
# client JSON line on stdout and always removes what it made.
#
#   scripts/netns-pair.sh [--bench PATH] [--keep-going] [-- RUN FLAGS...]
#   e.g. scripts/netns-pair.sh -- --clients 16 --window 1 --seconds 1
#
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2. Exit codes: the
# client's (0 ok, 1 failed checks, 2 bad arguments); 3 if the namespaces
# cannot be made (the message says why); 4 if the server did not start.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=target/release/keel-bench
run_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --) shift; run_flags=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "netns-pair.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ ! -x "$bench" ]; then
  echo "netns-pair.sh: building $bench" >&2
  cargo build --release -p keel-bench >&2
fi
command -v ip >/dev/null || { echo "netns-pair.sh: needs iproute2 (ip)" >&2; exit 3; }

tag="keel$$"
ns_srv="${tag}-srv"; ns_cli="${tag}-cli"
veth_srv="${tag}s"; veth_cli="${tag}c"
srv_ip=192.0.2.1; cli_ip=192.0.2.2; port=9400
server_pid=""

cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  ip netns del "$ns_srv" 2>/dev/null || true
  ip netns del "$ns_cli" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if ! ip netns add "$ns_srv" 2>/tmp/"$tag".err; then
  echo "netns-pair.sh: cannot create network namespaces: $(cat /tmp/"$tag".err) (needs root)" >&2
  rm -f /tmp/"$tag".err
  exit 3
fi
rm -f /tmp/"$tag".err
ip netns add "$ns_cli"
ip link add "$veth_srv" type veth peer name "$veth_cli"
ip link set "$veth_srv" netns "$ns_srv"
ip link set "$veth_cli" netns "$ns_cli"
ip -n "$ns_srv" addr add "$srv_ip/24" dev "$veth_srv"
ip -n "$ns_cli" addr add "$cli_ip/24" dev "$veth_cli"
for ns in "$ns_srv" "$ns_cli"; do ip -n "$ns" link set lo up; done
ip -n "$ns_srv" link set "$veth_srv" up
ip -n "$ns_cli" link set "$veth_cli" up

# The server runs a little longer than the clients can (warm-up + seconds +
# 2 s drain), then ends by itself if the kill below never comes.
ip netns exec "$ns_srv" "$bench" serve --bind "$srv_ip:$port" --seconds 7300 \
  >/tmp/"$tag".serve.json 2>/tmp/"$tag".serve.err &
server_pid=$!
# Wait for the bind, bounded: the server says "listening" on stderr.
for _ in $(seq 100); do
  grep -q listening /tmp/"$tag".serve.err 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
if ! grep -q listening /tmp/"$tag".serve.err 2>/dev/null; then
  echo "netns-pair.sh: server did not start: $(cat /tmp/"$tag".serve.err)" >&2
  rm -f /tmp/"$tag".serve.*
  exit 4
fi

set +e
ip netns exec "$ns_cli" "$bench" --connect "$srv_ip:$port" "${run_flags[@]}"
status=$?
set -e
kill -TERM "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=""
echo "netns-pair.sh: server summary: $(cat /tmp/"$tag".serve.json)" >&2
rm -f /tmp/"$tag".serve.*
exit "$status"
