#!/usr/bin/env bash
# keel-rudp against KCP fast under loss: the matrices of issue 13.
#
#   scripts/rudp-matrix.sh [--out DIR] [--overwrite] [OUT_DIR]   (--help for more)
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
# Writes OUT_DIR/results.jsonl (one keel-bench line per run, with "case":
# "latency" or "bulk" added, which files it in `keel-bench report`'s
# "Latency under loss" or "Bulk transfers" table whatever its client
# count), then runs `keel-bench report` on it: OUT_DIR/report.md (medians
# over the seeds that passed, failed seeds listed) and charts
# (rudp-p99.svg, rudp-bulk.svg); report.md is also printed on stdout. For
# the bulk case it then prints one more Markdown table (also written to
# OUT_DIR/bulk.md), over every run, failed ones included (a run that
# completed nothing counts with a goodput of 0): loss, protocol, runs ok,
# transfers, completion p50/p99/max ms, goodput MB/s, wire bytes per
# payload byte. The settings are environment variables (see --help); all
# of them are checked before anything runs or any file is touched. About
# 5 min for tick and 10-15 min for bulk with the defaults.
#
# Exit status: 0 the matrix ran (failed runs are results: their lines say
# ok: false and the report lists them); 1 keel-bench could not be built or
# its report failed; 2 bad arguments or settings, or OUT_DIR holds an
# earlier matrix (without --overwrite).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="rudp-matrix.sh"

usage() {
  cat <<EOF
Usage: scripts/rudp-matrix.sh [--out DIR] [--overwrite] [OUT_DIR]

keel-rudp against KCP fast under 0-20 % loss each way, 25 ms delay each way:
the game-tick case (CLIENTS clients at 60 Hz) and the bulk case (1 MiB
transfers). Writes DIR/results.jsonl (one keel-bench line per run),
DIR/report.md and charts (keel-bench report), DIR/bulk.md; prints report.md.

  --out DIR, OUT_DIR   where the results go (default: out/rudp-matrix); an
                       earlier matrix there (a non-empty results.jsonl) is
                       refused unless --overwrite
  --overwrite          replace an earlier matrix's results in DIR
  -h, --help           this text

Environment (lists are space or comma separated; checked before any run):
  CASES            "tick bulk" (default) or either one
  LOSSES           loss % each way, 0..100    (default: "0 1 5 10 20")
  SEEDS            seeds, integers            (default: "1 2 3")
  CLIENTS          tick clients, 1..10000     (default: 8)
  SECONDS_PER_RUN  tick measured phase, s     (default: 10; 0 < s <= 3600)
  BULK_SECONDS     bulk measured phase, s     (default: 15; 0 < s <= 3600)
  JITTER           jitter each way, e.g. 3ms, 500us, 0 (default: 3ms; <= 25ms)
  KCP_WINDOW       KCP windows, packets, 1..32768 (default: 128)
  BULK_PROTOCOLS   among "rudp rudp-bulk kcp" (default: all three)
  KEEL_BENCH       keel-bench binary (default: build target/release/keel-bench)

About 5 min for tick and 10-15 min for bulk with the defaults.

Exit status: 0 the matrix ran (failed runs are results, listed in the report);
1 keel-bench could not be built or its report failed; 2 bad arguments or
settings, or an earlier matrix in DIR without --overwrite.
EOF
}

# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

# --- arguments ----------------------------------------------------------------

parse_out_args -- "$@"
out=${out:-out/rudp-matrix}

# --- settings: every value checked before anything runs ---------------------

secs=${SECONDS_PER_RUN:-10}
bulk_secs=${BULK_SECONDS:-15}
seeds=$(list SEEDS "1 2 3")
clients=${CLIENTS:-8}
losses=$(list LOSSES "0 1 5 10 20")
cases=$(list CASES "tick bulk")
jitter=${JITTER:-3ms}
kcp_window=${KCP_WINDOW:-128}
bulk_protocols=$(list BULK_PROTOCOLS "rudp rudp-bulk kcp")

seconds_ok SECONDS_PER_RUN "$secs"
seconds_ok BULK_SECONDS "$bulk_secs"
for s in $seeds; do
  uint_ok SEEDS "$s" 0 999999
done
uint_ok CLIENTS "$clients" 1 10000
for l in $losses; do
  decimal_ok "$l" 'v <= 100' ||
    die "LOSSES: expected loss percentages, decimals 0..100, got \"$l\" in \"$losses\""
done
for c in $cases; do
  [[ "$c" == tick || "$c" == bulk ]] || die "CASES: unknown case \"$c\" (accepted: tick, bulk)"
done
jitter_ok "$jitter" ||
  die "JITTER: expected a duration up to the 25 ms delay (0, 500us, 3ms, 0.02s), got \"$jitter\""
