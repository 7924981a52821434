#!/usr/bin/env bash
# Real kernel faults between two hosts: two network namespaces joined by a
# veth pair (192.0.2.0/24, TEST-NET-1, never routed), `keel-bench serve` in
# one, `keel-bench --connect` clients in the other, and one kernel-side fault
# at a time on the link. Without a fault the link keeps order: each veth's
# receive goes to one CPU (RPS). Prints one line per fault on stdout:
#
#   fault=loss sent=N echoed=N completed=N lost=N late=N order=N duplicate=N
#     content=N kernel_dropped=N kernel_copies=N rps=N p50_us=N elapsed_s=S
#     wall_s=S exit=N checks=ok
#
#   sent            client messages_sent (measured phase; --warmup 0)
#   echoed          echoes the server sent (its datagrams_out)
#   completed       client messages (correct, in order)
#   lost            udp_lost_messages (given up after --loss-timeout, or
#                   outstanding after the drain)
#   late            late_echoes (echo of a message already counted lost)
#   order           order_errors (reordering)
#   duplicate       unexpected_messages (here: duplicated echoes)
#   kernel_dropped  datagrams the kernel dropped: nftables drop rules
#                   (rule counters), full qdiscs (tc -s), full socket
#                   buffers (kernel_rcvbuf_drops of client and server)
#   kernel_copies   copies the kernel made: echoes that reached the client
#                   host (an nftables counter first in its input chain)
#                   minus echoes the server sent and its qdisc kept
#
# and checks, per fault: the client ends on time (its elapsed_seconds, the
# measured phase to the end of the drain, <= seconds + 2 s drain + 1.5 s;
# a client still running --seconds + 30 s after its start is killed and
# fails), nothing panicked (no "panicked" on either
# stderr, client exit 0 or 1, server exit 0), no drain timeout, and the
# counters add up: sent = completed + lost + order + content (order and
# content are 0 unless the fault reorders or corrupts, so under loss and
# rate limits this is sent = completed + lost exactly); lost =
# kernel_dropped when the kernel made no copies (at most, when it did: a
# copy can stand in for a dropped echo); duplicate = kernel_copies up to
# the last window's copies still in flight at the end (at most, with loss
# rules that may drop copies).
#
# Faults (this kernel has nftables and the tbf/htb qdiscs, but no netem):
#   none       no fault (baseline; must be ok)
#   loss       nftables `numgen random mod 20 0 drop` on each side's input:
#              5 % of requests and 5 % of echoes dropped, silently
#   rate       tbf 10mbit (burst 32kbit, latency 50ms) on both veth ends: a
#              rate-limited link whose queue overflows under a burst
#   reorder    htb on the server's veth: 1 echo in 10 (nftables numgen
#              `meta priority set 1:20`) goes through a 20mbit class while
#              the rest pass at 10gbit, so it is overtaken by later echoes
#   duplicate  nftables `dup to <client> device <veth>` on 1 echo in 10
#   mixed      loss + reorder + duplicate together
#
#   scripts/faults.sh [--bench PATH] [--seconds S] [--faults LIST]
#                     [--json FILE] [-- EXTRA CLIENT FLAGS...]
#
#   --bench PATH    keel-bench binary (default target/release/keel-bench,
#                   built with cargo if missing)
#   --seconds S     measured phase per fault (default 2)
#   --faults LIST   comma-separated subset, in order (default: all six)
#   --json FILE     append each fault's client JSON line (with "fault" and
#                   "server" added) to FILE
#   after --         extra client flags (default client flags: --clients 4
#                   --window 16 --payload 1024 --warmup 0 --loss-timeout 200)
#
# Needs root (network namespaces, nftables, tc, RPS), iproute2, python3;
# installs nftables with apt-get when `nft` is missing. Always removes the
# namespaces it made (trap), whatever happens. Every load is bounded: one
# client run of --seconds per fault (killed, a failed check, if it is still
# running --seconds + 30 s later), a server that ends by itself after a bound.
# Progress goes to stderr, two lines per fault: "[k/n] FAULT: ..." as it
# starts, "[k/n] FAULT: checks ok, N rt/s, N sent, N lost, ..." (or FAILED) when it
# ends; stdout holds only the data lines above.
#
# Exit status: 0 every check passed; 1 a check failed; 2 bad arguments;
# 3 missing privileges or tools (the message says which).
set -euo pipefail
PROG=faults.sh
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(dirname "$0")/.."

bench=target/release/keel-bench
seconds=2
faults_list="none,loss,rate,reorder,duplicate,mixed"
json_out=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --faults) faults_list="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo pipefail/{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case "$seconds" in
  ''|*[!0-9.]*) die "--seconds expects a positive number, got '$seconds'" ;;
