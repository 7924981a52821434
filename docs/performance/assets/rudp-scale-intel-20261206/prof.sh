#!/usr/bin/env bash
# prof.sh PROTO CONNS RATE OUT [extra keel-bench args]: a keel-bench scale run
# placed as rudp-scale.sh PLACEMENT=split does, recorded by perf from its
# 3rd second for 4 s into OUT.data (its JSON line in OUT.json);
# python3 agg.py OUT.data keel-shared-0 30 lists the server thread's samples.
set -euo pipefail
PROG=prof
ROOT="$(cd "$(dirname "$0")/../../../.." && pwd)"
source "$ROOT/scripts/lib.sh"
proto=$1 c=$2 r=$3 out=$4; shift 4
"${KEEL_BENCH:-$ROOT/target/release/keel-bench}" --protocol $proto --rate $r --payload 400 --clients $c --seconds 8 --warmup 2 --client-sockets shared --format json "$@" > $out.json &
pid=$!
place_threads $pid split
sleep 3
perf record -F 4000 -g -e cpu-clock -p $pid -o $out.data -- sleep 4 2>/dev/null >/dev/null
wait $pid || true
python3 -c "import json,sys; d=json.load(open('$out.json')); print(d['ok'], d['roundtrips_per_second'], d['server_cpu_us_per_message'])"