uint_ok KCP_WINDOW "$kcp_window" 1 32768
for p in $bulk_protocols; do
  case $p in
    rudp | rudp-bulk | kcp) ;;
    *) die "BULK_PROTOCOLS: unknown protocol \"$p\" (accepted: rudp, rudp-bulk, kcp)" ;;
  esac
done
keel_bench_check
command -v python3 >/dev/null 2>&1 || die "needs python3 for the bulk table (Debian: apt-get install python3)"

results="$out/results.jsonl"
# An earlier matrix is kept unless asked: a long matrix is not lost to a
# repeated command.
[[ ! -s "$results" || $overwrite -eq 1 ]] ||
  die "$results exists and is not empty (an earlier matrix); pass --overwrite to replace it, or choose another directory"

# --- the runs -------------------------------------------------------------------

keel_bench_ready
mkdir -p "$out" || die "--out: cannot create $out"
: >"$results" || die "--out: cannot write $results"
rm -f "$out/bulk.md"

# impair_specs LOSS SEED: the clients' and the server's conditioner specs.
impair_specs() {
  local p
  p=$(loss_fraction "$1")
  c="loss=$p,delay=25ms,jitter=$jitter,seed=$2"
  s="loss=$p,delay=25ms,jitter=$jitter,seed=$(($2 + 1000))"
}

# run CASE ARGS...: one keel-bench run, its line appended to results with
# "case": CASE. A failed run still prints its line (ok: false); keep going.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Ctrl-C / kill: the runs so far stay in results.jsonl (the one in progress
# is not recorded); `keel-bench report` reads them.
trap 'echo "$PROG: interrupted; the runs so far are in $results" >&2; exit 130' INT TERM
run() {
  local case=$1
  shift
  "$KEEL_BENCH" "$@" --format json >"$tmp/line" || true
  tag_lines "$tmp/line" "{\"case\": \"$case\"}" >>"$results"
}

for case in $cases; do
  case $case in
    tick)
      for loss in $losses; do
        for proto in rudp kcp; do
          for seed in $seeds; do
            impair_specs "$loss" "$seed"
            echo "$PROG: tick $proto loss=$loss% seed=$seed" >&2
            run latency --protocol "$proto" --rate 60 --payload 400 --clients "$clients" \
              --seconds "$secs" --warmup 1 --impair "$c" --impair-server "$s"
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
          esac
          for seed in $seeds; do
            impair_specs "$loss" "$seed"
            echo "$PROG: bulk $proto loss=$loss% seed=$seed" >&2
            run bulk "${args[@]}" --transfer 1048576 --clients 1 \
              --seconds "$bulk_secs" --warmup 0 --impair "$c" --impair-server "$s"
          done
        done
      done
      ;;
  esac
done

# The tables and charts: keel-bench report groups the runs by loss and
# protocol (seeds are the repetitions).
"$KEEL_BENCH" report "$results" --out "$out" || {
  echo "$PROG: keel-bench report failed; the runs are in $results" >&2
  exit 1
}
cat "$out/report.md"

# The bulk table over every run, failed ones included.
python3 - "$results" "$losses" >"$out/bulk.md" <<'PY'
import json, statistics, sys
rows = []
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    if isinstance(r, dict):
        rows.append(r)
losses = sys.argv[2].split()
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def ms(x):
    return "-" if x is None else f"{x / 1000:.1f}"
def loss_of(r):
    return float(r["impair"].split("loss=")[1].split(",")[0]) if r.get("impair") else 0.0
def name(r):
    if r.get("protocol") == "kcp":
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
    print("Bulk, every run (failed ones included):")
    print()
    print("| loss each way | protocol | runs ok | transfers | completion p50 ms | p99 ms | max ms | goodput MB/s | wire bytes / payload byte |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (loss, n), rs in cells.items():
        ok = sum(1 for r in rs if r.get("ok"))
        wire = med([r.get("wire_bytes_per_payload_byte") for r in rs if r.get("ok")])
        good = med([r.get("goodput_bytes_per_second") or 0.0 for r in rs])
        print(f"| {loss} % | {n} | {ok}/{len(rs)} | {sum(r.get('messages') or 0 for r in rs)} | "
              f"{ms(med([r.get('rtt_p50_us') for r in rs]))} | {ms(med([r.get('rtt_p99_us') for r in rs]))} | "
              f"{ms(med([r.get('rtt_max_us') for r in rs]))} | {good / 1e6:.2f} | "
              f"{'-' if wire is None else f'{wire:.3f}'} |")
PY
if [[ -s "$out/bulk.md" ]]; then
  echo
  cat "$out/bulk.md"
else
  rm -f "$out/bulk.md"
fi
echo "$PROG: results in $results, report in $out/report.md" >&2
