#!/usr/bin/env bash
# keel-rudp against KCP fast under loss: the game-tick matrix of issue 13.
#
#   scripts/rudp-matrix.sh [OUT_DIR]
#
# Every cell: --clients CLIENTS each sending 400-byte messages at 60 Hz
# (open loop, --rate 60) for SECONDS, echoed back on a reliable-ordered
# channel; loss L on each direction (--impair on the clients' sends,
# --impair-server on the server's), 25 ms delay and 3 ms jitter each way
# (a 50 ms RTT), one seed per repetition. Loss 0, 1, 5, 10, 20 %;
# keel-rudp (reliable-ordered) and KCP fast. Writes OUT_DIR/results.jsonl
# (one keel-bench line per run), then runs `keel-bench report` on it:
# OUT_DIR/report.md (its "Latency under loss" table: medians over the
# seeds per loss and protocol, p50/p99/p99.9/max ms, wire bytes per payload
# byte, resent, runs ok; failed seeds listed) and OUT_DIR/rudp-p99.svg
# (p99 against loss, one line per protocol). report.md is also printed on
# stdout. Environment: SECONDS_PER_RUN (default 10), SEEDS (default
# "1 2 3"), CLIENTS (default 8), LOSSES (default "0 1 5 10 20"),
# KEEL_BENCH (default: build and use target/release/keel-bench).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-target/rudp-matrix}
secs=${SECONDS_PER_RUN:-10}
seeds=${SEEDS:-1 2 3}
clients=${CLIENTS:-8}
losses=${LOSSES:-0 1 5 10 20}
if [ -z "${KEEL_BENCH:-}" ]; then
  cargo build --release -q -p keel-bench
  KEEL_BENCH=target/release/keel-bench
fi
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

for loss in $losses; do
  for proto in rudp kcp; do
    for seed in $seeds; do
      p=$(awk "BEGIN { printf \"%.2f\", $loss / 100 }")
      c="loss=$p,delay=25ms,jitter=3ms,seed=$seed"
      s="loss=$p,delay=25ms,jitter=3ms,seed=$((seed + 1000))"
      echo "rudp-matrix: $proto loss=$loss% seed=$seed" >&2
      # A failed run still prints its line (ok: false); keep going.
      "$KEEL_BENCH" --protocol "$proto" --rate 60 --payload 400 --clients "$clients" \
        --seconds "$secs" --warmup 1 --impair "$c" --impair-server "$s" \
        --format json >>"$results" || true
    done
  done
done

# The table and chart: keel-bench report groups the runs by loss and
# protocol (seeds are the repetitions).
"$KEEL_BENCH" report "$results" --out "$out"
cat "$out/report.md"
