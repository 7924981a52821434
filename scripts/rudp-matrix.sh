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
# Writes OUT_DIR/results.jsonl (one keel-bench line per run) and prints a
# Markdown table per case of medians over the seeds. Environment:
# SECONDS_PER_RUN (default 10), BULK_SECONDS (default 15), SEEDS (default
# "1 2 3"), CLIENTS (default 8), LOSSES (default "0 1 5 10 20"), JITTER
# (default 3ms), KCP_WINDOW (default 128), KEEL_BENCH (default: build and
# use target/release/keel-bench). About 5 min for tick and 10-15 min for
# bulk with the defaults.
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
        n = f"KCP {r.get('kcp_mode')}"
        if r.get("transfer_bytes"):
            n += f" stream, window {r.get('kcp_window')}"
        return n
    n = f"keel-rudp {r.get('channel')}"
    return n + (" bulk channel" if r.get("bulk_channel") else "")
tick = [r for r in rows if not r.get("transfer_bytes")]
bulk = [r for r in rows if r.get("transfer_bytes")]
def cells(rs):
    """(loss, name) -> rows, in loss then first-seen order."""
    out = {}
    for loss in losses:
        p = float(loss) / 100
        for r in rs:
            if abs(loss_of(r) - p) < 1e-9:
                out.setdefault((loss, name(r)), []).append(r)
    return out
if tick:
    print("| loss each way | protocol | runs ok | p50 ms | p99 ms | p99.9 ms | max ms | wire bytes / payload byte | resent |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (loss, n), rs in cells(tick).items():
        ok = sum(1 for r in rs if r["ok"])
        wire = med([r.get("wire_bytes_per_payload_byte") for r in rs])
        resent = med([r.get("messages_resent") for r in rs])
        print(f"| {loss} % | {n} | {ok}/{len(rs)} | {ms(med([r['rtt_p50_us'] for r in rs]))} | "
              f"{ms(med([r['rtt_p99_us'] for r in rs]))} | {ms(med([r['rtt_p999_us'] for r in rs]))} | "
              f"{ms(med([r['rtt_max_us'] for r in rs]))} | "
              f"{'-' if wire is None else f'{wire:.3f}'} | {'-' if resent is None else int(resent)} |")
if tick and bulk:
    print()
if bulk:
    # Completion times and goodput of every run (ok or not: a failed run's
    # completed transfers still happened), medians over the seeds; "runs
    # ok" says how many runs passed, and "transfers" sums them.
    print("| loss each way | protocol | runs ok | transfers | completion p50 ms | p99 ms | max ms | goodput MB/s | wire bytes / payload byte |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (loss, n), rs in cells(bulk).items():
        ok = sum(1 for r in rs if r["ok"])
        wire = med([r.get("wire_bytes_per_payload_byte") for r in rs if r["ok"]])
        good = med([r.get("goodput_bytes_per_second") or 0.0 for r in rs])
        print(f"| {loss} % | {n} | {ok}/{len(rs)} | {sum(r['messages'] for r in rs)} | "
              f"{ms(med([r['rtt_p50_us'] for r in rs]))} | {ms(med([r['rtt_p99_us'] for r in rs]))} | "
              f"{ms(med([r['rtt_max_us'] for r in rs]))} | {good / 1e6:.2f} | "
              f"{'-' if wire is None else f'{wire:.3f}'} |")
PY
