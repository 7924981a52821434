#!/usr/bin/env bash
# The long fuzz run of keel-rudp (the suite runs a short one): the sans-IO
# endpoint in insecure and token mode, and the frame decoder, each for
# INPUTS inputs from SEED, in release, one mode per core at a time.
#
#   scripts/fuzz.sh                      # 10 million inputs per mode, seed 1
#   INPUTS=100000 SEED=7 scripts/fuzz.sh # a quick one
#
# SECONDS_PER_MODE bounds each mode in time as well (default: none).
# A panic, a step over 1 ms (timed three times, replayed from the seed),
# or receive memory beyond the budget fails it; the failing seed and step
# are printed. Output: one line per mode, also in out/fuzz/<mode>.log (a
# rerun replaces the logs: a seed replays the same inputs, so a failure is
# reproduced by running it again). MODES picks among "insecure tokens
# decoder" (default: all three). Every setting is checked before anything
# runs.
#
# Exit status: 0 no failure; 1 a mode failed; 2 bad arguments or settings.
set -euo pipefail
PROG="fuzz.sh"
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for arg in "$@"; do
  case "$arg" in
    -h | --help)
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0
      ;;
    *) die "unknown argument \"$arg\" (the settings are environment variables; see --help)" ;;
  esac
done
cd "$(dirname "$0")/.."
INPUTS=${INPUTS:-10000000}
SEED=${SEED:-1}
SECONDS_PER_MODE=${SECONDS_PER_MODE:-}
MODES=${MODES:-"insecure tokens decoder"}
[[ "$INPUTS" =~ ^[0-9]+$ && ${#INPUTS} -le 12 && "$INPUTS" -ge 1 ]] ||
  die "INPUTS: expected an integer >= 1, got \"$INPUTS\""
[[ "$SEED" =~ ^[0-9]+$ && ${#SEED} -le 18 ]] || die "SEED: expected an integer >= 0, got \"$SEED\""
[[ -z "$SECONDS_PER_MODE" || "$SECONDS_PER_MODE" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] ||
  die "SECONDS_PER_MODE: expected a decimal number of seconds, got \"$SECONDS_PER_MODE\""
for mode in $MODES; do
  case "$mode" in
    insecure | tokens | decoder) ;;
    *) die "MODES: unknown mode \"$mode\" (accepted: insecure, tokens, decoder)" ;;
  esac
done
[[ -n "${MODES// /}" ]] || die "MODES: empty (accepted: insecure, tokens, decoder)"
mkdir -p out/fuzz
cargo test --release -p keel-rudp-proto --lib --no-run -q 2>/dev/null || cargo test --release -p keel-rudp-proto --lib --no-run
status=0
pids=()
for mode in $MODES; do
  (
    env KEEL_FUZZ_MODE=$mode KEEL_FUZZ_INPUTS=$INPUTS KEEL_FUZZ_SEED=$SEED \
      ${SECONDS_PER_MODE:+KEEL_FUZZ_SECONDS=$SECONDS_PER_MODE} \
      cargo test -q --release -p keel-rudp-proto --lib fuzz::tests::long_run -- --ignored --nocapture \
      >"out/fuzz/$mode.log" 2>&1
  ) &
  pids+=($!)
  # Two at a time: one per core.
  if [ "${#pids[@]}" -ge 2 ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
for mode in $MODES; do
  grep -h '^fuzz \|panicked\|Failure\|OverBudget\|Slow\|Panic' "out/fuzz/$mode.log" | head -5 || true
done
[ "$status" = 0 ] && echo "fuzz.sh: seed $SEED, up to $INPUTS inputs per mode${SECONDS_PER_MODE:+ or $SECONDS_PER_MODE s}: no failure" >&2 ||
  echo "fuzz.sh: FAILED (logs in out/fuzz/)" >&2
exit "$status"
