#!/usr/bin/env bash
# keel-rudp against KCP fast under loss: the matrices of issue 13.
#
#   scripts/rudp-matrix.sh [OUT_DIR]
#
# Loss L on each direction (--impair on the clients' sends, --impair-server
# on the server's), 25 ms delay and JITTER (default 3 ms) each way (a 50 ms
# RTT; jitter can reorder), one seed per repetition; loss 0, 1, 5, 10,
# 20 %. Two cases, picked by CASES (default "tick bulk"):
#
# * tick: --clients CLIENTS each sending 400-byte messages at 60 Hz (open
#   loop, --rate 60) for SECONDS_PER_RUN, echoed back on a reliable-ordered
#   channel; keel-rudp (reliable-ordered) and KCP fast.
# * bulk: one client sending 1 MiB messages (--transfer 1048576), one at a
#   time, each answered by a 16-byte receipt, for BULK_SECONDS with no
#   warm-up (a warm-up transfer would spill into the measured phase);
#   keel-rudp on a plain reliable-ordered channel, keel-rudp with
#   --bulk-channel (congestion control and pacing) and KCP fast in stream
#   mode (KCP_WINDOW packets, default 128); BULK_PROTOCOLS picks among
#   "rudp rudp-bulk kcp".
#
# Writes OUT_DIR/results.jsonl (one keel-bench line per run), then runs
# `keel-bench report` on it: OUT_DIR/report.md (its "Latency under loss"
# and "Bulk transfers" tables: medians over the seeds that passed, failed
# seeds listed) and charts (rudp-p99.svg, rudp-bulk.svg); report.md is
# also printed on stdout. For the bulk case it then prints one more
# Markdown table, over every run, failed ones included (a run that
# completed nothing counts with a goodput of 0): loss, protocol, runs ok,
# transfers, completion p50/p99/max ms, goodput MB/s, wire bytes per
# payload byte. Environment: SECONDS_PER_RUN (default 10), BULK_SECONDS
# (default 15), SEEDS (default "1 2 3"), CLIENTS (default 8), LOSSES
# (default "0 1 5 10 20"), JITTER (default 3ms), KCP_WINDOW (default 128),
# KEEL_BENCH (default: build and use target/release/keel-bench). About
# 5 min for tick and 10-15 min for bulk with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-target/rudp-matrix}
secs=${SECONDS_PER_RUN:-10}
bulk_secs=${BULK_SECONDS:-15}
seeds=${SEEDS:-1 2 3}
clients=${CLIENTS:-8}
losses=${LOSSES:-0 1 5 10 20}
cases=${CASES:-tick bulk}
jitter=${JITTER:-3ms}
kcp_window=${KCP_WINDOW:-128}
bulk_protocols=${BULK_PROTOCOLS:-rudp rudp-bulk kcp}
if [ -z "${KEEL_BENCH:-}" ]; then
  cargo build --release -q -p keel-bench
  KEEL_BENCH=target/release/keel-bench
fi
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

# impair_specs LOSS SEED: the clients' and the server's conditioner specs.
impair_specs() {
  local p
  p=$(awk "BEGIN { printf \"%.2f\", $1 / 100 }")
  c="loss=$p,delay=25ms,jitter=$jitter,seed=$2"
  s="loss=$p,delay=25ms,jitter=$jitter,seed=$(($2 + 1000))"
}

for case in $cases; do
  case $case in
    tick)
      for loss in $losses; do
        for proto in rudp kcp; do
          for seed in $seeds; do
            impair_specs "$loss" "$seed"
            echo "rudp-matrix: tick $proto loss=$loss% seed=$seed" >&2
            # A failed run still prints its line (ok: false); keep going.
            "$KEEL_BENCH" --protocol "$proto" --rate 60 --payload 400 --clients "$clients" \
              --seconds "$secs" --warmup 1 --impair "$c" --impair-server "$s" \
              --format json >>"$results" || true
          done
        done
      done
      ;;
    bulk)
      for loss in $losses; do
        for proto in $bulk_protocols; do
          case $proto in
            rudp) args=(--protocol rudp) ;;
            rudp-bulk) args=(--protocol rudp --bulk-channel) ;;
            kcp) args=(--protocol kcp --kcp-window "$kcp_window") ;;
            *) echo "rudp-matrix: unknown bulk protocol $proto (rudp, rudp-bulk, kcp)" >&2; exit 2 ;;
          esac
          for seed in $seeds; do
            impair_specs "$loss" "$seed"
            echo "rudp-matrix: bulk $proto loss=$loss% seed=$seed" >&2
            "$KEEL_BENCH" "${args[@]}" --transfer 1048576 --clients 1 \
              --seconds "$bulk_secs" --warmup 0 --impair "$c" --impair-server "$s" \
              --format json >>"$results" || true
          done
        done
      done
      ;;
    *)
      echo "rudp-matrix: unknown case $case (CASES takes tick and bulk)" >&2
      exit 2
      ;;
  esac
done

# The tables and charts: keel-bench report groups the runs by loss and
# protocol (seeds are the repetitions).
"$KEEL_BENCH" report "$results" --out "$out"
cat "$out/report.md"

# The bulk table over every run, failed ones included.
python3 - "$results" "$losses" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
losses = sys.argv[2].split()
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def ms(x):
    return "-" if x is None else f"{x / 1000:.1f}"
def loss_of(r):
    return float(r["impair"].split("loss=")[1].split(",")[0]) if r.get("impair") else 0.0
def name(r):
    if r["protocol"] == "kcp":
        return f"KCP {r.get('kcp_mode')} stream, window {r.get('kcp_window')}"
    n = f"keel-rudp {r.get('channel')}"
    return n + (" bulk channel" if r.get("bulk_channel") else "")
bulk = [r for r in rows if r.get("transfer_bytes")]
cells = {}
for loss in losses:
    p = float(loss) / 100
    for r in bulk:
        if abs(loss_of(r) - p) < 1e-9:
            cells.setdefault((loss, name(r)), []).append(r)
if bulk:
    # Completion times and goodput of every run (ok or not: a failed run's
    # completed transfers still happened), medians over the seeds; "runs
    # ok" says how many runs passed, and "transfers" sums them.
    print()
    print("Bulk, every run (failed ones included):")
    print()
    print("| loss each way | protocol | runs ok | transfers | completion p50 ms | p99 ms | max ms | goodput MB/s | wire bytes / payload byte |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (loss, n), rs in cells.items():
        ok = sum(1 for r in rs if r["ok"])
        wire = med([r.get("wire_bytes_per_payload_byte") for r in rs if r["ok"]])
        good = med([r.get("goodput_bytes_per_second") or 0.0 for r in rs])
        print(f"| {loss} % | {n} | {ok}/{len(rs)} | {sum(r['messages'] for r in rs)} | "
              f"{ms(med([r['rtt_p50_us'] for r in rs]))} | {ms(med([r['rtt_p99_us'] for r in rs]))} | "
              f"{ms(med([r['rtt_max_us'] for r in rs]))} | {good / 1e6:.2f} | "
              f"{'-' if wire is None else f'{wire:.3f}'} |")
PY