esac
IFS=, read -r -a faults <<<"$faults_list"
for f in "${faults[@]}"; do
  case "$f" in
    none|loss|rate|reorder|duplicate|mixed) ;;
    *) die "unknown fault '$f' (none, loss, rate, reorder, duplicate, mixed)" ;;
  esac
done

need() { echo "$PROG: $*" >&2; exit 3; }
[ "$(id -u)" -eq 0 ] || need "needs root (network namespaces, nftables, tc)"
command -v ip >/dev/null || need "needs iproute2 (ip)"
command -v tc >/dev/null || need "needs iproute2 (tc)"
command -v python3 >/dev/null || need "needs python3 (to read the JSON lines)"
command -v timeout >/dev/null || need "needs timeout (coreutils) to bound the client runs"
if ! command -v nft >/dev/null; then
  echo "$PROG: nft missing, installing nftables with apt-get" >&2
  if ! { apt-get install -y nftables >/dev/null 2>&1 ||
         { apt-get update >/dev/null 2>&1 && apt-get install -y nftables >/dev/null 2>&1; }; }; then
    need "needs nftables (nft) and could not install it with apt-get"
  fi
fi
if [ ! -x "$bench" ]; then
  echo "$PROG: building $bench" >&2
  cargo build --release -p keel-bench >&2
fi

tag="kf$$"
ns_srv="${tag}-srv"; ns_cli="${tag}-cli"
veth_srv="${tag}s"; veth_cli="${tag}c"
srv_ip=192.0.2.1; cli_ip=192.0.2.2; port=9400
work=$(mktemp -d /tmp/"$tag".XXXXXX)
server_pid=""
client_pid=""

