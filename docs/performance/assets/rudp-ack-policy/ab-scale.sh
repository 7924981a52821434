#!/usr/bin/env bash
# Alternates the before/after keel-bench binaries through rudp-scale.sh, one repetition each per round.
set -u
cd /work/wt/ackpolicy
ROUNDS=${ROUNDS:-3}
TAG=${TAG:-ab1}
for round in $(seq 1 $ROUNDS); do
  for which in before after; do
    bin=/tmp/keel-bench-${which}-ackpolicy
    [ "$which" = after ] && bin=${AFTER_BIN:-/tmp/keel-bench-after1-ackpolicy}
    echo "== round $round $which $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    KEEL_BENCH=$bin CONNS=${CONNS:-1000} RATES="${RATES:-20 60}" PROTOCOLS="${PROTOCOLS:-udp rudp kcp}" REPS=1 SECONDS_PER_RUN=${SECS:-4} WARMUP=1 \
      scripts/rudp-scale.sh --overwrite out/$TAG/$which-r$round > out/$TAG/$which-r$round.log 2>&1
    tail -n +1 out/$TAG/$which-r$round/table.md | grep -v "^| ---" 
  done
done
