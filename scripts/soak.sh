#!/usr/bin/env bash
# Soak: one long keel-bench run (default 60 s, window 16, sharded over 4
# contexts) while its resident set size is sampled every second from
# /proc/<pid>/status. Prints the RSS series summary on stderr-free stdout,
# then the run's JSON line:
#
#   rss_kib samples=N first=K min=K max=K last=K steady_min=K steady_max=K
#     steady_growth=K flat=yes|no
#   {"schema_version":1, ... "ok":true ...}
#
# "steady" is the series after the first 5 s (allocations of the start and
# the warm-up are done by then); flat means steady_max - steady_min stays
# under 2 MiB (and under 5 % of steady_min). Not part of the test suite: it
# is long and loads every core. docs/reliability.md has its figures.
#
#   scripts/soak.sh [--bench PATH] [--seconds S] [--series FILE]
#                   [--overwrite] [-- RUN FLAGS...]
#
#   --bench PATH    keel-bench binary (default target/release/keel-bench,
#                   built with cargo if missing)
#   --seconds S     measured phase (default 60)
#   --series FILE   also write the series, "second rss_kib" per line; an
#                   existing non-empty FILE is refused (exit 2, before the
#                   run) unless --overwrite
#   --overwrite     replace an existing --series FILE
#   after --        run flags instead of the defaults: --clients 16
#                   --window 16 --io-model sharded --io-threads 4
#
# Progress goes to stderr every 10 s of the run ("[20/60 s] rss N KiB");
# stdout holds only the summary and the JSON line.
#
# Exit status: 0 the run was ok (zero errors) and RSS flat; 1 otherwise;
# 2 bad arguments.
set -euo pipefail
PROG=soak.sh
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(dirname "$0")/.."

bench=target/release/keel-bench
seconds=60
series_out=""
overwrite=0
run_flags=(--clients 16 --window 16 --io-model sharded --io-threads 4)
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --series)
      [ $# -ge 2 ] || die "--series expects a FILE"
      series_out="$2"; shift 2 ;;
    --overwrite) overwrite=1; shift ;;
    --) shift; run_flags=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo pipefail/{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case "$seconds" in
  ''|*[!0-9]*) die "--seconds expects whole seconds, got '$seconds'" ;;
esac
if [ -n "$series_out" ] && [ -s "$series_out" ] && [ "$overwrite" -eq 0 ]; then
  die "--series: $series_out exists and is not empty (an earlier soak?); pass --overwrite to replace it, or choose another file"
fi
if [ ! -x "$bench" ]; then
  echo "$PROG: building $bench" >&2
  cargo build --release -p keel-bench >&2
fi

work=$(mktemp -d /tmp/keel-soak.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "$PROG: $bench --seconds $seconds ${run_flags[*]}" >&2
"$bench" --seconds "$seconds" "${run_flags[@]}" >"$work/run.json" 2>"$work/run.err" &
pid=$!
# One sample a second while it runs; bounded by the run's own bound
# (warm-up + seconds + 2 s drain) plus a margin.
limit=$((seconds + 30))
: >"$work/series"
t=0
while kill -0 "$pid" 2>/dev/null && [ "$t" -le "$limit" ]; do
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] && echo "$t $rss" >>"$work/series"
  if [ -n "$rss" ] && [ "$t" -gt 0 ] && [ $((t % 10)) -eq 0 ]; then
    echo "$PROG: [$t/$seconds s] rss $rss KiB" >&2
  fi
  sleep 1
  t=$((t + 1))
done
status=0
wait "$pid" || status=$?
pid=""
[ -n "$series_out" ] && cp "$work/series" "$series_out"

summary=$(awk -v steady_from=5 '
  { s[NR] = $2; t[NR] = $1 }
  END {
    if (NR == 0) { print "rss_kib samples=0 flat=no"; exit }
    min = max = s[1]; smin = smax = -1; sfirst = -1
    for (i = 1; i <= NR; i++) {
      if (s[i] < min) min = s[i]; if (s[i] > max) max = s[i]
      if (t[i] >= steady_from) {
        if (sfirst < 0) sfirst = s[i]
        if (smin < 0 || s[i] < smin) smin = s[i]
        if (s[i] > smax) smax = s[i]
        slast = s[i]
      }
    }
    if (sfirst < 0) { smin = min; smax = max; sfirst = s[1]; slast = s[NR] }
    flat = (smax - smin < 2048 && smax - smin < smin * 0.05) ? "yes" : "no"
    printf "rss_kib samples=%d first=%d min=%d max=%d last=%d steady_min=%d steady_max=%d steady_growth=%d flat=%s\n",
      NR, s[1], min, max, s[NR], smin, smax, slast - sfirst, flat
  }' "$work/series")
echo "$summary"
cat "$work/run.json"
if grep -q panicked "$work/run.err"; then
  echo "$PROG: the run panicked: $(cat "$work/run.err")" >&2
  exit 1
fi
if [ "$status" -ne 0 ] || ! grep -q '"ok":true' "$work/run.json"; then
  echo "$PROG: the run failed (exit $status)" >&2
  exit 1
fi
case "$summary" in
  *flat=yes*) exit 0 ;;
  *) echo "$PROG: RSS is not flat" >&2; exit 1 ;;
esac
