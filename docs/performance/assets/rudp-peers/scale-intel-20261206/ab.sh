#!/usr/bin/env bash
# Before/after Don't Fragment at the scale case, alternated by seed.
set -u
cd "$(dirname "$0")/../../../../.."
for s in 1 2 3; do
  CASES=scale CHANNELS=reliable-ordered TUNINGS=tuned SEEDS=$s LIBS="keel" KEEL_PEER=/tmp/kp-before KEEL_BENCH=target/release/keel-bench \
    scripts/rudp-peers.sh --overwrite out/psc/before-$s > out/psc/before-$s.log 2>&1
  CASES=scale CHANNELS=reliable-ordered TUNINGS=tuned SEEDS=$s LIBS="keel ikcp enet" KEEL_PEER=/tmp/kp-after KEEL_BENCH=target/release/keel-bench \
    scripts/rudp-peers.sh --overwrite out/psc/after-$s > out/psc/after-$s.log 2>&1
done
echo done > out/psc/done
