#!/usr/bin/env bash
# rudp-tail.sh at the default redundancy level, 10 % loss, before/after alternated.
cd /work/wt/ackpolicy
for round in $(seq 1 ${ROUNDS:-2}); do
  for which in before after; do
    bin=/tmp/keel-bench-before-ackpolicy; [ $which = after ] && bin=$AFTER_BIN
    echo "== tail round $round $which $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    KEEL_BENCH=$bin LOSSES=10 LEVELS=1 SEEDS="${SEEDS:-1 2 3}" SECONDS_PER_RUN=${SECS:-5} \
      scripts/rudp-tail.sh --overwrite out/$TAG/tail-$which-r$round > out/$TAG/tail-$which-r$round.log 2>&1
    cat out/$TAG/tail-$which-r$round/curve.md
  done
done
