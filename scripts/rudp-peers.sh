#!/usr/bin/env bash
# keel-rudp side by side with other reliable-UDP libraries, each its own
# process, all through one impairment relay (issue 22).
#
#   scripts/rudp-peers.sh [--quick] [--out DIR] [--overwrite] [OUT_DIR]   (--help for more)
#
# Every run is three processes: the server (keel-bench serve --protocol
# rudp|kcp, or keel-peer LIB server), `keel-bench relay` between it and
# the clients (loss L each way, 25 ms delay and JITTER each way: a 50 ms
# RTT; --impair client->server, --impair-server server->client; fates from
# the seed, the direction and the index in it), and the clients
# (keel-bench --connect, or keel-peer LIB client), which send PAYLOAD bytes
# at RATE Hz each, open loop, and time every echo on their own clock. The
# three JSON lines become one record in OUT_DIR/results.jsonl: the
# client's fields, the server's as server_*, the relay's as relay_*, and
# library, tuned, case, loss, seed, cpu_us_per_message (client),
# wire_bytes_per_payload_byte (bytes at the relay both ways, as received,
# over the payload bytes of the messages the server echoed, counted for
# the message and its echo). Then `keel-bench report` writes
# OUT_DIR/report.md and its charts.
#
# Libraries: keel-bench's own keel-rudp ("keel-bench-rudp") and KCP fast
# ("keel-bench-kcp", nodelay 1: the in-process rows of
# docs/performance/rudp.md), and every LIB that KEEL_PEER (default
# bench-peers/target/release/keel-peer, built by scripts/build-peers.sh)
# has built in, each with --tuned and without (TUNINGS). A missing
# keel-peer is said and skipped. KCP has one delivery mode: its
# unreliable runs are skipped.
#
# CALIBRATE=1 also runs keel-bench's keel-rudp and KCP in one process
# (keel-bench --impair/--impair-server, the in-process conditioner)
# alternated with the relayed runs, for the calibration table (case
# "calibration-inprocess" / "calibration-relay").
#
# Exit status: 0 the matrix ran (failed runs are results: their records say
# ok: false); 1 keel-bench could not be built or its report failed; 2 bad
# arguments or settings, or OUT_DIR holds an earlier matrix (without
# --overwrite).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="rudp-peers.sh"

