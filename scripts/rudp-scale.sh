#!/usr/bin/env bash
# The scale case of issue 13: thousands of connections at a game tick, the
# server's CPU per message and the memory per connection, keel-rudp against
# plain keel-udp (the baseline) and KCP fast.
#
#   scripts/rudp-scale.sh [--out DIR] [--overwrite] [OUT_DIR]   (--help for more)
#
# Every cell: CONNS clients (one socket and connection each) each sending
# a PAYLOAD-byte message RATE times a second (open loop, --rate; the
# clients' sends spread over the period), echoed back (keel-rudp:
# reliable-ordered; KCP: its one mode; udp: plain datagrams), no loss.
# The server runs on one thread of its own, the clients on another; the
# line's server_cpu_us_per_message is the server thread's CPU time (its
# scheduler run time, ns) over the messages it received in the measured
# phase, and its server_datagrams_per_message the datagrams the server
# received per message (1 for plain UDP; acknowledgements travelling alone
# add to it). "rudp-tick" is keel-rudp with the clients' max_ack_delay
# just above the tick (--ack-delay 1000/RATE + 1 ms), so a client's
# acknowledgement of an echo rides on its next message
# (docs/rudp-guide.md). "udp-df" is plain keel-udp with --dont-fragment:
# its sockets set Don't Fragment as keel-rudp's do by default, which
# spares the kernel the IPv4 identification generator on each send; the
# table's "vs udp-df" is the like-for-like ratio. Repetitions run the
# protocols alternately (udp, udp-df, rudp, ..., udp, ...) so drift on a
# shared machine touches them alike.
# CLIENT_SOCKETS=shared runs every cell with `keel-bench --client-sockets
# shared`: the clients on one socket per client thread, each from a
# loopback address of its own, their datagrams batched, so that 5,000
# clients at 60 Hz do not outrun the load generator before the server.
# PLACEMENT pins the run's threads with taskset as soon as they exist
# (before the warm-up's end): the server's CPU per message at a light load
# depends on whether its wake-ups cross CPUs (docs/performance/rudp.md,
# "the 1,000 x 20 Hz ratio is where the threads run"); free leaves it to
# the scheduler, as before. Each line records "placement" and
# "placement_applied" (the server's thread read back on CPU 0 alone).
#
# Writes OUT_DIR/results.jsonl (one keel-bench line per run, with "case":
# "scale" added, which files it in `keel-bench report`'s "Scale" table
# whatever CONNS is), OUT_DIR/report.md and rudp-scale.svg (`keel-bench
# report`), and OUT_DIR/table.md, a Markdown table of medians (with
# "vs udp", the server CPU per message over plain keel-udp's in the same
# cell), printed on stdout. The settings are environment variables (see
# --help); all of them are checked before anything runs or any file is
# touched.
#
# Exit status: 0 the runs ran (failed runs are results: ok: false in their
# lines, "runs ok" in the table); 1 keel-bench could not be built or its
# report failed, or too few open files for CONNS; 2 bad arguments or
# settings, or OUT_DIR holds earlier results (without --overwrite).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="rudp-scale.sh"

usage() {
  cat <<EOF
Usage: scripts/rudp-scale.sh [--out DIR] [--overwrite] [OUT_DIR]

Thousands of connections at a game tick, no loss: the server's CPU per message
and the memory per connection of plain keel-udp (the baseline), keel-rudp and
KCP fast. Writes DIR/results.jsonl (one keel-bench line per run), DIR/report.md
and DIR/rudp-scale.svg (keel-bench report), DIR/table.md (medians, printed).

  --out DIR, OUT_DIR   where the results go (default: out/rudp-scale); earlier
                       results there (a non-empty results.jsonl) are refused
                       unless --overwrite
  --overwrite          replace earlier results in DIR
  -h, --help           this text

Environment (lists are space or comma separated; checked before any run):
  CONNS            connections per cell, 1..10000   (default: "1000 5000")
  RATES            messages per second per client, 1..10000 (default: "20 60")
  PROTOCOLS        among "udp udp-df rudp rudp-tick kcp" (default: all five)
  REPS             repetitions, >= 1                 (default: 3)
  PAYLOAD          bytes per message, 16..65507      (default: 400)
  SECONDS_PER_RUN  measured phase, s, 0 < s <= 3600  (default: 10)
  WARMUP           warm-up, s, 0 <= s <= 3600        (default: 2)
  CLIENT_SOCKETS   per-client or shared: keel-bench --client-sockets
                   (default: per-client; shared: a batched load generator)
  PLACEMENT        where the threads run (default: free, the scheduler's
                   choice); server = the server's thread alone on CPU 0,
                   the rest free; split = the server's on CPU 0, every other
                   thread on the other CPUs; one = every thread on CPU 0
                   (taskset, Linux)
  KEEL_BENCH       keel-bench binary (default: build target/release/keel-bench)

Exit status: 0 the runs ran (failed runs are results, counted in "runs ok");
1 keel-bench could not be built or its report failed, or too few open files;
2 bad arguments or settings, or earlier results in DIR without --overwrite.
EOF
}

# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

# --- arguments ----------------------------------------------------------------

parse_out_args -- "$@"
out=${out:-out/rudp-scale}

# --- settings: every value checked before anything runs ---------------------

conns=$(list CONNS "1000 5000")
rates=$(list RATES "20 60")
protocols=$(list PROTOCOLS "udp udp-df rudp rudp-tick kcp")
reps=${REPS:-3}
payload=${PAYLOAD:-400}
secs=${SECONDS_PER_RUN:-10}
warmup=${WARMUP:-2}
client_sockets=${CLIENT_SOCKETS:-per-client}
placement=${PLACEMENT:-free}

for c in $conns; do
  uint_ok CONNS "$c" 1 10000
done
for r in $rates; do
  uint_ok RATES "$r" 1 10000
done
for p in $protocols; do
  case $p in
    udp | udp-df | rudp | rudp-tick | kcp) ;;
    *) die "PROTOCOLS: unknown protocol \"$p\" (accepted: udp, udp-df, rudp, rudp-tick, kcp)" ;;
  esac
done
case $client_sockets in
  per-client | shared) ;;
  *) die "CLIENT_SOCKETS: expected per-client or shared, got \"$client_sockets\"" ;;
esac
case $placement in
  free | server | split | one) ;;
  *) die "PLACEMENT: expected free, server, split or one, got \"$placement\"" ;;
esac
cpus=$(nproc 2>/dev/null || echo 1)
if [ "$placement" != free ]; then
  command -v taskset >/dev/null 2>&1 ||
    die "PLACEMENT=$placement needs taskset (Debian: apt-get install util-linux)"
  [ "$placement" != split ] || [ "$cpus" -ge 2 ] ||
    die "PLACEMENT=split needs at least 2 CPUs; this machine has $cpus"
fi
uint_ok REPS "$reps" 1 1000
uint_ok PAYLOAD "$payload" 16 65507
seconds_ok SECONDS_PER_RUN "$secs"
decimal_ok "$warmup" 'v <= 3600' ||
  die "WARMUP: expected seconds, a decimal with 0 <= s <= 3600, got \"$warmup\""
keel_bench_check
command -v python3 >/dev/null 2>&1 || die "needs python3 for the table (Debian: apt-get install python3)"

results="$out/results.jsonl"
# Earlier results are kept unless asked: a long run is not lost to a
# repeated command.
[[ ! -s "$results" || $overwrite -eq 1 ]] ||
  die "$results exists and is not empty (earlier results); pass --overwrite to replace them, or choose another directory"

