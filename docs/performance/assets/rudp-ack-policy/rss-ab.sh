#!/usr/bin/env bash
# RSS per connection, fresh processes alternated: each binary/protocol in turn, ROUNDS rounds.
cd /work/wt/ackpolicy
ROUNDS=${ROUNDS:-3}; CLIENTS=${CLIENTS:-1000}
for r in $(seq 1 $ROUNDS); do
  for spec in $SPECS; do
    bin=${spec%%:*}; proto=${spec##*:}
    extra=(); [ "$proto" = kcp ] && extra=(--kcp-mode fast)
    $bin --protocol $proto "${extra[@]}" --rate 20 --payload 400 --clients $CLIENTS --seconds 2 --warmup 1 --format json 2>/dev/null |
      python3 -c "
import json,sys
for l in sys.stdin:
    o=json.loads(l); print('$r', '$(basename $bin)', '$proto', round(o['rss_bytes_per_connection']/1024,2), round(o.get('server_datagrams_per_message') or 0,2), o.get('ok'))"
  done
done
