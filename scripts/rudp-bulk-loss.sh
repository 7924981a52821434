#!/usr/bin/env bash
# 1 MiB transfers at random loss: keel-rudp's bulk channel against KCP fast
# with a 1,024-packet window, alternated run by run (fresh processes), so
# the drift of a shared machine hits both alike. 25 ms each way, no jitter,
# LOSSES each way, SEEDS repetitions; one keel-bench JSON line per run in
# OUT_DIR/results.jsonl, then a Markdown table of medians on stdout (also
# OUT_DIR/table.md).
set -euo pipefail
PROG=rudp-bulk-loss.sh
usage() {
  cat <<'USAGE'
usage: [KEEL_BENCH=...] [LOSSES="0 1 5"] [SEEDS="1 2 3 4 5"] [SECONDS_PER_RUN=10] \
       scripts/rudp-bulk-loss.sh [--overwrite] [OUT_DIR]

1 MiB transfers (keel-bench --transfer 1048576, one client) at LOSSES %
random loss each way, 25 ms each way: keel-rudp --bulk-channel against KCP
fast --kcp-window 1024, alternated run by run, SEEDS repetitions of
SECONDS_PER_RUN s (1 to 60; plus up to 30 s of drain each). KEEL_BENCH: the
binary (default: build target/release/keel-bench). Writes
OUT_DIR/results.jsonl and OUT_DIR/table.md (medians per loss and protocol;
default OUT_DIR: out/rudp-bulk-loss); keeps earlier results unless
--overwrite.
USAGE
}
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=out/rudp-bulk-loss
overwrite=0
outs=0
for a in "$@"; do
  case $a in
    -h | --help) usage; exit 0 ;;
    --overwrite) overwrite=1 ;;
    -*) die "unknown argument \"$a\" (accepted: --overwrite, --help, OUT_DIR)" ;;
    *) out=$a; outs=$((outs + 1)) ;;
  esac
done
[[ $outs -le 1 ]] || die "one OUT_DIR at most"
losses=${LOSSES:-0 1 5}
seeds=${SEEDS:-1 2 3 4 5}
secs=${SECONDS_PER_RUN:-10}
keel_bench_check
[[ "$secs" =~ ^[0-9]+$ && "$secs" -ge 1 && "$secs" -le 60 ]] || die "SECONDS_PER_RUN: \"$secs\", 1 to 60 accepted"
mkdir -p "$out"
results="$out/results.jsonl"
if [[ -s "$results" && $overwrite -eq 0 ]]; then
  die "$results exists; pass --overwrite or another OUT_DIR (earlier results are kept)"
fi
keel_bench_ready
: >"$results"
for seed in $seeds; do
  for loss in $losses; do
    p=$(loss_fraction "$loss")
    c="loss=$p,delay=25ms,seed=$seed"
    s="loss=$p,delay=25ms,seed=$((seed + 1000))"
    for proto in rudp-bulk kcp; do
      case $proto in
        rudp-bulk) args=(--protocol rudp --bulk-channel) ;;
        kcp) args=(--protocol kcp --kcp-mode fast --kcp-window 1024) ;;
      esac
      echo "$PROG: $proto loss=$loss% seed=$seed" >&2
      "$KEEL_BENCH" "${args[@]}" --transfer 1048576 --clients 1 --seconds "$secs" --warmup 0 \
        --impair "$c" --impair-server "$s" --format json |
        python3 -S -c 'import json,sys
for l in sys.stdin:
    try: d=json.loads(l)
    except ValueError: continue
    d["case"]=sys.argv[1]; d["loss_percent"]=float(sys.argv[2]); print(json.dumps(d))' "$proto" "$loss" >>"$results" || true
    done
  done
done
python3 -S - "$results" <<'PY' | tee "$out/table.md"
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    rows.setdefault((d["loss_percent"], d["case"]), []).append(d)
name = {"rudp-bulk": "keel-rudp bulk channel", "kcp": "KCP fast, window 1024"}
print("| loss each way | protocol | runs ok | transfers | completion p50 ms (median) | goodput MB/s (median) | goodput min MB/s | goodput max MB/s | wire bytes / payload byte |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (loss, case), ds in sorted(rows.items()):
    ok = [d for d in ds if d.get("ok")]
    g = [(d.get("goodput_bytes_per_second") or 0) / 1e6 for d in ds]
    p50 = [d["rtt_p50_us"] / 1e3 for d in ok if d.get("rtt_p50_us")]
    w = [d["wire_bytes_per_payload_byte"] for d in ok if d.get("wire_bytes_per_payload_byte")]
    med = lambda v: f"{statistics.median(v):.2f}" if v else "-"
    print(f"| {loss:g} % | {name[case]} | {len(ok)}/{len(ds)} | {sum(d.get('messages') or 0 for d in ds)} | "
          f"{med(p50)} | {med(g)} | {min(g):.2f} | {max(g):.2f} | {med(w)} |")
PY
