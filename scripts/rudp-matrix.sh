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
# (one keel-bench line per run) and prints a Markdown table of medians over
# the seeds. Environment: SECONDS_PER_RUN (default 10), SEEDS (default
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

python3 - "$results" "$losses" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
losses = sys.argv[2].split()
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def ms(x):
    return "-" if x is None else f"{x / 1000:.1f}"
print("| loss each way | protocol | runs ok | p50 ms | p99 ms | p99.9 ms | max ms | wire bytes / payload byte | resent |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for loss in losses:
    p = float(loss) / 100
    for proto in ["rudp", "kcp"]:
        rs = [r for r in rows if r["protocol"] == proto and r.get("impair")
              and abs(float(r["impair"].split("loss=")[1].split(",")[0]) - p) < 1e-9]
        if not rs:
            continue
        ok = sum(1 for r in rs if r["ok"])
        name = "keel-rudp reliable-ordered" if proto == "rudp" else f"KCP {rs[0].get('kcp_mode')}"
        wire = med([r.get("wire_bytes_per_payload_byte") for r in rs])
        resent = med([r.get("messages_resent") for r in rs])
        print(f"| {loss} % | {name} | {ok}/{len(rs)} | {ms(med([r['rtt_p50_us'] for r in rs]))} | "
              f"{ms(med([r['rtt_p99_us'] for r in rs]))} | {ms(med([r['rtt_p999_us'] for r in rs]))} | "
              f"{ms(med([r['rtt_max_us'] for r in rs]))} | "
              f"{'-' if wire is None else f'{wire:.3f}'} | {'-' if resent is None else int(resent)} |")
PY
