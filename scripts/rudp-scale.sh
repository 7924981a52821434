#!/usr/bin/env bash
# The scale case of issue 13: thousands of connections at a game tick, the
# server's CPU per message and the memory per connection, keel-rudp against
# plain keel-udp (the baseline) and KCP fast.
#
#   scripts/rudp-scale.sh [OUT_DIR]
#
# Every cell: CONNS clients (one socket and connection each) each sending
# a PAYLOAD-byte message RATE times a second (open loop, --rate; the
# clients' sends spread over the period), echoed back (keel-rudp:
# reliable-ordered; KCP: its one mode; udp: plain datagrams), no loss.
# The server runs on one thread of its own, the clients on another; the
# line's server_cpu_us_per_message is the server thread's CPU time over
# the messages it received in the measured phase, and its
# server_datagrams_per_message the datagrams the server received per
# message (1 for plain UDP; acknowledgements travelling alone add to it).
# "rudp-tick" is keel-rudp with the clients' max_ack_delay just above the
# tick (--ack-delay 1000/RATE + 1 ms), so a client's acknowledgement of an
# echo rides on its next message (docs/rudp-guide.md). Repetitions run the
# protocols alternately (udp, rudp, kcp, udp, ...) so drift on a shared
# machine touches them alike. Writes OUT_DIR/results.jsonl (one keel-bench
# line per run) and prints a Markdown table of medians.
#
# Environment: CONNS (default "1000 5000"), RATES (default "20 60"),
# PROTOCOLS (default "udp rudp rudp-tick kcp"), REPS (default 3), PAYLOAD (default
# 400), SECONDS_PER_RUN (default 10), KEEL_BENCH (default: build and use
# target/release/keel-bench).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-target/rudp-scale}
conns=${CONNS:-1000 5000}
rates=${RATES:-20 60}
protocols=${PROTOCOLS:-udp rudp rudp-tick kcp}
reps=${REPS:-3}
payload=${PAYLOAD:-400}
secs=${SECONDS_PER_RUN:-10}
if [ -z "${KEEL_BENCH:-}" ]; then
  cargo build --release -q -p keel-bench
  KEEL_BENCH=target/release/keel-bench
fi
# One socket per client, plus the runtime's own descriptors.
need=0
for c in $conns; do [ "$c" -gt "$need" ] && need=$c; done
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((need + 256)) ]; then
  ulimit -n $((need + 256)) 2>/dev/null || {
    echo "rudp-scale: need $((need + 256)) open files for $need clients; ulimit -n is $(ulimit -n)" >&2
    exit 1
  }
fi
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

for c in $conns; do
  for r in $rates; do
    for rep in $(seq 1 "$reps"); do
      for proto in $protocols; do
        echo "rudp-scale: $proto $c connections at $r Hz, repetition $rep" >&2
        extra=()
        if [ "$proto" = rudp-tick ]; then
          extra=(--ack-delay $((1000 / r + 1)))
        fi
        # A failed run still prints its line (ok: false); keep going.
        "$KEEL_BENCH" --protocol "${proto%-tick}" ${extra[@]+"${extra[@]}"} --rate "$r" --payload "$payload" \
          --clients "$c" --seconds "$secs" --warmup 2 --format json >>"$results" || true
      done
    done
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def fmt(x, spec):
    return "-" if x is None else format(x, spec)
def kind(r):
    if r["protocol"] == "rudp" and r.get("ack_delay_ms", 5) != 5:
        return "rudp-tick"
    return r["protocol"]
names = {"udp": "keel-udp (plain)", "rudp": "keel-rudp reliable-ordered",
         "rudp-tick": "keel-rudp, ack delay above the tick", "kcp": "KCP fast"}
print("| connections | rate Hz | protocol | runs ok | messages/s | server CPU µs/message | "
      "vs udp | server datagrams/message | server CPU % | RSS/connection KiB | lost | p50 ms | p99 ms |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
cells = sorted({(r["clients"], r["rate_hz"]) for r in rows})
for c, hz in cells:
    base = None
    for proto in ["udp", "rudp", "rudp-tick", "kcp"]:
        rs = [r for r in rows if kind(r) == proto and r["clients"] == c and r["rate_hz"] == hz]
        if not rs:
            continue
        ok = sum(1 for r in rs if r["ok"])
        cpu = med([r.get("server_cpu_us_per_message") for r in rs])
        if proto == "udp":
            base = cpu
        ratio = None if (cpu is None or not base) else cpu / base
        rss = med([r.get("rss_bytes_per_connection") for r in rs])
        print(f"| {c} | {hz} | {names[proto]} | {ok}/{len(rs)} | "
              f"{fmt(med([r.get('roundtrips_per_second') for r in rs]), '.0f')} | "
              f"{fmt(cpu, '.2f')} | {fmt(ratio, '.2f')} | "
              f"{fmt(med([r.get('server_datagrams_per_message') for r in rs]), '.2f')} | "
              f"{fmt(med([r.get('server_cpu_percent') for r in rs]), '.0f')} | "
              f"{fmt(None if rss is None else rss / 1024, '.1f')} | "
              f"{fmt(med([r.get('udp_lost_messages') for r in rs]), '.0f')} | "
              f"{fmt(med([r.get('rtt_p50_us') for r in rs]) and med([r.get('rtt_p50_us') for r in rs]) / 1000, '.1f')} | "
              f"{fmt(med([r.get('rtt_p99_us') for r in rs]) and med([r.get('rtt_p99_us') for r in rs]) / 1000, '.1f')} |")
PY
