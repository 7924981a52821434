#!/usr/bin/env bash
# keel-rudp's tail under loss as a curve: p99 against wire bytes per payload
# byte, one point per --redundancy level, with KCP fast's point (issue 23).
#
#   scripts/rudp-tail.sh [--out DIR] [--overwrite] [OUT_DIR]   (--help for more)
#
# The game-tick case of scripts/rudp-matrix.sh: CLIENTS clients each
# sending 400-byte messages at 60 Hz (open loop) for SECONDS_PER_RUN after
# 1 s of warm-up, echoed on a reliable-ordered channel; loss L on each
# direction with 25 ms delay and JITTER each way (a 50 ms RTT). For every
# loss in LOSSES (and a lossless baseline, loss 0 at the default level) and
# every seed, one fresh keel-bench process per point: keel-rudp at each
# level of LEVELS (`--redundancy`), then KCP fast; the points of a seed run
# one after another, so the machine's load is shared alike.
#
# Writes OUT_DIR/results.jsonl (one keel-bench line per run, with "case":
# "tail" and "redundancy" added) and OUT_DIR/curve.md: per loss and point,
# runs ok, medians over the seeds of p50, p99 and p99.9 (each run's own
# percentile), p99 over the lossless p99, wire bytes per payload byte,
# resent chunks and redundant copies; printed on stdout too.
#
# Exit status: 0 the runs ran (failed runs are results: their lines say ok:
# false and the table counts them); 1 keel-bench could not be built; 2 bad
# arguments or settings, or OUT_DIR holds earlier results (without
# --overwrite).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="rudp-tail.sh"

usage() {
  cat <<USAGE
Usage: scripts/rudp-tail.sh [--out DIR] [--overwrite] [OUT_DIR]

keel-rudp's p99 against wire bytes per payload byte under loss, one point
per --redundancy level, and KCP fast's point: 400 B at 60 Hz, CLIENTS
clients, 25 ms delay each way, reliable-ordered. Writes DIR/results.jsonl
and DIR/curve.md (medians over the seeds); prints curve.md.

  --out DIR, OUT_DIR   where the results go (default: out/rudp-tail); earlier
                       results there (a non-empty results.jsonl) are refused
                       unless --overwrite
  --overwrite          replace earlier results in DIR
  -h, --help           this text

Environment (lists are space or comma separated; checked before any run):
  LOSSES           loss % each way, 0 < L <= 50 (default: "10 20")
  LEVELS           --redundancy levels, 0..5   (default: "0 1 2 3 4 5")
  SEEDS            seeds, integers             (default: "1 2 3")
  CLIENTS          clients, 1..10000           (default: 8)
  SECONDS_PER_RUN  measured phase, s           (default: 10; 0 < s <= 3600)
  JITTER           jitter each way (0, 500us, 3ms; <= 25ms) (default: 3ms)
  KEEL_BENCH       keel-bench binary (default: build target/release/keel-bench)

About (1 + |LOSSES| x (|LEVELS| + 1)) x |SEEDS| x (SECONDS_PER_RUN + 2) s.

Exit status: 0 the runs ran; 1 keel-bench could not be built; 2 bad
arguments or settings, or earlier results in DIR without --overwrite.
USAGE
}

# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

parse_out_args -- "$@"
out=${out:-out/rudp-tail}

secs=${SECONDS_PER_RUN:-10}
seeds=$(list SEEDS "1 2 3")
clients=${CLIENTS:-8}
losses=$(list LOSSES "10 20")
levels=$(list LEVELS "0 1 2 3 4 5")
jitter=${JITTER:-3ms}

[[ "$secs" =~ $decimal ]] && awk -v v="$secs" 'BEGIN { exit !(v > 0 && v <= 3600) }' ||
  die "SECONDS_PER_RUN: expected seconds, a decimal with 0 < s <= 3600, got \"$secs\""
for s in $seeds; do uint_ok SEEDS "$s" 0 999999; done
uint_ok CLIENTS "$clients" 1 10000
for l in $losses; do
  [[ "$l" =~ $decimal ]] && awk -v v="$l" 'BEGIN { exit !(v > 0 && v <= 50) }' ||
    die "LOSSES: expected loss percentages, decimals 0 < L <= 50, got \"$l\" in \"$losses\""
done
for v in $levels; do uint_ok LEVELS "$v" 0 5; done
jitter_ok "$jitter" ||
  die "JITTER: expected a duration up to the 25 ms delay (0, 500us, 3ms, 0.02s), got \"$jitter\""