# One socket per client, plus the runtime's own descriptors.
need=0
for c in $conns; do
  if ((10#$c > need)); then need=$((10#$c)); fi
done
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((need + 256)) ]; then
  ulimit -n $((need + 256)) 2>/dev/null || {
    echo "$PROG: need $((need + 256)) open files for $need clients; ulimit -n is $(ulimit -n) (raise it, or lower CONNS)" >&2
    exit 1
  }
fi

# --- the runs -------------------------------------------------------------------

keel_bench_ready
mkdir -p "$out" || die "--out: cannot create $out"
: >"$results" || die "--out: cannot write $results"
rm -f "$out/table.md"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Ctrl-C / kill: the runs so far stay in results.jsonl (the one in progress
# is not recorded); `keel-bench report` reads them.
trap 'echo "$PROG: interrupted; the runs so far are in $results" >&2; exit 130' INT TERM
for c in $conns; do
  for r in $rates; do
    for rep in $(seq 1 "$reps"); do
      for proto in $protocols; do
        echo "$PROG: $proto $c connections at $r Hz, repetition $rep" >&2
        extra=()
        if [ "$proto" = rudp-tick ]; then
          extra=(--ack-delay $((1000 / r + 1)))
        elif [ "$proto" = udp-df ]; then
          extra=(--dont-fragment)
        fi
        # A failed run still prints its line (ok: false); keep going.
        "$KEEL_BENCH" --protocol "${proto%-*}" ${extra[@]+"${extra[@]}"} --rate "$r" --payload "$payload" \
          --clients "$c" --seconds "$secs" --warmup "$warmup" --client-sockets "$client_sockets" \
          --format json >"$tmp/line" &
        bench=$!
        place_threads "$bench" "$placement"
        wait "$bench" || true
        # "case": "scale" files the line in the report's scale table.
        tag_lines "$tmp/line" "{\"case\": \"scale\", \"placement\": \"$placement\", \"placement_applied\": $placed}" >>"$results"
      done
    done
  done
done

"$KEEL_BENCH" report "$results" --out "$out" >&2 || {
  echo "$PROG: keel-bench report failed; the runs are in $results" >&2
  exit 1
}

python3 - "$results" "$client_sockets" "$placement" >"$out/table.md" <<'PY'
import json, statistics, sys
rows = []
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    if isinstance(r, dict) and r.get("clients") is not None and r.get("rate_hz") is not None:
        rows.append(r)
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def fmt(x, spec):
    return "-" if x is None else format(x, spec)
def kind(r):
    # A rudp line without ack_delay_ms ran at keel-rudp's default (5 ms).
    if r.get("protocol") == "rudp" and (r.get("ack_delay_ms") or 5) != 5:
        return "rudp-tick"
    if r.get("protocol") == "udp" and r.get("dont_fragment"):
        return "udp-df"
    return r.get("protocol")
def ms(x):
    return None if x is None else x / 1000
print(f"Client sockets: {sys.argv[2]} (CLIENT_SOCKETS)\n")
print(f"Placement: {sys.argv[3]} (PLACEMENT)\n")
names = {"udp": "keel-udp (plain)", "udp-df": "keel-udp, Don't Fragment", "rudp": "keel-rudp reliable-ordered",
         "rudp-tick": "keel-rudp, ack delay above the tick", "kcp": "KCP fast"}
print("| connections | rate Hz | protocol | runs ok | messages/s | server CPU µs/message | "
      "vs udp | vs udp-df | server datagrams/message | server CPU % | RSS/connection KiB | lost | p50 ms | p99 ms |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
cells = sorted({(r["clients"], r["rate_hz"]) for r in rows})
for c, hz in cells:
    cell = [r for r in rows if r["clients"] == c and r["rate_hz"] == hz]
    # The baseline: plain keel-udp's median in the same cell (whatever the
    # order of PROTOCOLS); "-" when the cell has no udp run with a figure.
    base = med([r.get("server_cpu_us_per_message") for r in cell if kind(r) == "udp"])
    base_df = med([r.get("server_cpu_us_per_message") for r in cell if kind(r) == "udp-df"])
    for proto in ["udp", "udp-df", "rudp", "rudp-tick", "kcp"]:
        rs = [r for r in cell if kind(r) == proto]
        if not rs:
            continue
        ok = sum(1 for r in rs if r.get("ok"))
        cpu = med([r.get("server_cpu_us_per_message") for r in rs])
        ratio = None if (cpu is None or not base) else cpu / base
        ratio_df = None if (cpu is None or not base_df) else cpu / base_df
        rss = med([r.get("rss_bytes_per_connection") for r in rs])
        print(f"| {c} | {hz} | {names[proto]} | {ok}/{len(rs)} | "
              f"{fmt(med([r.get('roundtrips_per_second') for r in rs]), '.0f')} | "
              f"{fmt(cpu, '.2f')} | {fmt(ratio, '.2f')} | {fmt(ratio_df, '.2f')} | "
              f"{fmt(med([r.get('server_datagrams_per_message') for r in rs]), '.2f')} | "
              f"{fmt(med([r.get('server_cpu_percent') for r in rs]), '.0f')} | "
              f"{fmt(None if rss is None else rss / 1024, '.1f')} | "
              f"{fmt(med([r.get('udp_lost_messages') for r in rs]), '.0f')} | "
              f"{fmt(ms(med([r.get('rtt_p50_us') for r in rs])), '.1f')} | "
              f"{fmt(ms(med([r.get('rtt_p99_us') for r in rs])), '.1f')} |")
PY
cat "$out/table.md"
echo "$PROG: results in $results, table in $out/table.md, report in $out/report.md" >&2
