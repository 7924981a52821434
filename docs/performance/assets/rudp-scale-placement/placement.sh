#!/usr/bin/env bash
# The scale case's server CPU per message (scripts/rudp-scale.sh's cell:
# CONNS clients at RATE Hz, 100 B echoes, keel-bench in one process)
# under four placements of its threads, pinned with taskset as soon as
# they exist (scripts/lib.sh's place_threads; the measured phase starts
# after a 2 s warm-up):
#   free    nothing pinned (what rudp-scale.sh measures)
#   server  the server's thread (keel-shared-0) on CPU 0, the rest free
#   split   the server's thread on CPU 0, every other thread on CPU 1
#   one     every thread on CPU 0
# Repetitions alternate the protocols and placements, so drift touches
# them alike.
#
#   OUT=DIR CONNS=1000 RATE=20 REPS=5 SECS=6 MODES="free server split one" \
#     PROTOCOLS="udp rudp" CLIENT_SOCKETS=per-client KEEL_BENCH=target/release/keel-bench placement.sh
# (CLIENT_SOCKETS=shared: keel-bench --client-sockets shared, the load
# generator that keeps up with 5,000 clients)
#
# Writes DIR/results.jsonl (keel-bench's JSON line per run with
# "placement" and "placement_applied" added) and prints, per placement, the median
# server_cpu_us_per_message of each protocol and the ratio rudp / udp.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
PROG=placement.sh
# shellcheck source=../../../../scripts/lib.sh
source "$ROOT/scripts/lib.sh"
kb=${KEEL_BENCH:-$ROOT/target/release/keel-bench}
out=${OUT:-$ROOT/out/rudp-scale-placement}
conns=${CONNS:-1000} rate=${RATE:-20} reps=${REPS:-5} secs=${SECS:-6}
modes=${MODES:-free server split one} protocols=${PROTOCOLS:-udp rudp}
sockets=${CLIENT_SOCKETS:-per-client}
mkdir -p "$out"
: >"$out/results.jsonl"
ulimit -n $((conns * 2 + 256))
for rep in $(seq "$reps"); do
  for mode in $modes; do
    for proto in $protocols; do
      echo "placement.sh: $proto $conns x $rate Hz, $mode, repetition $rep" >&2
      "$kb" --protocol "$proto" --rate "$rate" --payload 100 --clients "$conns" \
        --seconds "$secs" --warmup 2 --client-sockets "$sockets" --format json >"$out/line" &
      pid=$!
      place_threads "$pid" "$mode"
      wait "$pid" || true
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["placement"]=sys.argv[2]; r["placement_applied"]=sys.argv[3]=="true"; print(json.dumps(r))' \
        "$out/line" "$mode" "$placed" >>"$out/results.jsonl"
    done
  done
done
rm -f "$out/line"
python3 - "$out/results.jsonl" <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
cpu = collections.defaultdict(list)
for r in rows:
    if r.get("ok") and r.get("server_cpu_us_per_message"):
        cpu[(r["placement"], r["protocol"])].append(r["server_cpu_us_per_message"])
print("| placement | keel-udp µs/msg | keel-rudp µs/msg | rudp / udp (medians) | runs |")
print("| --- | ---: | ---: | ---: | --- |")
for mode in dict.fromkeys(r["placement"] for r in rows):
    u, d = cpu.get((mode, "udp"), []), cpu.get((mode, "rudp"), [])
    if u and d:
        mu, md = statistics.median(u), statistics.median(d)
        print(f"| {mode} | {mu:.2f} ({min(u):.1f}-{max(u):.1f}) | {md:.2f} ({min(d):.1f}-{max(d):.1f}) | {md/mu:.2f} | {len(u)}+{len(d)} |")
PY
