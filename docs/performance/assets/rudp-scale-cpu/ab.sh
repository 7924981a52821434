#!/bin/bash
# Alternates fresh keel-bench processes, one scale-case run each (the
# command rudp-scale.sh runs: 1,000 clients, 400 B, 4 s after 2 s of
# warm-up), REPS rounds of every SPEC in turn; appends each JSON line,
# tagged with "label" and "rep", to OUT.
#
#   ab.sh OUT REPS RATE LABEL=ENV:BINARY:PROTOCOL ...   (ENV: X=1 for none)
#   ab.sh fin20.jsonl 7 20 udp=X=1:/tmp/kb-base:udp rudp=X=1:/tmp/kb-base:rudp head=X=1:target/release/keel-bench:rudp
#   python3 med.py fin20.jsonl        # medians, ranges, ratios to "udp"
OUT=$1; REPS=$2; RATE=$3; shift 3
ulimit -n 8192
for rep in $(seq 1 "$REPS"); do
  for spec in "$@"; do
    label=${spec%%=*}; rest=${spec#*=}; envs=${rest%%:*}; rest=${rest#*:}; bin=${rest%%:*}; proto=${rest#*:}
    line=$(env "$envs" "$bin" --protocol "$proto" --rate "$RATE" --payload 400 --clients "${CONNS:-1000}" \
      --seconds "${SECS:-4}" --warmup 2 --format json 2>/dev/null)
    echo "$line" | python3 -c "import json,sys;r=json.load(sys.stdin);r['label']='$label';r['rep']=$rep;print(json.dumps(r))" >>"$OUT"
    echo "$line" | python3 -c "import json,sys;r=json.load(sys.stdin);print('$label',$rep,round(r['server_cpu_us_per_message'],2),r['ok'])"
  done
done