usage() {
  cat <<EOF
Usage: scripts/rudp-peers.sh [--quick] [--out DIR] [--overwrite] [OUT_DIR]

keel-rudp, KCP and the peers of bench-peers (ENet, GameNetworkingSockets,
quinn, KCP, keel-rudp, renet: whichever keel-peer has built in), each its own
process, through keel-bench relay: loss 0-20 % each way, 50 ms RTT. Writes
DIR/results.jsonl (one merged record per run), DIR/report.md and charts.

  --quick              a short matrix: CASES=tick8 CHANNELS=reliable-ordered
                       LOSSES="0 10" SEEDS=1 SECONDS_PER_RUN=5 TUNINGS=tuned
                       (each still overridable by its variable)
  --out DIR, OUT_DIR   where the results go (default: out/rudp-peers); an
                       earlier matrix there (a non-empty results.jsonl) is
                       refused unless --overwrite
  --overwrite          replace an earlier matrix's results in DIR
  -h, --help           this text

Environment (lists are space or comma separated; checked before any run):
  CASES            among tick8 tick100 small8 small100 scale (default: all)
                   tickN: 400 B at 60 Hz, N clients; smallN: 100 B at 30 Hz;
                   scale: 1000 connections, 100 B at 20 Hz, loss 0 only,
                   from SCALE_CLIENT_PROCS client processes;
                   in every case the relay holds up to 65536 datagrams
                   (64 MiB) each way (keel-impair's default 4096 overflowed
                   at scale and at tick100 when the relay was starved);
                   relay-cost: keel-bench's UDP echo direct and through an
                   unimpaired relay, alternated, SEEDS repetitions (not in
                   the default); relay-load: the same echo, 100 clients with
                   4 datagrams in flight each, through the relay only (its
                   CPU per datagram when busy; not in the default); none: no
                   case (CALIBRATE=1 alone)
  CHANNELS         among reliable-ordered unreliable (default: both)
  LOSSES           loss % each way, 0..100    (default: "0 1 5 10 20")
  SEEDS            relay seeds, integers      (default: "1 2 3")
  LIBS             libraries to run (default: keel-bench-rudp keel-bench-kcp
                   and every LIB keel-peer has built in)
  TUNINGS          among tuned default (keel-peer's --tuned or not; default: both)
  SECONDS_PER_RUN  measured phase, s          (default: 10; 0 < s <= 3600)
  WARMUP           warm-up, s                 (default: 1; 0 <= s <= 60)
  JITTER           jitter each way, e.g. 3ms, 500us, 0 (default: 3ms; <= 25ms)
  CALIBRATE        1: also keel-bench's in-process runs, alternated (default: 0)
  SCALE_CLIENT_PROCS  client processes of the scale case, 1..16, dividing
                   1000 (default: 1); their lines merge into one record:
                   counts and CPU summed, each percentile the highest of
                   the processes' (an upper bound), RSS per connection the
                   processes' summed growth over their baselines over
                   every client, each process's p50/p99
                   in client_rtt_p50_us_each / client_rtt_p99_us_each
  RELAY_CPU        a CPU for the relay alone: the relay runs on it, the
                   servers and clients on the other CPUs (taskset; needs 2
                   CPUs or more; in each relayed run's record as relay_cpu;
                   relay-cost and the calibration's in-process runs are not
                   pinned; default: none, every process where the scheduler
                   puts it)
  KEEL_BENCH       keel-bench binary (default: build target/release/keel-bench)
  KEEL_PEER        keel-peer binary (default: bench-peers/target/release/keel-peer)
  KEEL_REDUNDANCY  keel-peer keel's reliable-ordered redundancy level, 0..5,
                   both ends (--redundancy; default: keel-rudp's, 2); in
                   keel's records as keel_redundancy. One level per run of
                   the script: the report merges a library's rows, so give
                   each level its own --out

The full matrix is long (hours: libraries x tunings x 4 cases x 2 channels x
5 losses x 3 seeds, about SECONDS_PER_RUN + 5 s each); --quick takes minutes.

Exit status: 0 the matrix ran (failed runs are results, ok: false in their
records); 1 keel-bench could not be built or its report failed; 2 bad
arguments or settings, or an earlier matrix in DIR without --overwrite.
EOF
}

# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

# --- arguments ----------------------------------------------------------------

parse_out_args quick -- "$@"
out=${out:-out/rudp-peers}

# --- settings: every value checked before anything runs ---------------------

if [[ $quick -eq 1 ]]; then
  d_cases="tick8" d_channels="reliable-ordered" d_losses="0 10" d_seeds="1" d_secs=5 d_tunings="tuned"
else
  d_cases="tick8 tick100 small8 small100 scale" d_channels="reliable-ordered unreliable"
  d_losses="0 1 5 10 20" d_seeds="1 2 3" d_secs=10 d_tunings="tuned default"
fi
cases=$(list CASES "$d_cases")
channels=$(list CHANNELS "$d_channels")
losses=$(list LOSSES "$d_losses")
seeds=$(list SEEDS "$d_seeds")
tunings=$(list TUNINGS "$d_tunings")
secs=${SECONDS_PER_RUN:-$d_secs}
warmup=${WARMUP:-1}
jitter=${JITTER:-3ms}
calibrate=${CALIBRATE:-0}
scale_procs=${SCALE_CLIENT_PROCS:-1}
keel_redundancy=${KEEL_REDUNDANCY:-}
relay_cpu=${RELAY_CPU:-}
export KEEL_REDUNDANCY=$keel_redundancy
libs_asked=$(list LIBS "")

for c in $cases; do
  case $c in tick8 | tick100 | small8 | small100 | scale | relay-cost | relay-load | none) ;;
    *) die "CASES: unknown case \"$c\" (accepted: tick8, tick100, small8, small100, scale, relay-cost, relay-load, or none)" ;;
  esac
