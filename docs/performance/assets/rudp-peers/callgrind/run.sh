#!/usr/bin/env bash
# Instructions and simulated cache misses per message of one keel-peer
# process under callgrind, through keel-bench relay (25 ms and 3 ms jitter
# each way), tuned, reliable-ordered. Each cell runs twice, for 2 s and
# 5 s after a 1 s warm-up; the figures are the difference between the two
# over the difference in messages, so start-up and connecting drop out.
#
#   run.sh ROLE LIB CLIENTS RATE PAYLOAD [VALGRIND_CACHE_OPTS...]
#     ROLE client: callgrind on the client process, the server native
#     ROLE server: callgrind on the server process, the clients native
#   KEEL_PEER (default bench-peers/target/release/keel-peer),
#   KEEL_BENCH (default target/release/keel-bench), OUT (default out/callgrind),
#   WARMUP (default 1 s; past a connection's protected start, its first 64
#   packets acknowledged, for a steady state at a slow rate: at 2 Hz, 40)
#
# Prints one JSON line: role, lib, clients, rate, payload, messages, and
# per message ir, i1_misses, d1_misses, ll_misses (with the cache options
# given, e.g. --LL=524288,8,64 for a 512 KiB last level: the L2 of one core).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../../.." && pwd)"
role=$1 lib=$2 clients=$3 rate=$4 payload=$5; shift 5
kp=${KEEL_PEER:-$ROOT/bench-peers/target/release/keel-peer}
kb=${KEEL_BENCH:-$ROOT/target/release/keel-bench}
out=${OUT:-$ROOT/out/callgrind}
mkdir -p "$out"
ulimit -n 8192
tag="$role-$lib-$clients-$rate-$payload"
# The address of a "ready ADDR:PORT" line once it is whole (a process
# under valgrind writes it slowly): the line found and the file ending in
# a newline.
wait_ready() {
  for _ in $(seq 300); do
    if grep -qE 'ready [0-9.]+:[0-9]+' "$1" && [[ -z "$(tail -c1 "$1")" ]]; then
      break
    fi
    sleep 0.1
  done
  grep -oE 'ready [0-9.]+:[0-9]+' "$1" | head -1 | cut -d' ' -f2
}
for secs in 2 5; do
  cg=(valgrind --tool=callgrind --cache-sim=yes "$@" --callgrind-out-file="$out/$tag-$secs.out")
  srv=(); cl=()
  if [[ $role == server ]]; then srv=("${cg[@]}"); else cl=("${cg[@]}"); fi
  "${srv[@]}" "$kp" "$lib" server --bind 127.0.0.1:0 --tuned 2>"$out/$tag-$secs-server.err" >/dev/null &
  spid=$!
  addr=$(wait_ready "$out/$tag-$secs-server.err")
  "$kb" relay --bind 127.0.0.1:0 --upstream "$addr" --impair delay=25ms,jitter=3ms \
    --impair-server delay=25ms,jitter=3ms --seed 1 2>"$out/$tag-relay.err" >/dev/null &
  rpid=$!
  raddr=$(wait_ready "$out/$tag-relay.err")
  "${cl[@]}" "$kp" "$lib" client --connect "$raddr" --clients "$clients" --rate "$rate" \
    --payload "$payload" --seconds "$secs" --warmup "${WARMUP:-1}" --drain 1 --tuned \
    >"$out/$tag-$secs-client.json" 2>"$out/$tag-$secs-client.err"
  kill -INT "$spid" "$rpid"; wait "$spid" "$rpid" 2>/dev/null || true
done
python3 - "$out" "$tag" "$role" "$lib" "$clients" "$rate" "$payload" <<'PY'
import json, re, sys
out, tag, role, lib, clients, rate, payload = sys.argv[1:]
def totals(secs):
    log = open(f"{out}/{tag}-{secs}-{role}.err").read()
    def get(k):
        m = re.search(k + r":\s+([\d,]+)", log)
        return int(m.group(1).replace(",", "")) if m else 0
    c = json.load(open(f"{out}/{tag}-{secs}-client.json"))
    return [get("I   refs"), get("I1  misses"), get("D1  misses"), get("LLd misses")], c
(a, ca), (b, cb) = totals(2), totals(5)
msgs = cb["messages_sent"] - ca["messages_sent"]
per = [(y - x) / msgs for x, y in zip(a, b)]
print(json.dumps({"role": role, "lib": lib, "clients": int(clients), "rate_hz": int(rate),
    "payload_bytes": int(payload), "messages": msgs, "ok": ca["ok"] and cb["ok"],
    "ir": round(per[0]), "i1_misses": round(per[1], 1), "d1_misses": round(per[2], 1),
    "lld_misses": round(per[3], 1)}))
PY
