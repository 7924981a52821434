#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
# KEEL_BENCH / KEEL_PEER: binaries of main (set them); OUT: where the runs go
out=${OUT:-out/peers-levels}
export CHANNELS=reliable-ordered TUNINGS=tuned SECONDS_PER_RUN=5 CASES=tick8 LOSSES="${LOSSES:-1 5 10 20}"
for seed in 1 2; do
  for lv in 0 1 2; do
    KEEL_REDUNDANCY=$lv LIBS=keel SEEDS=$seed scripts/rudp-peers.sh --out "$out"/l$lv-s$seed
  done
  LIBS="ikcp enet gns" SEEDS=$seed scripts/rudp-peers.sh --out "$out"/peers-s$seed
done
