#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/../../../../.."
for s in 1 2 3; do
  CASES=tick8 CHANNELS=reliable-ordered TUNINGS=tuned SEEDS=$s LIBS="keel" KEEL_PEER=/tmp/kp-before KEEL_BENCH=target/release/keel-bench \
    scripts/rudp-peers.sh --overwrite out/pab/before-$s > out/pab/before-$s.log 2>&1
  CASES=tick8 CHANNELS=reliable-ordered TUNINGS=tuned SEEDS=$s LIBS="keel ikcp enet quinn" KEEL_PEER=/tmp/kp-after KEEL_BENCH=target/release/keel-bench \
    scripts/rudp-peers.sh --overwrite out/pab/after-$s > out/pab/after-$s.log 2>&1
done
echo done > out/pab/done
