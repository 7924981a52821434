#!/bin/bash
# Profiles the server thread (keel-shared-0) of one 8 s scale-case run for
# 3 s of its measured phase, 1,000 clients.
#
#   prof.sh BINARY PROTOCOL RATE OUT MODE
#   MODE stat: perf stat (task clock, context switches)
#        rec:  perf record -e cpu-clock:u (user space), OUT.data
#        sys:  perf stat of the uprobes named probe_kb:* (counts of calls;
#              add them first: perf probe -x BINARY -a NAME=0xOFFSET)
BIN=$1; PROTO=$2; RATE=$3; OUT=$4; MODE=$5
ulimit -n 4096
"$BIN" --protocol "$PROTO" --rate "$RATE" --payload 400 --clients 1000 --seconds 8 --warmup 2 --format json >"$OUT.json" 2>"$OUT.err" &
BP=$!
sleep 5
TID=$(for t in /proc/$BP/task/*; do [ "$(cat "$t/comm")" = keel-shared-0 ] && basename "$t"; done)
case $MODE in
  stat) perf stat -e task-clock,context-switches -t "$TID" -- sleep 3 2>"$OUT.stat" ;;
  sys) perf stat -e 'probe_kb:*' -t "$TID" -- sleep 3 2>"$OUT.stat" ;;
  rec) perf record -e cpu-clock:u -F 19999 -t "$TID" -o "$OUT.data" -- sleep 3 >/dev/null 2>&1 ;;
esac
wait
python3 -c "import json;r=json.load(open('$OUT.json'));print('$OUT',round(r['server_cpu_us_per_message'],2),r['ok'])"