cleanup() {
  if [ -n "$client_pid" ]; then
    kill "$client_pid" 2>/dev/null || true
    wait "$client_pid" 2>/dev/null || true
  fi
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  ip netns del "$ns_srv" 2>/dev/null || true
  ip netns del "$ns_cli" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$ns_srv" 2>"$work/err"; then
  need "cannot create network namespaces: $(cat "$work/err") (needs root)"
fi
ip netns add "$ns_cli"
ip link add "$veth_srv" type veth peer name "$veth_cli"
ip link set "$veth_srv" netns "$ns_srv"
ip link set "$veth_cli" netns "$ns_cli"
ip -n "$ns_srv" addr add "$srv_ip/24" dev "$veth_srv"
ip -n "$ns_cli" addr add "$cli_ip/24" dev "$veth_cli"
for ns in "$ns_srv" "$ns_cli"; do ip -n "$ns" link set lo up; done
ip -n "$ns_srv" link set "$veth_srv" up
ip -n "$ns_cli" link set "$veth_cli" up

in_srv() { ip netns exec "$ns_srv" "$@"; }
in_cli() { ip netns exec "$ns_cli" "$@"; }

# The order checks need a link that keeps order, and a veth pair alone does
# not: each packet goes to the receive backlog of the CPU that sent it (the
# sender's, or whichever CPU ran the tbf or htb qdisc), the two CPUs' backlogs
# drain independently, and when one stalls (a starved ksoftirqd, a preempted
# vCPU) the other delivers later packets first. Under tbf that gave 1 to 4
# order errors in about 1 run of the rate fault in 10. With RPS on each
# veth's receive queue, every packet goes to CPU 0's backlog in the order it
# left the peer. (Only the htb of the reorder fault reorders, on purpose.)
for side in "$ns_srv $veth_srv" "$ns_cli $veth_cli"; do
  read -r ns dev <<<"$side"
  if ! ip netns exec "$ns" sh -c "echo 1 >/sys/class/net/$dev/queues/rx-0/rps_cpus" 2>"$work/err"; then
    need "this kernel lacks RPS, needed to keep the veth link in order: $(tr '\n' ' ' <"$work/err")"
  fi
done
# Known neighbours, so no ARP: the datagrams sent before an ARP reply wait
# in the neighbour's queue, and the ones sent while that queue is flushed
# can overtake them (order errors in the first window of the first fault).
mac_srv=$(in_srv cat "/sys/class/net/$veth_srv/address")
mac_cli=$(in_cli cat "/sys/class/net/$veth_cli/address")
in_cli ip neigh replace "$srv_ip" lladdr "$mac_srv" dev "$veth_cli" nud permanent
in_srv ip neigh replace "$cli_ip" lladdr "$mac_cli" dev "$veth_srv" nud permanent

# Probe that the kernel really has what the faults use, so a missing
# feature is a clear message rather than a half-applied fault.
probe() {
  local what="$1"; shift
  if ! "$@" >/dev/null 2>"$work/err"; then
    need "this kernel lacks $what: $(tr '\n' ' ' <"$work/err")"
  fi
}
probe "nftables" in_srv nft add table ip keelprobe
probe "nftables numgen" in_srv nft add chain ip keelprobe c \
  '{ type filter hook output priority 0; policy accept; }'
probe "nftables numgen" in_srv nft add rule ip keelprobe c numgen random mod 2 0 counter
in_srv nft delete table ip keelprobe

clear_faults() {
  for ns in "$ns_srv" "$ns_cli"; do ip netns exec "$ns" nft flush ruleset; done
  in_srv tc qdisc del dev "$veth_srv" root 2>/dev/null || true
  in_cli tc qdisc del dev "$veth_cli" root 2>/dev/null || true
}

# A filter chain in table `ip keel` of namespace $1 on hook $2 (output or
# input), made once.
chain() {
  ip netns exec "$1" nft list chain ip keel "$2" >/dev/null 2>&1 && return 0
  ip netns exec "$1" nft add table ip keel
  ip netns exec "$1" nft add chain ip keel "$2" \
    "{ type filter hook $2 priority 0; policy accept; }"
}

fault_none() { :; }

fault_loss() {
  # Dropped on the receiving side (input hook), as a lossy wire would: the
  # sender sees nothing. (A drop in the sender's output hook would instead
  # fail its sendmsg with EPERM, which keel counts as a send error.)
  chain "$ns_srv" input; chain "$ns_cli" input
  in_srv nft add rule ip keel input ip saddr "$cli_ip" udp dport "$port" numgen random mod 20 0 counter drop
  in_cli nft add rule ip keel input ip saddr "$srv_ip" udp sport "$port" numgen random mod 20 0 counter drop
}

fault_rate() {
  in_srv tc qdisc add dev "$veth_srv" root tbf rate 10mbit burst 32kbit latency 50ms
  in_cli tc qdisc add dev "$veth_cli" root tbf rate 10mbit burst 32kbit latency 50ms
}

fault_reorder() {
  in_srv tc qdisc add dev "$veth_srv" root handle 1: htb default 10
  in_srv tc class add dev "$veth_srv" parent 1: classid 1:10 htb rate 10gbit quantum 1514
  in_srv tc class add dev "$veth_srv" parent 1: classid 1:20 htb rate 20mbit ceil 20mbit \
    burst 1600 cburst 1600 quantum 1514
  chain "$ns_srv" output
  # skb->priority 1:20 selects htb class 1:20 (htb reads skb->priority first).
  in_srv nft add rule ip keel output ip daddr "$cli_ip" udp sport "$port" \
    numgen random mod 10 0 counter meta priority set 1:20
}

fault_duplicate() {
  chain "$ns_srv" output
  # `dup to` needs the ip (or netdev) family: inet says "unsupported family".
  in_srv nft add rule ip keel output ip daddr "$cli_ip" udp sport "$port" \
    numgen random mod 10 0 counter dup to "$cli_ip" device "$veth_srv"
}

fault_mixed() {
  # Loss on input (both sides); reorder and duplicate on the server's output.
  fault_loss
  fault_reorder
  fault_duplicate
}

# A counter, first in the client's input chain, of the echoes that reach
# the client's host (before any loss rule): with the server's count of
# echoes sent it tells how many copies the kernel made. (The counter of the
# dup rule itself cannot: the copy goes through the same output chain and is
# matched again, though not copied again.)
count_arrivals() {
  chain "$ns_cli" input
  in_cli nft insert rule ip keel input ip saddr "$srv_ip" udp sport "$port" counter
}

# "nft_dropped N arrived N qdisc_dropped_srv N qdisc_dropped_cli N":
# packets the nftables drop rules dropped (both namespaces), echoes that
# reached the client's host, packets the server's and the client's qdisc
# dropped (a full tbf queue).
kernel_counts() {
  local rules
  rules=$(for ns in "$ns_srv" "$ns_cli"; do ip netns exec "$ns" nft list ruleset; done)
  qdisc_drops() {
    awk '/^qdisc/ { root = ($0 ~ / root /) ; next }
         root && match($0, /dropped [0-9]+/) { n += substr($0, RSTART + 8, RLENGTH - 8) }
         END { print n + 0 }'
  }
  printf 'nft_dropped %s arrived %s qdisc_dropped_srv %s qdisc_dropped_cli %s\n' \
    "$(awk '/counter packets/ && / drop/ { for (i = 1; i < NF; i++) if ($i == "packets") n += $(i + 1) } END { print n + 0 }' <<<"$rules")" \
    "$(in_cli nft list chain ip keel input | awk '/counter packets/ && !/ drop/ && /sport/ { for (i = 1; i < NF; i++) if ($i == "packets") { print $(i + 1); exit } }')" \
    "$(in_srv tc -s qdisc show dev "$veth_srv" | qdisc_drops)" \
    "$(in_cli tc -s qdisc show dev "$veth_cli" | qdisc_drops)"
}

# Starts the server in the server namespace; it ends by itself after a bound
# (seconds + drain + margin) if the TERM below never comes.
start_server() {
  local bound
  bound=$(python3 -c "print(int($seconds) + 30)")
  # Not through in_srv: $! must be the server itself (ip netns exec execs
  # it), not a subshell, so that the TERM below reaches it.
  ip netns exec "$ns_srv" "$bench" serve --bind "$srv_ip:$port" --seconds "$bound" \
    >"$work/serve.json" 2>"$work/serve.err" &
  server_pid=$!
  for _ in $(seq 100); do
    grep -q listening "$work/serve.err" 2>/dev/null && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "$PROG: server did not start: $(cat "$work/serve.err")" >&2
  return 1
}

stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true
  local status=0
  wait "$server_pid" 2>/dev/null || status=$?
  server_pid=""
  return "$status"
}

