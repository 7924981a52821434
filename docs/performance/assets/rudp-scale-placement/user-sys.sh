#!/usr/bin/env bash
# The server thread's user and system CPU time per message in one run of
# the scale cell, under a placement of placement.sh (free, server, split,
# one), from /proc/PID/task/TID/stat (clock ticks of 10 ms) over 5 s of
# the measured phase; and, with SYSCALLS=1, the system calls and context
# switches of the server's thread per message over those 5 s (perf stat
# on the tracepoints of the system calls an echo can make; needs perf and
# root). Tracing slows each call, which changes how many datagrams a
# wake-up finds: read the counts, not the times, of a SYSCALLS=1 run.
#
#   user-sys.sh PROTOCOL CONNS RATE [PLACEMENT]
#   e.g. user-sys.sh rudp 1000 20 split
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
PROG=user-sys.sh
# shellcheck source=../../../../scripts/lib.sh
source "$ROOT/scripts/lib.sh"
proto=$1 conns=$2 rate=$3 mode=${4:-free}
kb=${KEEL_BENCH:-$ROOT/target/release/keel-bench}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ulimit -n $((conns * 2 + 256))
"$kb" --protocol "$proto" --rate "$rate" --payload 100 --clients "$conns" --seconds 12 \
  --warmup 2 --format json >"$tmp/line" &
pid=$!
place_threads "$pid" "$mode"
server=""
until [[ -n $server ]]; do
  kill -0 "$pid" 2>/dev/null || { echo "$PROG: keel-bench ended: $(cat "$tmp/line")" >&2; exit 1; }
  sleep 0.02
  server=$(grep -lx keel-shared-0 /proc/"$pid"/task/*/comm 2>/dev/null | head -1 | cut -d/ -f5)
done
sleep 4
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/task/$server/stat)
if [[ ${SYSCALLS:-0} == 1 ]]; then
  ev=context-switches
  for c in epoll_wait recvmmsg sendmmsg sendto recvfrom sendmsg recvmsg futex write read; do
    ev+=,syscalls:sys_enter_$c
  done
  perf stat -t "$server" -e "$ev" -- sleep 5 2>"$tmp/perf"
else
  sleep 5
fi
read -r u2 s2 < <(awk '{print $14, $15}' /proc/$pid/task/$server/stat)
wait $pid || true
n=$((conns * rate * 5))
awk -v u=$((u2 - u1)) -v s=$((s2 - s1)) -v n=$n -v p="$proto" -v m="$mode" \
  'BEGIN { printf "%s %s: user %.2f system %.2f µs a message\n", p, m, u * 10000 / n, s * 10000 / n }'
if [[ -f $tmp/perf ]]; then
  awk -v n=$n '$1 ~ /^[0-9,]+$/ { gsub(",", "", $1); if ($1 > 0) printf "  %-36s %.3f a message\n", $2, $1 / n }' "$tmp/perf"
fi
