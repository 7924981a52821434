#!/bin/bash
# Run from the repository root; KEEL_BENCH is the keel-bench whose relay sits between them.
#   ab.sh OUT ROUNDS CLIENTS NAME=LIB:KEEL_PEER ...   (SECS, default 5: measured seconds)
#   ab.sh fec-tick100.jsonl 3 100 main=keel:/tmp/kp-main new=keel:bench-peers/target/release/keel-peer ikcp=ikcp:/tmp/kp-main
# One client process (CLIENTS clients, 400 B at 60 Hz) and its server, through the relay (25 ms and 3 ms jitter each way), alternated; one JSON line per run.
out=$1; rounds=$2; CL=$3; shift 3
for r in $(seq $rounds); do for spec in "$@"; do
name=${spec%%=*}; rest=${spec#*=}; lib=${rest%%:*}; kp=${rest#*:}
$kp $lib server --bind 127.0.0.1:0 --tuned 2> ${TMPDIR:-/tmp}/abc-srv.err > ${TMPDIR:-/tmp}/abc-srv.json &
spid=$!
for i in $(seq 50); do grep -q ready ${TMPDIR:-/tmp}/abc-srv.err && break; sleep 0.1; done
addr=$(grep -o 'ready [0-9.:]*' ${TMPDIR:-/tmp}/abc-srv.err | cut -d' ' -f2)
${KEEL_BENCH:-target/release/keel-bench} relay --bind 127.0.0.1:0 --upstream $addr --impair delay=25ms,jitter=3ms --impair-server delay=25ms,jitter=3ms --seed $r 2> ${TMPDIR:-/tmp}/abc-relay.err > ${TMPDIR:-/tmp}/abc-relay.json &
rpid=$!
for i in $(seq 50); do grep -q ready ${TMPDIR:-/tmp}/abc-relay.err && break; sleep 0.1; done
raddr=$(grep -o 'ready [0-9.:]*' ${TMPDIR:-/tmp}/abc-relay.err | cut -d' ' -f2)
$kp $lib client --connect $raddr --clients $CL --rate 60 --payload 400 --seconds ${SECS:-5} --warmup 1 --drain 1 --tuned > ${TMPDIR:-/tmp}/abc-cl.json
kill -INT $spid $rpid; wait $spid $rpid 2>/dev/null
python3 - "$name" "$r" "$CL" >> $out <<'PY'
import json,sys
c=json.load(open('${TMPDIR:-/tmp}/abc-cl.json'))
try: s=json.loads(open('${TMPDIR:-/tmp}/abc-srv.json').read().strip().splitlines()[-1])
except Exception: s={}
print(json.dumps({'name':sys.argv[1],'round':int(sys.argv[2]),'clients':int(sys.argv[3]),'client_cpu':c.get('cpu_us_per_message'),'server_cpu':s.get('cpu_us_per_message'),'p99':c.get('rtt_p99_us'),'ok':c.get('ok'),'lost':c.get('lost'),'rss_conn':c.get('rss_bytes_per_connection')}))
PY
done; done