client_flags=(--clients 4 --window 16 --payload 1024 --warmup 0 --loss-timeout 200)
if [ ${#extra[@]} -gt 0 ]; then client_flags=("${extra[@]}"); fi

failed=0
k=0
for fault in "${faults[@]}"; do
  k=$((k + 1))
  echo "$PROG: [$k/${#faults[@]}] $fault: $seconds s of clients against serve, across the veth pair ..." >&2
  clear_faults
  count_arrivals
  "fault_$fault"
  start_server
  t0=$(date +%s.%N)
  set +e
  # In the background and waited for, so that a signal to this script runs
  # the cleanup at once (bash defers traps until a foreground child ends).
  # Bounded like the server: a client that never ends is killed (exit 124
  # or 137, a failed check) instead of holding the script forever.
  ip netns exec "$ns_cli" timeout --kill-after=5 "$(python3 -c "print(int($seconds) + 30)")" \
    "$bench" --connect "$srv_ip:$port" --seconds "$seconds" \
    "${client_flags[@]}" >"$work/client.json" 2>"$work/client.err" &
  client_pid=$!
  wait "$client_pid"
  client_status=$?
  client_pid=""
  set -e
  t1=$(date +%s.%N)
  server_status=0
  stop_server || server_status=$?
  # What the kernel itself did: packets the nftables rules dropped and
  # duplicated, packets the qdiscs dropped (a full tbf queue).
  kernel_counts >"$work/kernel"
  clear_faults
  # One line per fault, and the checks, from the two JSON lines.
  set +e
  python3 - "$fault" "$client_status" "$server_status" "$t0" "$t1" "$seconds" "$k/${#faults[@]}" \
    "$work/client.json" "$work/client.err" "$work/serve.json" "$work/serve.err" \
    "$json_out" "$work/kernel" <<'EOF'
import json, sys
(fault, cstatus, sstatus, t0, t1, seconds, step, cjson, cerr, sjson, serr, out, kfile) = sys.argv[1:]
kv = open(kfile).read().split()
kernel = {kv[i]: int(kv[i + 1]) for i in range(0, len(kv) - 1, 2)}
cstatus, sstatus = int(cstatus), int(sstatus)
wall = float(t1) - float(t0)
problems = []
def load(path, who):
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.strip()]
        if len(lines) != 1:
            problems.append(f"{who} printed {len(lines)} lines, expected 1")
        return json.loads(lines[-1]) if lines else {}
    except Exception as e:
        problems.append(f"{who} JSON unreadable: {e}")
        return {}
c = load(cjson, "client")
s = load(sjson, "server")
for path, who in ((cerr, "client"), (serr, "server")):
    text = open(path, errors="replace").read()
    if "panicked" in text:
        problems.append(f"{who} panicked: {text.strip()[-300:]}")
if cstatus in (124, 137):
    problems.append(f"client killed after {int(float(seconds)) + 30} s (it never ended)")
elif cstatus not in (0, 1):
    problems.append(f"client exit {cstatus}")
if sstatus != 0:
    problems.append(f"server exit {sstatus}")
g = lambda k: c.get(k) or 0
sent, done, lost = g("messages_sent"), g("messages"), g("udp_lost_messages")
order, content = g("order_errors"), g("content_errors")
# On time by the client's own clock, from its measured phase to the end of
# its drain: the wall time adds the process's start, namespace and
# handshakes, which a loaded machine stretches (7 to 10 s seen for 0.5 s
# runs with busy loops on two cores); the kill above bounds that.
elapsed = c.get("elapsed_seconds") or 0.0
limit = float(seconds) + 2.0 + 1.5
if elapsed > limit:
    problems.append(f"client ran {elapsed:.2f} s from its measured phase to the end of its "
                    f"drain, more than {limit:.2f} s")
if g("drain_timeouts") != 0:
    problems.append("drain timeout")
if sent != done + lost + order + content:
    problems.append(f"sent {sent} != completed {done} + lost {lost} + order {order} + content {content}")
# What the kernel did. Copies made = echoes that reached the client's host
# - (echoes the server sent - those its qdisc dropped).
echoed = s.get("datagrams_out") or 0
dups_made = kernel["arrived"] - (echoed - kernel["qdisc_dropped_srv"])
rcvbuf = g("kernel_rcvbuf_drops") + (s.get("kernel_rcvbuf_drops") or 0)
kernel_lost = (kernel["nft_dropped"] + kernel["qdisc_dropped_srv"]
               + kernel["qdisc_dropped_cli"] + rcvbuf)
# Every message lost is one datagram the kernel dropped: by the nftables
# rule, in a full qdisc, or in a full socket buffer (SO_RXQ_OVFL on either
# side). With copies, a copy can stand in for a dropped echo, and a dropped
# copy loses nothing: then losses are at most the drops.
if dups_made == 0 and lost != kernel_lost:
    problems.append(f"lost {lost} != kernel drops {kernel_lost} (nft {kernel['nft_dropped']}, "
                    f"qdisc {kernel['qdisc_dropped_srv']}+{kernel['qdisc_dropped_cli']}, rcvbuf {rcvbuf})")
if dups_made > 0 and lost > kernel_lost:
    problems.append(f"lost {lost} > kernel drops {kernel_lost}")
# Every copy that reached the client is a duplicate; only the copies of the
# last window can still be in flight when the run closes its clients, and
# with loss rules some copies are dropped.
dup = g("unexpected_messages")
if dup > dups_made:
    problems.append(f"duplicates {dup} > copies the kernel made {dups_made}")
in_flight = (c.get("clients") or 0) * (c.get("window") or 0)
if kernel["nft_dropped"] == 0 and dups_made - dup > in_flight:
    problems.append(f"duplicates {dup}, but the kernel made {dups_made}")
if sent == 0:
    problems.append("nothing sent")
if fault == "none" and not c.get("ok"):
    problems.append(f"baseline not ok: {c.get('error')}")
if fault in ("loss", "mixed") and lost == 0:
    problems.append("loss fault but nothing lost")
if fault in ("reorder", "mixed") and order == 0:
    problems.append("reorder fault but no order_errors")
if fault in ("duplicate", "mixed") and g("unexpected_messages") == 0:
    problems.append("duplicate fault but no unexpected_messages")
rps = c.get("roundtrips_per_second") or 0.0
p50 = c.get("rtt_p50_us")
print(f"fault={fault} sent={sent} echoed={s.get('datagrams_out', 'na')} completed={done} "
      f"lost={lost} late={g('late_echoes')} order={order} duplicate={g('unexpected_messages')} "
      f"content={content} kernel_dropped={kernel_lost} kernel_copies={dups_made} "
      f"rps={rps:.0f} p50_us={p50 if p50 is not None else 'na'} "
      f"elapsed_s={c.get('elapsed_seconds', 0):.3f} wall_s={wall:.3f} exit={cstatus} "
      f"checks={'ok' if not problems else 'FAILED'}", flush=True)
progress = (f"checks ok, {rps:,.0f} rt/s, {sent:,} sent, {lost:,} lost, {order:,} reordered, "
            f"{g('unexpected_messages'):,} duplicated" if not problems
            else f"FAILED: {len(problems)} check(s), below")
print(f"faults.sh: [{step}] {fault}: {progress}", file=sys.stderr)
for p in problems:
    print(f"faults.sh: {fault}: {p}", file=sys.stderr)
if out:
    c["fault"] = fault
    c["server"] = s
    c["kernel"] = kernel
    with open(out, "a") as f:
        f.write(json.dumps(c) + "\n")
sys.exit(1 if problems else 0)
EOF
  [ $? -eq 0 ] || failed=1
  set -e
done
exit "$failed"