done
[[ " $cases " != *" none "* ]] || cases=""
for c in $channels; do
  [[ "$c" == reliable-ordered || "$c" == unreliable ]] ||
    die "CHANNELS: unknown channel \"$c\" (accepted: reliable-ordered, unreliable)"
done
for l in $losses; do
  [[ "$l" =~ $decimal ]] && awk -v v="$l" 'BEGIN { exit !(v <= 100) }' ||
    die "LOSSES: expected loss percentages, decimals 0..100, got \"$l\" in \"$losses\""
done
for s in $seeds; do
  uint_ok SEEDS "$s" 0 999999
done
for t in $tunings; do
  [[ "$t" == tuned || "$t" == default ]] || die "TUNINGS: unknown tuning \"$t\" (accepted: tuned, default)"
done
seconds_ok SECONDS_PER_RUN "$secs" 3600
[[ "$warmup" == 0 ]] || seconds_ok WARMUP "$warmup" 60
jitter_ok "$jitter" ||
  die "JITTER: expected a duration up to the 25 ms delay (0, 500us, 3ms, 0.02s), got \"$jitter\""
[[ "$calibrate" == 0 || "$calibrate" == 1 ]] || die "CALIBRATE: expected 0 or 1, got \"$calibrate\""
uint_ok SCALE_CLIENT_PROCS "$scale_procs" 1 16
[[ -z "$keel_redundancy" ]] || uint_ok KEEL_REDUNDANCY "$keel_redundancy" 0 5
((1000 % 10#$scale_procs == 0)) ||
  die "SCALE_CLIENT_PROCS: expected a divisor of the scale case's 1000 clients (1, 2, 4, 5, 8, 10), got \"$scale_procs\""
relay_pin=() other_pin=()
if [[ -n "$relay_cpu" ]]; then
  ncpu=$(nproc 2>/dev/null || echo 1)
  ((ncpu >= 2)) || die "RELAY_CPU: needs at least 2 CPUs (one for the relay, one for the rest); this machine has $ncpu"
  uint_ok RELAY_CPU "$relay_cpu" 0 $((ncpu - 1))
  command -v taskset >/dev/null 2>&1 || die "RELAY_CPU needs taskset (Debian: apt-get install util-linux)"
  others=""
  for ((k = 0; k < ncpu; k++)); do
    ((k == 10#$relay_cpu)) || others+="${others:+,}$k"
  done
  relay_pin=(taskset -c "$((10#$relay_cpu))") other_pin=(taskset -c "$others")
fi
export RELAY_CPU=$relay_cpu
peer_libs_known="enet gns quinn quinn-streams kcp ikcp keel renet"
for l in $libs_asked; do
  case " keel-bench-rudp keel-bench-kcp $peer_libs_known " in
    *" $l "*) ;;
    *) die "LIBS: unknown library \"$l\" (accepted: keel-bench-rudp, keel-bench-kcp, ${peer_libs_known// /, })" ;;
  esac
done
keel_bench_check
if [[ -n "${KEEL_PEER:-}" ]]; then
  [[ -f "$KEEL_PEER" && -x "$KEEL_PEER" ]] || die "KEEL_PEER: $KEEL_PEER is not an executable file"
fi
command -v python3 >/dev/null 2>&1 || die "needs python3 to merge the lines (Debian: apt-get install python3)"
command -v timeout >/dev/null 2>&1 || die "needs timeout (coreutils) to bound every process"
command -v ps >/dev/null 2>&1 || die "needs ps (Debian: apt-get install procps) to watch the processes it starts"

results="$out/results.jsonl"
[[ ! -s "$results" || $overwrite -eq 1 ]] ||
  die "$results exists and is not empty (an earlier matrix); pass --overwrite to replace it, or choose another directory"

# --- binaries -------------------------------------------------------------------

keel_bench_ready
KEEL_PEER=${KEEL_PEER:-$ROOT/bench-peers/target/release/keel-peer}

tmp="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "$PROG: interrupted; the runs so far are in $results" >&2; exit 130' INT TERM

# wait_ready FILE PID: the ADDR of the "ready ADDR" line the process PID
# writes to FILE (its stderr), within 15 s; empty if it exits or is late.
wait_ready() {
  local i addr content
  for ((i = 0; i < 300; i++)); do
    # Only whole lines: an unbuffered stderr (Rust's eprintln!) writes
    # "ready ", the address and the newline in separate writes, and a read
    # between them saw "ready 127.0." (a run lost to it).
    content=$(
      cat "$1" 2>/dev/null
      echo x
    )
    content=${content%x}
    if [[ "$content" == *$'\n'* ]]; then
      addr=$(printf '%s' "${content%$'\n'*}" | sed -n 's/^ready \(.*\)$/\1/p' | head -n 1)
    else
      addr=""
    fi
    if [[ -n "$addr" ]]; then
      echo "$addr"
      return
    fi
    # Exited (gone, or a zombie not yet reaped): it will not say ready.
    case "$(ps -o stat= -p "$2" 2>/dev/null)" in "" | Z*) return 0 ;; esac
    sleep 0.05
  done
}

# stop PID: SIGTERM, then wait for it (SIGKILL after 10 s).
stop() {
  kill -TERM "$1" 2>/dev/null || true
  local i
  for ((i = 0; i < 200; i++)); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.05
  done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Which LIBs keel-peer has built in: each is started as a server and kept
# if it says ready (a LIB not built in exits 2 saying so).
peer_libs=""
if [[ -x "$KEEL_PEER" ]]; then
  for lib in $peer_libs_known; do
    # A file of its own: the last probe's "ready" must not be read as this one's.
    timeout 20 "$KEEL_PEER" "$lib" server --bind 127.0.0.1:0 >/dev/null 2>"$tmp/probe-$lib.err" &
    p=$!
    if [[ -n "$(wait_ready "$tmp/probe-$lib.err" "$p")" ]]; then
      peer_libs="$peer_libs $lib"
    else
      echo "$PROG: keel-peer $lib: not available ($(head -c 200 "$tmp/probe-$lib.err" | tr '\n' ' '))" >&2
    fi
    stop "$p"
  done
  echo "$PROG: keel-peer libraries:${peer_libs:- none}" >&2
else
  echo "$PROG: $KEEL_PEER not found: only keel-bench's keel-rudp and KCP run (scripts/build-peers.sh builds keel-peer)" >&2
fi
libs=""
for l in keel-bench-rudp keel-bench-kcp $peer_libs; do
  if [[ -z "$libs_asked" || " $libs_asked " == *" $l "* ]]; then
    libs="$libs $l"
  fi
done
for l in $libs_asked; do
  [[ " $libs " == *" $l "* ]] || echo "$PROG: LIBS names $l, which keel-peer does not have: skipped" >&2
done

mkdir -p "$out" || die "--out: cannot create $out"
: >"$results" || die "--out: cannot write $results"

# impair_spec LOSS: the conditioner spec of one direction (the relay's
# --seed gives the seed).
impair_spec() {
  local p
  p=$(loss_fraction "$1")
  # Held datagrams: enough that a relay starved of CPU for a while delays
  # the burst it then reads rather than dropping it (every overflow is
  # still counted, relay_*_overflow).
  spec="loss=$p,delay=25ms,jitter=$jitter,limit=65536,limit-bytes=67108864"
}

# merge CASE LIB TUNED LOSS SEED CHANNEL PAYLOAD: the three lines in
# $tmp/{client,server,relay}.json into one record on results.jsonl.
merge() {
  python3 -S - "$tmp" "$@" >>"$results" <<'PY'
import json, os, sys
tmp, case, lib, tuned, loss, seed, channel, payload = sys.argv[1:]
def line(name):
    try:
        for l in open(f"{tmp}/{name}.json", encoding="utf-8", errors="replace"):
            l = l.strip()
            if l.startswith("{"):
                obj = json.loads(l)
                if isinstance(obj, dict):
                    return obj
    except (OSError, ValueError):
        pass
    return None
client, server, relay = line("client"), line("server"), line("relay")
procs = int(open(f"{tmp}/client-procs").read()) if os.path.exists(f"{tmp}/client-procs") else 1
if procs > 1:
    # Several client processes: one record of their lines.
    parts = [line(f"client-{k}") for k in range(1, procs + 1)]
    got = [p for p in parts if p is not None]
    client = None
    if got:
        client = dict(got[0])
        def nums(k):
            return [p[k] for p in got if isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool)]
        for k in ("clients", "messages_sent", "messages_delivered", "lost", "duplicates", "corrupt",
                  "warmup_sent", "warmup_echoes", "rtt_samples", "cpu_seconds", "messages",
                  "udp_lost_messages"):
            if nums(k):
                client[k] = sum(nums(k))
        for k, f in (("rtt_min_us", min), ("rtt_p50_us", max), ("rtt_p99_us", max),
                     ("rtt_p999_us", max), ("rtt_max_us", max), ("elapsed_seconds", max),
                     ("connect_seconds", max)):
            if nums(k):
                client[k] = f(nums(k))
        # RSS per connection: every process's growth over its baseline,
        # summed, over every client.
        rss, base = nums("rss_bytes"), nums("rss_bytes_baseline")
        if len(rss) == len(base) == len(got) and client.get("clients"):
            client["rss_bytes"], client["rss_bytes_baseline"] = sum(rss), sum(base)
            client["rss_bytes_per_connection"] = (sum(rss) - sum(base)) / client["clients"]
        client["client_rtt_p50_us_each"] = [p.get("rtt_p50_us") for p in parts if p is not None]
        client["client_rtt_p99_us_each"] = [p.get("rtt_p99_us") for p in parts if p is not None]
        sent = client.get("messages_sent") or client.get("messages")
        if client.get("cpu_seconds") is not None and sent:
            client["cpu_us_per_message"] = client["cpu_seconds"] * 1e6 / sent
        errs = [p.get("error") for p in got if p.get("error")]
        if len(got) < procs:
            errs.append(f"{procs - len(got)} of {procs} client processes printed no JSON line")
        client["ok"] = all(p.get("ok") for p in got) and len(got) == procs
        client["error"] = "; ".join(errs) or None
    rec = dict(client or {"ok": False, "error": "no client process printed a JSON line"})
    rec["client_processes"] = procs
    rec["rtt_percentiles"] = "the highest of the client processes' (an upper bound)"
else:
    rec = dict(client or {"ok": False, "error": "the client printed no JSON line"})
if client is not None and "backend" in client:
    # keel-bench's own client: the peers' field names where they differ.
    rec["library"] = {"keel-bench-rudp": "keel-rudp (keel-bench)",
                      "keel-bench-kcp": "KCP fast (keel-bench)",
                      "udp-direct": "udp direct",
                      "udp-relay": "udp through the relay"}[lib]
    rec["messages_delivered"] = client.get("messages")
    rec["lost"] = client.get("udp_lost_messages")
    if client.get("cpu_seconds") is not None and client.get("messages"):
        rec["cpu_us_per_message"] = client["cpu_seconds"] * 1e6 / client["messages"]
    rec["settings"] = {
        "keel-bench-rudp": "keel-rudp defaults, insecure, max_ack_delay 5 ms",
        "keel-bench-kcp": "KCP fast: nodelay 1, interval 10, resend 2, nc 1, windows 128",
        "udp-direct": "keel-bench's UDP echo, closed loop",
        "udp-relay": "keel-bench's UDP echo, closed loop, through an unimpaired relay",
    }[lib]
    rec["pump"] = "keel-reactor (epoll, timers)"
rec.setdefault("library", lib)
rec["lib"] = lib
# Whether the clients kept to their schedule: messages sent in the window
# over clients x rate x window (below 1: the load generator fell behind).
if all(isinstance(rec.get(k), (int, float)) for k in ("messages_sent", "clients", "rate_hz", "window_seconds")) \
        and rec["clients"] * rec["rate_hz"] * rec["window_seconds"] > 0:
    rec["offered_fraction"] = rec["messages_sent"] / (rec["clients"] * rec["rate_hz"] * rec["window_seconds"])
rec["tuned"] = tuned == "1"
rec["relay_cpu"] = int(os.environ["RELAY_CPU"]) if os.environ.get("RELAY_CPU") else None
if lib == "keel" and os.environ.get("KEEL_REDUNDANCY"):
    rec["keel_redundancy"] = int(os.environ["KEEL_REDUNDANCY"])
rec["case"] = case
rec["loss"] = float(loss) / 100
rec["seed"] = int(seed)
rec["channel"] = rec.get("channel") or channel
rec["payload_bytes"] = rec.get("payload_bytes") or int(payload)
errors = []
if server is None:
    errors.append("the server printed no JSON line")
else:
    for k, v in server.items():
        rec["server_" + k] = v
if relay is None:
    errors.append("the relay printed no JSON line")
else:
    for k, v in relay.items():
        rec["relay_" + k] = v
echoed = (server or {}).get("messages_echoed")
if relay and echoed:
    wire = relay.get("up_bytes", 0) + relay.get("down_bytes", 0)
    rec["wire_bytes_per_payload_byte"] = wire / (2 * echoed * rec["payload_bytes"])
else:
    rec["wire_bytes_per_payload_byte"] = None
if errors:
    rec["ok"] = False
    rec["error"] = "; ".join(([rec["error"]] if rec.get("error") else []) + errors)
print(json.dumps(rec))
PY
}

# one CASE LIB TUNED LOSS SEED CHANNEL PAYLOAD RATE CLIENTS: one run.
one() {
  local case=$1 lib=$2 tuned=$3 loss=$4 seed=$5 channel=$6 payload=$7 rate=$8 clients=$9
  local server_cmd client_cmd drain=5 sp rp addr raddr procs=1 k cps
  rm -f "$tmp"/{client,server,relay}.json "$tmp"/client-*.json "$tmp"/client-procs "$tmp"/*.err
  [[ $case == scale ]] && procs=$((10#$scale_procs))
  case $lib in
    keel-bench-rudp)
      server_cmd=("$KEEL_BENCH" serve --protocol rudp --channel "$channel" --payload "$payload")
      client_cmd=("$KEEL_BENCH" --protocol rudp --channel "$channel" --format json)
      ;;
    keel-bench-kcp)
      server_cmd=("$KEEL_BENCH" serve --protocol kcp --payload "$payload")
      client_cmd=("$KEEL_BENCH" --protocol kcp --format json)
      ;;
    *)
      local t=()
      [[ $tuned == 1 ]] && t=(--tuned)
      [[ $lib == keel && -n "$keel_redundancy" ]] && t+=(--redundancy "$keel_redundancy")
      server_cmd=("$KEEL_PEER" "$lib" server "${t[@]}")
      client_cmd=("$KEEL_PEER" "$lib" client "${t[@]}" --channel "$channel")
      ;;
  esac
  impair_spec "$loss"
  echo "$PROG: $case $lib$([[ $tuned == 1 ]] && echo ' tuned') $channel loss=$loss% seed=$seed" >&2
  timeout $((${secs%.*} + 120)) ${other_pin[@]+"${other_pin[@]}"} "${server_cmd[@]}" --bind 127.0.0.1:0 >"$tmp/server.json" 2>"$tmp/server.err" &
  sp=$!
  pids=("$sp")
  addr=$(wait_ready "$tmp/server.err" "$sp")
  if [[ -z "$addr" ]]; then
    echo "$PROG: the server did not say ready: $(head -c 300 "$tmp/server.err")" >&2
    stop "$sp"
    echo '{"ok": false, "error": "the server did not start"}' >"$tmp/client.json"
    merge "$case" "$lib" "$tuned" "$loss" "$seed" "$channel" "$payload"
    return
  fi
  timeout $((${secs%.*} + 120)) ${relay_pin[@]+"${relay_pin[@]}"} "$KEEL_BENCH" relay --bind 127.0.0.1:0 --upstream "$addr" \
    --impair "$spec" --impair-server "$spec" --seed "$seed" >"$tmp/relay.json" 2>"$tmp/relay.err" &
  rp=$!
  pids=("$sp" "$rp")
  raddr=$(wait_ready "$tmp/relay.err" "$rp")
  if [[ -n "$raddr" && $procs -gt 1 ]]; then
    # Several client processes, clients / procs each, started together.
    echo "$procs" >"$tmp/client-procs"
    cps=()
    for ((k = 1; k <= procs; k++)); do
      timeout $((${secs%.*} + ${warmup%.*} + drain + 60)) ${other_pin[@]+"${other_pin[@]}"} "${client_cmd[@]}" --connect "$raddr" \
        --clients $((clients / procs)) --rate "$rate" --payload "$payload" --seconds "$secs" \
        --warmup "$warmup" --drain "$drain" >"$tmp/client-$k.json" 2>"$tmp/client-$k.err" &
      cps+=($!)
    done
    pids=("$sp" "$rp" "${cps[@]}")
    for k in "${cps[@]}"; do wait "$k" || true; done
    cat "$tmp"/client-*.err >"$tmp/client.err" 2>/dev/null || true
  elif [[ -n "$raddr" ]]; then
    timeout $((${secs%.*} + ${warmup%.*} + drain + 60)) ${other_pin[@]+"${other_pin[@]}"} "${client_cmd[@]}" --connect "$raddr" \
      --clients "$clients" --rate "$rate" --payload "$payload" --seconds "$secs" \
      --warmup "$warmup" --drain "$drain" >"$tmp/client.json" 2>"$tmp/client.err" || true
  else
    echo "$PROG: the relay did not say ready: $(head -c 300 "$tmp/relay.err")" >&2
  fi
  stop "$rp"
  stop "$sp"
  pids=()
  [[ -s "$tmp/client.err" ]] && tail -n 2 "$tmp/client.err" | sed "s/^/$PROG: client: /" >&2
  merge "$case" "$lib" "$tuned" "$loss" "$seed" "$channel" "$payload"
}

# inprocess LIB LOSS SEED: keel-bench's own in-process run of the tick
# case (the calibration's other half), recorded like a relayed one.
inprocess() {
  local lib=$1 loss=$2 seed=$3 proto
  proto=${lib#keel-bench-}
  impair_spec "$loss"
  echo "$PROG: calibration in-process $lib loss=$loss% seed=$seed" >&2
  timeout $((${secs%.*} + 120)) "$KEEL_BENCH" --protocol "$proto" --rate 60 --payload 400 --clients 8 \
    --seconds "$secs" --warmup "$warmup" --impair "$spec,seed=$seed" \
    --impair-server "$spec,seed=$((seed + 1000))" --format json >"$tmp/line" 2>/dev/null || true
  python3 -S - "$tmp/line" "$lib" "$loss" "$seed" >>"$results" <<'PY'
import json, sys
path, lib, loss, seed = sys.argv[1:]
for l in open(path, encoding="utf-8", errors="replace"):
    try:
        rec = json.loads(l)
    except ValueError:
        continue
    rec["library"] = {"keel-bench-rudp": "keel-rudp (keel-bench)", "keel-bench-kcp": "KCP fast (keel-bench)"}[lib]
    rec["lib"] = lib
    rec["case"] = "calibration-inprocess"
    rec["loss"] = float(loss) / 100
    rec["seed"] = int(seed)
    rec["tuned"] = False
    rec["messages_delivered"] = rec.get("messages")
    rec["lost"] = rec.get("udp_lost_messages")
    print(json.dumps(rec))
PY
}

# relay_cost PATH SEED [CASE CLIENTS WINDOW]: keel-bench's closed-loop UDP
# echo (serve and --connect; 1 client, window 1 unless given) direct or
# through an unimpaired relay, recorded with case CASE (relay-cost) and
# library "udp direct" or "udp through the relay".
relay_cost() {
  local path=$1 seed=$2 rcase=${3:-relay-cost} nclients=${4:-1} window=${5:-1} sp rp addr target
  rm -f "$tmp"/{client,server,relay}.json "$tmp"/client-*.json "$tmp"/client-procs "$tmp"/*.err
  echo "$PROG: $rcase $path repetition $seed" >&2
  timeout $((${secs%.*} + 60)) "$KEEL_BENCH" serve --bind 127.0.0.1:0 --format json \
    >"$tmp/server.json" 2>"$tmp/server.err" &
  sp=$!
  pids=("$sp")
  for ((i = 0; i < 300; i++)); do
    addr=$(sed -n 's/^keel-bench serve: listening on \(.*\)$/\1/p' "$tmp/server.err" 2>/dev/null | head -n 1)
    [[ -n "$addr" ]] && break
    sleep 0.05
  done
  target=$addr
  if [[ $path == relay ]]; then
    timeout $((${secs%.*} + 60)) "$KEEL_BENCH" relay --bind 127.0.0.1:0 --upstream "$addr" \
      >"$tmp/relay.json" 2>"$tmp/relay.err" &
    rp=$!
    pids=("$sp" "$rp")
    target=$(wait_ready "$tmp/relay.err" "$rp")
  fi
  if [[ -n "$target" ]]; then
    timeout $((${secs%.*} + 60)) "$KEEL_BENCH" --connect "$target" --clients "$nclients" --window "$window" --payload 400 \
      --seconds "$secs" --warmup "$warmup" --format json >"$tmp/client.json" 2>/dev/null || true
  fi
  [[ $path == relay ]] && stop "$rp"
  stop "$sp"
  pids=()
  [[ $path == relay ]] || echo '{"role": "relay", "note": "direct: no relay"}' >"$tmp/relay.json"
  merge "$rcase" "udp-$path" 0 0 "$seed" none 400
}

# case_shape CASE: payload, rate and clients of a case.
case_shape() {
  case $1 in
    tick8) shape=(400 60 8) ;;
    tick100) shape=(400 60 100) ;;
    small8) shape=(100 30 8) ;;
    small100) shape=(100 30 100) ;;
    scale) shape=(100 20 1000) ;;
  esac
}

# The 1,000-connection case needs 1,000 sockets in the relay and in each
# client process.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

if [[ $calibrate -eq 1 ]]; then
  for loss in $losses; do
    for seed in $seeds; do
      for lib in keel-bench-rudp keel-bench-kcp; do
        inprocess "$lib" "$loss" "$seed"
        one calibration-relay "$lib" 0 "$loss" "$seed" reliable-ordered 400 60 8
      done
    done
  done
fi

if [[ " $cases " == *" relay-cost "* ]]; then
  for seed in $seeds; do
    relay_cost direct "$seed"
    relay_cost relay "$seed"
  done
  cases=$(echo " $cases " | sed 's/ relay-cost / /')
fi
if [[ " $cases " == *" relay-load "* ]]; then
  for seed in $seeds; do
    relay_cost relay "$seed" relay-load 100 4
  done
  cases=$(echo " $cases " | sed 's/ relay-load / /')
fi

for case in $cases; do
  case_shape "$case"
  case_losses=$losses
  [[ $case == scale ]] && case_losses=0
  for channel in $channels; do
    for loss in $case_losses; do
      for seed in $seeds; do
        # Libraries alternate within each (loss, seed): the machine's load
        # drifts over a long matrix, and every library meets it alike.
        for lib in $libs; do
          if [[ $channel == unreliable && ($lib == keel-bench-kcp || $lib == kcp || $lib == ikcp) ]]; then
            continue
          fi
          case $lib in
            keel-bench-*) lib_tunings=0 ;;
            *)
              lib_tunings=""
              for t in $tunings; do lib_tunings="$lib_tunings $([[ $t == tuned ]] && echo 1 || echo 0)"; done
              ;;
          esac
          for tuned in $lib_tunings; do
            one "$case" "$lib" "$tuned" "$loss" "$seed" "$channel" "${shape[@]}"
          done
        done
      done
    done
  done
done

"$KEEL_BENCH" report "$results" --out "$out" || {
  echo "$PROG: keel-bench report failed; the runs are in $results" >&2
  exit 1
}
[[ -f "$out/peers.md" ]] && cat "$out/peers.md"
echo "$PROG: results in $results, tables and charts in $out/peers.md" >&2
