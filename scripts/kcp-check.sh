#!/usr/bin/env bash
# Checks the harness against KCP's own published simulation (test.cpp in
# KCP's repository): 10 % round-trip loss (5 % each way), RTT 60-125 ms
# (30-62 ms each way, uniform), one 8-byte message every 20 ms echoed back,
# 1,000 messages (20 s), windows of 128. KCP published (avg / max RTT, ms):
# default 740 / 1507, normal 156 / 571, fast 138 / 392. The default-mode
# figure predates KCP's current code: today's ikcp.c in that same simulation
# averages 2-6 s (so does the kcp crate, to the millisecond), see
# docs/performance/rudp.md and the test in bench-cli/src/kcp.rs.
#
# As KCP's test waits until every message is back, the drain may take up to
# 60 s: default mode falls behind the 50 Hz sender and needs seconds to
# deliver its backlog; a 2 s drain would drop the slowest messages from the
# average.
#
#   scripts/kcp-check.sh [SECONDS] [SEEDS]     (defaults: 20, "1 2 3")
#
# Differences from the simulation, on purpose or unavoidable: keel-bench's
# smallest message is 16 bytes (its header), not 8; KCP runs over real
# loopback sockets through keel-udp's conditioner, whose jitter lets
# datagrams overtake each other (the simulation's queues are FIFO); RTT is
# measured in microseconds, not whole milliseconds.
#
# Prints the table on stdout (no files). KEEL_BENCH: the binary (default:
# build and use target/release/keel-bench). Exit status 2 on bad arguments.
set -euo pipefail
PROG="kcp-check.sh"
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case "${1:-}" in
  -h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
    ;;
esac
[[ $# -le 2 ]] || die "at most two arguments, SECONDS and SEEDS (see --help)"
cd "$(dirname "$0")/.."
secs=${1:-20}
seeds=${2:-1 2 3}
[[ "$secs" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk -v v="$secs" 'BEGIN { exit !(v > 0 && v <= 3600) }' ||
  die "SECONDS: expected a decimal number of seconds, 0 < s <= 3600, got \"$secs\""
for seed in $seeds; do
  [[ "$seed" =~ ^[0-9]+$ && ${#seed} -le 9 ]] || die "SEEDS: expected integers, got \"$seed\" in \"$seeds\""
done
[[ -n "${seeds// /}" ]] || die "SEEDS: empty"
keel_bench_check
keel_bench_ready
echo "| mode | seed | messages | ok | avg RTT ms | max RTT ms | published avg / max ms |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for mode in default normal fast; do
  case $mode in
    default) pub="740 / 1507 (stale)" ;;
    normal) pub="156 / 571" ;;
    fast) pub="138 / 392" ;;
  esac
  for seed in $seeds; do
    "$KEEL_BENCH" --protocol kcp --kcp-mode "$mode" --rate 50 --payload 16 --clients 1 \
      --seconds "$secs" --warmup 0 --drain 60 \
      --impair "loss=0.05,delay=46ms,jitter=16ms,seed=$seed" \
      --impair-server "loss=0.05,delay=46ms,jitter=16ms,seed=$((seed + 1000))" \
      --format json | python3 -c "
import json, sys
r = json.load(sys.stdin)
f = lambda x: '-' if x is None else f'{x / 1000:.0f}'
print(f\"| $mode | $seed | {r['messages']} | {r['ok']} | {f(r['rtt_mean_us'])} | {f(r['rtt_max_us'])} | $pub |\")
" || true
  done
done