keel_bench_check
command -v python3 >/dev/null 2>&1 || die "needs python3 for the table (Debian: apt-get install python3)"

results="$out/results.jsonl"
[[ ! -s "$results" || $overwrite -eq 1 ]] ||
  die "$results exists and is not empty (earlier results); pass --overwrite to replace them, or choose another directory"

keel_bench_ready
mkdir -p "$out" || die "--out: cannot create $out"
: >"$results" || die "--out: cannot write $results"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
trap 'echo "$PROG: interrupted; the runs so far are in $results" >&2; exit 130' INT TERM

# run LEVEL ARGS...: one keel-bench run, its line appended with "case":
# "tail" and "redundancy": LEVEL ("kcp" for KCP's point; "-" keeps the
# level keel-bench reports, keel-rudp's default for the baseline).
run() {
  local level=$1
  shift
  "$KEEL_BENCH" "$@" --format json >"$tmp/line" || true
  local fields='{"case": "tail"}'
  case $level in
    -) ;;
    kcp) fields='{"case": "tail", "redundancy": "kcp"}' ;;
    *) fields="{\"case\": \"tail\", \"redundancy\": $((10#$level))}" ;;
  esac
  tag_lines "$tmp/line" "$fields" >>"$results"
}

tick=(--rate 60 --payload 400 --clients "$clients" --seconds "$secs" --warmup 1)
for seed in $seeds; do
  link="delay=25ms,jitter=$jitter"
  echo "$PROG: seed=$seed lossless" >&2
  run - --protocol rudp "${tick[@]}" --impair "loss=0,$link,seed=$seed" \
    --impair-server "loss=0,$link,seed=$((seed + 1000))"
  for loss in $losses; do
    p=$(loss_fraction "$loss")
    c="loss=$p,$link,seed=$seed"
    s="loss=$p,$link,seed=$((seed + 1000))"
    for level in $levels; do
      echo "$PROG: seed=$seed loss=$loss% rudp --redundancy $level" >&2
      run "$level" --protocol rudp --redundancy "$level" "${tick[@]}" --impair "$c" --impair-server "$s"
    done
    echo "$PROG: seed=$seed loss=$loss% kcp fast" >&2
    run kcp --protocol kcp --kcp-mode fast "${tick[@]}" --impair "$c" --impair-server "$s"
  done
done

python3 - "$results" "$losses" "$levels" >"$out/curve.md" <<'PY'
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
levels = sys.argv[3].split()
def loss_of(r):
    return float(r["impair"].split("loss=")[1].split(",")[0]) if r.get("impair") else 0.0
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def ms(x):
    return "-" if x is None else f"{x / 1000:.1f}"
def cell(rs):
    ok = [r for r in rs if r.get("ok")]
    return ok, {k: med([r.get(k) for r in ok]) for k in
                ("rtt_p50_us", "rtt_p99_us", "rtt_p999_us", "wire_bytes_per_payload_byte",
                 "messages_resent", "redundant_copies")}
base_rs = [r for r in rows if loss_of(r) == 0.0 and r.get("protocol") == "rudp"]
_, base = cell(base_rs)
b99 = base["rtt_p99_us"]
print(f"Lossless p99 (keel-rudp, default level): {ms(b99)} ms, median of {len(base_rs)} runs.")
print()
print("| loss each way | point | runs ok | p50 ms | p99 ms | p99 / lossless p99 | p99.9 ms | wire bytes / payload byte | resent | redundant copies |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for loss in losses:
    p = float(loss) / 100
    for level in levels + ["kcp"]:
        rs = [r for r in rows if abs(loss_of(r) - p) < 1e-9 and str(r.get("redundancy")) == level]
        if not rs:
            continue
        ok, m = cell(rs)
        name = "KCP fast" if level == "kcp" else f"keel-rudp --redundancy {level}"
        ratio = "-" if not (m["rtt_p99_us"] and b99) else f"{m['rtt_p99_us'] / b99:.2f}"
        wire = m["wire_bytes_per_payload_byte"]
        def n(x):
            return "-" if x is None else f"{x:.0f}"
        print(f"| {loss} % | {name} | {len(ok)}/{len(rs)} | {ms(m['rtt_p50_us'])} | {ms(m['rtt_p99_us'])} | "
              f"{ratio} | {ms(m['rtt_p999_us'])} | {'-' if wire is None else f'{wire:.3f}'} | "
              f"{n(m['messages_resent'])} | {n(m['redundant_copies'])} |")
PY
cat "$out/curve.md"
echo "$PROG: results in $results, table in $out/curve.md" >&2
