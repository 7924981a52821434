#!/usr/bin/env bash
# What loopback UDP costs the kernel on this machine, and so what load it
# can carry at all (tools/loopback-floor.c: sendmmsg/recvmmsg in batches on
# one thread, nothing else).
#
#   scripts/loopback-floor.sh [MESSAGES_PER_SECOND ...]
#
# Runs REPS fresh processes (default 5) and prints each JSON line, the
# median CPU µs per datagram, and for each echo rate given (default
# 300000: 5,000 connections at 60 Hz) the cores its datagrams need at
# that floor: an echo moves every message twice, and each datagram is
# sent once and received once. Environment: REPS, PAYLOAD (default 400),
# BATCH (default 64). Prints only (no files but the probe's binary,
# target/loopback-floor). Exit 1 when the probe cannot be built or fails,
# 2 on bad arguments or settings.
set -euo pipefail
PROG="loopback-floor.sh"
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for arg in "$@"; do
  case "$arg" in
    -h | --help)
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0
      ;;
    *) [[ "$arg" =~ ^[0-9]+$ && ${#arg} -le 12 && "$arg" -ge 1 ]] ||
      die "MESSAGES_PER_SECOND: expected integers >= 1, got \"$arg\" (see --help)" ;;
  esac
done
cd "$(dirname "$0")/.."

reps=${REPS:-5}
payload=${PAYLOAD:-400}
batch=${BATCH:-64}
rates=("${@:-300000}")
[[ "$reps" =~ ^[0-9]+$ && ${#reps} -le 6 && "$reps" -ge 1 ]] || die "REPS: expected an integer >= 1, got \"$reps\""
[[ "$payload" =~ ^[0-9]+$ && ${#payload} -le 6 && "$payload" -ge 1 && "$payload" -le 65507 ]] ||
  die "PAYLOAD: expected an integer 1..65507, got \"$payload\""
[[ "$batch" =~ ^[0-9]+$ && ${#batch} -le 6 && "$batch" -ge 1 && "$batch" -le 1024 ]] ||
  die "BATCH: expected an integer 1..1024, got \"$batch\""
mkdir -p target
bin=target/loopback-floor
if [ ! -x "$bin" ] || [ tools/loopback-floor.c -nt "$bin" ]; then
  cc -O2 -Wall -Wextra -o "$bin" tools/loopback-floor.c
fi
lines=()
for _ in $(seq 1 "$reps"); do
  line=$("$bin" --payload "$payload" --batch "$batch")
  echo "$line"
  lines+=("$line")
done
printf '%s\n' "${lines[@]}" | python3 -c '
import json, statistics, sys, os
rates = [int(r) for r in sys.argv[1:]]
us = statistics.median(json.loads(l)["cpu_us_per_datagram"] for l in sys.stdin)
cores = os.cpu_count()
print(f"median: {us:.2f} CPU us per datagram (sent and received), {1e6 / us:,.0f} datagrams per CPU second; this machine has {cores} cores")
for r in rates:
    need = 2 * r * us / 1e6
    print(f"an echo of {r:,} messages/s moves {2 * r:,} datagrams/s: {need:.2f} cores at this floor, before any user-space work")
' "${rates[@]}"
