#!/usr/bin/env bash
# The IPv4 boundary and burst-loss probe: keel-bench over UDP payloads at the
# IPv4 boundaries x client windows, on one shared thread, with the host's
# /proc/net/snmp counters read before and after, a fill test of the server's
# receive buffer, and a summary that puts lost echoes next to the burst size
# (clients x window x payload) and the receive buffer.
#
#   scripts/udp-limits.sh [OPTIONS]          (--help for the options)
#
# Writes into --out DIR:
#   runs.jsonl                one line per run (scripts/matrix.sh output)
#   snmp-before.txt           /proc/net/snmp before the first run
#   snmp-after.txt            /proc/net/snmp after the last run
#   report/                   keel-bench report: report.md, loss.svg, and the
#                             throughput/p99 charts of the cells that passed
#   limits.json               everything below as data
#   limits.md                 tables: lost echoes per cell, loss vs burst vs
#                             receive buffer, snmp deltas, the machine
#
# Lossy cells fail their keel-bench runs by design (a lost echo fails a run),
# and a payload over the IPv4 limit is refused by design: those are the
# probe's results, not errors. The matrix runs with --keep-going and
# --expect-limits, so its progress says "lost as expected: N of M echoes"
# or "refused as expected" for them, and FAILED only for a surprise. Needs
# bash, python3 (standard library only) and Linux for the kernel counters.
#
# Exit status: 0 the probe ran and every run passed, lost echoes (a burst
# over the receive buffer) or was refused for a payload over 65507 B;
# 1 a run failed for another reason (crash, content error, timeout...), see
# limits.md and the FAILED lines; 2 bad options, a missing tool, an --out
# that holds an earlier probe (without --overwrite), or the matrix/report
# could not run.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="udp-limits.sh"

usage() {
  cat <<EOF
Usage: scripts/udp-limits.sh [OPTIONS]

The IPv4 boundary and burst-loss probe: keel-bench for every payload x window
(16 clients, --io-model shared --io-threads 1, 1 server lane), each run a fresh
process (scripts/matrix.sh --keep-going), with /proc/net/snmp read before and
after, then keel-bench report (loss chart and table) and a summary that relates
lost echoes to the burst (clients x window x payload) and to the server's
receive buffer, measured by filling a socket of the same size.

  --out DIR            where everything goes (default: out/udp-limits);
                       an earlier probe there is refused unless --overwrite
  --overwrite          replace an earlier probe's files in --out DIR
  --bench PATH         keel-bench binary (default: target/release/keel-bench,
                       built with cargo if missing)
  --payloads LIST      payload bytes          (default: 1472,8192,16356,16384,65507)
  --windows LIST       windows per client     (default: 1,16,64)
  --clients N          clients                (default: 16)
  --seconds S          measured phase per run (default: 0.5)
  --warmup S           warm-up per run        (default: 0.25)
  --repetitions N      runs per cell          (default: 3)
  -h, --help           this text

A lossy run holds its lost slots until keel-bench's 2 s drain ends, so it takes
about warm-up + seconds + 2 s; the default probe takes 1-2 minutes. Progress,
one line per run, goes to stderr: runs that lose echoes say "lost as expected",
payloads over the IPv4 limit (e.g. --payloads 65508) "refused as expected";
FAILED is kept for real surprises.

Exit status: 0 probe complete (losses and refusals are results, not errors);
1 a run failed for another reason; 2 bad options, missing tool, an earlier
probe in --out (use --overwrite), matrix or report could not run.
EOF
}

# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

out=""
bench=""
payloads="1472,8192,16356,16384,65507"
windows="1,16,64"
clients="16"
seconds="0.5"
warmup="0.25"
repetitions="3"
overwrite=0
invocation="scripts/udp-limits.sh"
for a in "$@"; do
  printf -v q '%q' "$a"
  invocation+=" $q"
done

while [[ $# -gt 0 ]]; do
  arg="$1"
  shift
  name="$arg"
  value=""
  has_value=0
  if [[ "$arg" == --*=* ]]; then
    name="${arg%%=*}"
    value="${arg#*=}"
    has_value=1
  fi
  case "$name" in
    -h | --help)
      usage
      exit 0
      ;;
    --overwrite)
      [[ $has_value -eq 0 ]] || die "--overwrite takes no value"
      overwrite=1
      continue
      ;;
    --out | --bench | --payloads | --windows | --clients | --seconds | --warmup | --repetitions)
      if [[ $has_value -eq 0 ]]; then
        [[ $# -gt 0 && "$1" != --* ]] || die "$name: missing value (see --help)"
        value="$1"
        shift
      fi
      [[ -n "$value" ]] || die "$name: empty value"
      ;;
    *)
      die "unknown option $arg (see --help)"
      ;;
  esac
  case "$name" in
    --out) out="$value" ;;
    --bench) bench="$value" ;;
    --payloads) payloads="$value" ;;
    --windows) windows="$value" ;;
    --clients) clients="$value" ;;
    --seconds) seconds="$value" ;;
    --warmup) warmup="$value" ;;
    --repetitions) repetitions="$value" ;;
  esac
done

# Every value checked here, before --out is touched, against keel-bench's
# ranges (scripts/matrix.sh checks them again), except payloads over the IPv4
# limit: those keel-bench refuses, and the probe reports "refused as expected".
list='^[0-9]+(,[0-9]+)*$'
payloads="${payloads// /}"
windows="${windows// /}"
[[ "$payloads" =~ $list ]] || die "--payloads: expected comma-separated integers, got \"$payloads\""
[[ "$windows" =~ $list ]] || die "--windows: expected comma-separated integers, got \"$windows\""
for p in ${payloads//,/ }; do
  [[ ${#p} -le 9 ]] && ((10#$p >= 16 && 10#$p <= 65535)) ||
    die "--payloads: $p is out of range; accepted: integers 16..65535 (over 65507 are refused as expected)"
done
for w in ${windows//,/ }; do
  [[ ${#w} -le 9 ]] && ((10#$w >= 1 && 10#$w <= 1024)) ||
    die "--windows: $w is out of range; accepted: integers 1..1024"
done
[[ "$clients" =~ $uint && ${#clients} -le 9 ]] && ((10#$clients >= 1 && 10#$clients <= 1024)) ||
  die "--clients: expected an integer 1..1024, got \"$clients\""
decimal_ok "$seconds" 'v > 0 && v <= 3600' ||
  die "--seconds: expected a decimal number of seconds, 0 < s <= 3600, got \"$seconds\""
decimal_ok "$warmup" 'v <= 3600' ||
  die "--warmup: expected a decimal number of seconds, 0 <= s <= 3600, got \"$warmup\""
[[ "$repetitions" =~ $uint && "$repetitions" -ge 1 ]] ||
  die "--repetitions: expected an integer >= 1, got \"$repetitions\""

command -v python3 >/dev/null 2>&1 ||
  die "needs python3 to summarise the runs (Debian: apt-get install python3)"
[[ -r /proc/net/snmp ]] ||
  echo "$PROG: warning: /proc/net/snmp is not readable (not Linux?); kernel counters will be null" >&2

if [[ -z "$bench" ]]; then
  bench="$ROOT/target/release/keel-bench"
  if [[ ! -x "$bench" ]]; then
    command -v cargo >/dev/null 2>&1 ||
      die "$bench is missing and cargo is not installed to build it (install Rust with rustup, or pass --bench PATH)"
    echo "$PROG: building $bench (cargo build --release -p keel-bench)" >&2
    (cd "$ROOT" && cargo build --release -p keel-bench >&2) || die "building keel-bench failed"
  fi
fi
[[ -f "$bench" && -x "$bench" ]] || die "--bench: $bench is not an executable file"

if [[ -z "$out" ]]; then
  out="out/udp-limits"
fi
# An earlier probe is kept unless asked: its runs would mix with these.
[[ ! -s "$out/runs.jsonl" || $overwrite -eq 1 ]] ||
  die "--out: $out/runs.jsonl exists and is not empty (an earlier probe); pass --overwrite to replace it, or choose another directory"
mkdir -p "$out" || die "--out: cannot create $out"
# Only the probe's own files: anything else in DIR is left alone.
rm -rf "$out/runs.jsonl" "$out/snmp-before.txt" "$out/snmp-after.txt" "$out/limits.json" \
  "$out/limits.md" "$out/report"

snapshot() {
  if [[ -r /proc/net/snmp ]]; then
    cat /proc/net/snmp >"$1"
  else
    : >"$1"
  fi
}

started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "$PROG: payloads $payloads x windows $windows, $clients clients, shared 1 thread, $repetitions repetitions of $seconds s (+ $warmup s warm-up) -> $out" >&2

snapshot "$out/snmp-before.txt"
status=0
bash "$ROOT/scripts/matrix.sh" --bench "$bench" --output "$out/runs.jsonl" \
  --payloads "$payloads" --windows "$windows" --clients "$clients" \
  --io-models shared --io-threads 1 --server-lanes 1 --work-values 0 \
  --seconds "$seconds" --warmup "$warmup" --repetitions "$repetitions" \
  --keep-going --expect-limits || status=$?
snapshot "$out/snmp-after.txt"
case "$status" in
  0 | 1) ;; # 1: a run failed for another reason than loss or the limit; judged below
  130) echo "$PROG: interrupted; partial results in $out" >&2; exit 130 ;;
  *) die "scripts/matrix.sh failed (exit status $status); see its message above" ;;
esac
finished="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

"$bench" report "$out/runs.jsonl" --out "$out/report" >&2 ||
  die "keel-bench report failed on $out/runs.jsonl"

# --- summary (python3): fill test, loss vs burst vs buffer, tables ------------

read -r -d '' SUMMARY <<'PY' || true
import json, os, platform, socket, statistics, struct, sys

(out, bench, payloads, windows, clients, seconds, warmup, repetitions,
 invocation, started, finished) = sys.argv[1:]
clients = int(clients)

def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None

def snmp(text):
    """/proc/net/snmp as {"Udp": {"InDatagrams": n, ...}, "Ip": {...}}."""
    tables = {}
    if not text:
        return tables
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        proto, names = names.split(":", 1)
        proto2, values = values.split(":", 1)
        if proto != proto2:
            continue
        names, values = names.split(), values.split()
        try:
            tables[proto] = {n: int(v) for n, v in zip(names, values)}
        except ValueError:
            continue
    return tables

def delta(before, after):
    d = {}
    for proto in ("Udp", "Ip"):
        b, a = before.get(proto), after.get(proto)
        if b is None or a is None:
            continue
        d[proto] = {n: a[n] - b[n] for n in a if n in b and n != "Forwarding" and n != "DefaultTTL"}
    return d

def sysval(path):
    t = read(path)
    return int(t.split()[0]) if t and t.split() and t.split()[0].isdigit() else None

def cpu_model():
    t = read("/proc/cpuinfo") or ""
    for line in t.splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None

# --- runs --------------------------------------------------------------------
runs = []
with open(os.path.join(out, "runs.jsonl"), encoding="utf-8") as f:
    for line in f:
        line = line.strip()
        if line:
            runs.append(json.loads(line))

def key_of(r):
    req = r.get("requested") or {}
    p = r.get("payload_bytes") if r.get("payload_bytes") is not None else req.get("payload_bytes")
    w = r.get("window") if r.get("window") is not None else req.get("window")
    return p, w

def num(r, name):
    v = r.get(name)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

def lost_both(r):
    """Lost echoes of both phases: udp_lost_messages (measured) plus
    udp_lost_warmup_messages (None if neither is reported)."""
    m, w = num(r, "udp_lost_messages"), num(r, "udp_lost_warmup_messages")
    return None if m is None and w is None else (m or 0) + (w or 0)

def loss_only(r):
    """Failed, and the only reason is lost echoes (with the drain timeout
    that a lost echo causes)."""
    if r.get("ok") is True or r.get("matrix_errors"):
        return False
    err = r.get("error") or ""
    # Measured-phase losses name udp_lost_messages; a run whose only warm-up
    # errors are its lost echoes names udp_lost_warmup_messages (keel-bench
    # counts each phase's losses apart, so lost <= sent in every line).
    warmup_lost = num(r, "udp_lost_warmup_messages") or 0
    warmup_loss_only = (err.startswith("warm-up failed: ") and warmup_lost > 0
                        and num(r, "warmup_errors") == warmup_lost)
    if not (err.startswith("udp_lost_messages = ") or warmup_loss_only):
        return False
    return all((num(r, n) or 0) == 0 for n in
               ("unfinished_messages", "callback_exceptions", "duplicate_completions", "pending_completions"))

IPV4_MAX_PAYLOAD = 65507

def refused_over_limit(r):
    """Refused by keel-bench because the payload is over the IPv4 limit."""
    p, _ = key_of(r)
    err = r.get("error") or ""
    return (r.get("ok") is False and not r.get("matrix_errors") and r.get("exit_status") == 2
            and err.startswith("--payload:") and isinstance(p, int) and p > IPV4_MAX_PAYLOAD)

def median(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    m = statistics.median(xs)
    return int(m) if isinstance(m, float) and m.is_integer() else m

# The server's receive buffer as requested and granted (every run asks the same).
requested = next((num(r, "udp_server_receive_buffer_requested_bytes") or num(r, "udp_receive_buffer_requested_bytes")
                  for r in runs if num(r, "udp_server_receive_buffer_requested_bytes") or num(r, "udp_receive_buffer_requested_bytes")), None)
granted_runs = sorted({num(r, "udp_server_receive_buffer_bytes") for r in runs if num(r, "udp_server_receive_buffer_bytes")})

# --- fill test: what one datagram costs in the receive buffer, and how many fit
SO_MEMINFO = 55  # Linux: u32 array, [0] = bytes charged to the receive queue

def meminfo(sock):
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 9 * 4)
        return struct.unpack("9I", raw[:36])[0]
    except OSError:
        return None

def fill(payload, request):
    """Binds a receiver with SO_RCVBUF = request (as keel-bench's server does),
    sends it more datagrams of `payload` bytes than can fit without reading,
    then counts what it holds. Returns granted buffer, bytes charged for one
    datagram (SO_MEMINFO), datagrams that fit, bytes charged when full."""
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if request:
            r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, request)
        r.bind(("127.0.0.1", 0))
        granted = r.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        dest = r.getsockname()
        data = b"\x5a" * payload
        s.sendto(data, dest)
        one = meminfo(r)
        # A datagram is charged at least its payload, so this overflows.
        for _ in range(granted // payload + 64):
            s.sendto(data, dest)
        full = meminfo(r)
        r.setblocking(False)
        held = 0
        while True:
            try:
                r.recv(65536)
                held += 1
            except BlockingIOError:
                break
        return granted, one, held, full
    finally:
        r.close()
        s.close()

payload_list = [int(p) for p in payloads.split(",")]
window_list = [int(w) for w in windows.split(",")]
fill_before = snmp(read("/proc/net/snmp"))
fills = {}
for p in payload_list:
    try:
        granted, one, held, full = fill(p, requested)
    except OSError as e:
        fills[p] = {"payload_bytes": p, "error": str(e)}
        continue
    fills[p] = {
        "payload_bytes": p,
        "receive_buffer_requested_bytes": requested,
        "receive_buffer_granted_bytes": granted,
        "charged_bytes_per_datagram": one,
        "datagrams_that_fit": held,
        "charged_bytes_when_full": full,
    }
fill_after = snmp(read("/proc/net/snmp"))

# --- cells -------------------------------------------------------------------
cells = []
for p in payload_list:
    for w in window_list:
        rs = [r for r in runs if key_of(r) == (p, w)]
        f = fills.get(p, {})
        fit = f.get("datagrams_that_fit")
        charge = f.get("charged_bytes_per_datagram")
        rcvbuf = median([num(r, "udp_server_receive_buffer_bytes") for r in rs]) or f.get("receive_buffer_granted_bytes")
        burst = clients * w
        passed = [r for r in rs if r.get("ok") is True and not r.get("matrix_errors")]
        by_loss = [r for r in rs if loss_only(r)]
        refused = [r for r in rs if refused_over_limit(r)]
        other = [r for r in rs if r not in passed and r not in by_loss and r not in refused]
        cells.append({
            "payload_bytes": p,
            "window": w,
            "clients": clients,
            "burst_datagrams": burst,
            "burst_payload_bytes": burst * p,
            "burst_charged_bytes": burst * charge if charge else None,
            "server_receive_buffer_bytes": rcvbuf,
            "datagrams_that_fit": fit,
            "opening_burst_excess": max(0, burst - fit) if fit is not None else None,
            "runs": len(rs),
            "passed": len(passed),
            "failed_by_loss": len(by_loss),
            "refused_over_limit": len(refused),
            "failed_otherwise": len(other),
            # Both phases: the opening burst is the warm-up's.
            "lost_per_run": [lost_both(r) for r in rs],
            "warmup_lost_per_run": [num(r, "udp_lost_warmup_messages") for r in rs],
            "kernel_rcvbuf_drops_per_run": [num(r, "kernel_rcvbuf_drops") for r in rs],
            "snmp_udp_rcvbuf_errors_per_run": [num(r, "snmp_udp_rcvbuf_errors") for r in rs],
            "roundtrips_per_second_per_run": [num(r, "roundtrips_per_second") for r in rs],
            "rtt_p99_us_per_run": [num(r, "rtt_p99_us") for r in rs],
            "other_failures": [
                {"repetition": r.get("repetition"), "error": r.get("error"),
                 "matrix_errors": r.get("matrix_errors"), "command": r.get("command")}
                for r in other],
        })

before = snmp(read(os.path.join(out, "snmp-before.txt")))
after = snmp(read(os.path.join(out, "snmp-after.txt")))
d = delta(before, after)
def total(name):
    vs = [num(r, name) for r in runs]
    return sum(v for v in vs if v is not None) if any(v is not None for v in vs) else None

summary = {
    "schema": "keel-udp-limits/1",
    "command": invocation,
    "started_utc": started,
    "finished_utc": finished,
    "machine": {
        "kernel": platform.release(),
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "net_core_rmem_max": sysval("/proc/sys/net/core/rmem_max"),
        "net_core_rmem_default": sysval("/proc/sys/net/core/rmem_default"),
        "net_core_wmem_max": sysval("/proc/sys/net/core/wmem_max"),
        "net_core_wmem_default": sysval("/proc/sys/net/core/wmem_default"),
        "loopback_mtu": sysval("/sys/class/net/lo/mtu"),
    },
    "settings": {
        "bench": bench, "payloads": payload_list, "windows": window_list, "clients": clients,
        "io_model": "shared", "io_threads": 1, "server_lanes": 1, "work": 0,
        "seconds": float(seconds), "warmup": float(warmup), "repetitions": int(repetitions),
        "server_receive_buffer_requested_bytes": requested,
        "server_receive_buffer_granted_bytes": granted_runs,
    },
    "files": {
        "runs": "runs.jsonl", "snmp_before": "snmp-before.txt", "snmp_after": "snmp-after.txt",
        "report": "report/report.md", "loss_chart": "report/loss.svg", "table": "limits.md",
    },
    "snmp_delta": d,
    "fill": [fills[p] for p in payload_list],
    "fill_snmp_delta": delta(fill_before, fill_after),
    "cells": cells,
    "totals": {
        "runs": len(runs),
        "passed": sum(c["passed"] for c in cells),
        "failed_by_loss": sum(c["failed_by_loss"] for c in cells),
        "refused_over_limit": sum(c["refused_over_limit"] for c in cells),
        "failed_otherwise": sum(c["failed_otherwise"] for c in cells),
        "udp_lost_messages": total("udp_lost_messages"),
        "udp_lost_warmup_messages": total("udp_lost_warmup_messages"),
        "kernel_rcvbuf_drops": total("kernel_rcvbuf_drops"),
        "snmp_udp_rcvbuf_errors_of_runs": total("snmp_udp_rcvbuf_errors"),
    },
}
with open(os.path.join(out, "limits.json"), "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")

# --- Markdown ----------------------------------------------------------------
def n(v):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.1f}" if v != int(v) else f"{int(v):,}"
    return f"{v:,}"

def mib(v):
    return "–" if v is None else f"{v / 1048576:.2f} MiB"

def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    m = statistics.median(xs)
    if min(xs) == max(xs):
        return n(m)
    return f"{n(m)} [{n(min(xs))}, {n(max(xs))}]"

md = []
md.append("# UDP limits probe\n")
md.append(f"Command: `{invocation}`  ")
md.append(f"Ran {started} to {finished} (UTC) on Linux {summary['machine']['kernel']}, "
          f"{summary['machine']['nproc']} CPUs ({summary['machine']['cpu_model']}); "
          f"net.core.rmem_max = {n(summary['machine']['net_core_rmem_max'])}, "
          f"loopback MTU {n(summary['machine']['loopback_mtu'])}.\n")
t = summary["totals"]
md.append(f"{clients} clients, `--io-model shared --io-threads 1`, 1 server lane, "
          f"{repetitions} runs per cell of {seconds} s after {warmup} s warm-up, each a fresh process. "
          f"{t['runs']} runs: {t['passed']} passed, {t['failed_by_loss']} failed by lost echoes only, "
          f"{t['refused_over_limit']} refused for a payload over the IPv4 limit ({IPV4_MAX_PAYLOAD} B), "
          f"{t['failed_otherwise']} failed otherwise.\n")

md.append("## Lost echoes per cell\n")
md.append("`udp_lost_messages` + `udp_lost_warmup_messages` per run (measured and warm-up "
          "phase), median [min, max] over the runs of the cell, and how many runs failed.\n")
md.append("| payload B \\ window | " + " | ".join(str(w) for w in window_list) + " |")
md.append("| ---: | " + " | ".join("---:" for _ in window_list) + " |")
for p in payload_list:
    row = []
    for w in window_list:
        c = next(c for c in cells if c["payload_bytes"] == p and c["window"] == w)
        failed = c["runs"] - c["passed"]
        if c["runs"] and c["refused_over_limit"] == c["runs"]:
            row.append(f"refused: over {IPV4_MAX_PAYLOAD} B")
        else:
            row.append(f"{spread(c['lost_per_run'])} ({failed}/{c['runs']} failed)" if c["runs"] else "–")
    md.append(f"| {p} | " + " | ".join(row) + " |")
md.append("")

md.append("## Loss, burst and the server's receive buffer\n")
md.append("At the start every client sends its whole window at once: a burst of clients x window "
          "datagrams at the server's one socket. The kernel charges each queued datagram its "
          "buffer size (`charged B`, read with SO_MEMINFO from a socket of the server's size "
          "that nobody reads), not its payload, and drops what does not fit (`fit`: datagrams "
          "that socket held when full). `excess` = burst - fit: what is lost if the server reads "
          "nothing while the burst arrives. `lost` and `kernel drops` are per run, median [min, max].\n")
md.append("| payload B | window | burst (datagrams) | burst payload | burst charged | server rcvbuf "
          "| charged B / datagram | fit | excess | lost | of which warm-up | kernel drops | runs failed |")
md.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in cells:
    f = fills.get(c["payload_bytes"], {})
    md.append(
        f"| {c['payload_bytes']} | {c['window']} | {n(c['burst_datagrams'])} | {mib(c['burst_payload_bytes'])} "
        f"| {mib(c['burst_charged_bytes'])} | {mib(c['server_receive_buffer_bytes'])} "
        f"| {n(f.get('charged_bytes_per_datagram'))} | {n(c['datagrams_that_fit'])} | {n(c['opening_burst_excess'])} "
        f"| {spread(c['lost_per_run'])} | {spread(c['warmup_lost_per_run'])} "
        f"| {spread(c['kernel_rcvbuf_drops_per_run'])} | {c['runs'] - c['passed']}/{c['runs']} |")
md.append("")

md.append("## Kernel counters\n")
md.append("Deltas of `/proc/net/snmp` from before the first run to after the last "
          "(host-wide: anything else using UDP on this host in that time is included).\n")
md.append("| counter | delta |")
md.append("| --- | ---: |")
for proto, names in (("Udp", ("InDatagrams", "OutDatagrams", "InErrors", "RcvbufErrors", "SndbufErrors",
                              "NoPorts", "InCsumErrors", "MemErrors")),
                     ("Ip", ("FragCreates", "FragOKs", "FragFails", "ReasmReqds", "ReasmOKs", "ReasmFails"))):
    for name in names:
        v = d.get(proto, {}).get(name)
        if v is not None:
            md.append(f"| {proto} {name} | {n(v)} |")
md.append("")
md.append(f"Sums over the runs' own JSON: `udp_lost_messages` {n(t['udp_lost_messages'])}, "
          f"`kernel_rcvbuf_drops` (this process's sockets, SO_RXQ_OVFL) {n(t['kernel_rcvbuf_drops'])}, "
          f"`snmp_udp_rcvbuf_errors` {n(t['snmp_udp_rcvbuf_errors_of_runs'])}. The fill test ran after the "
          f"last snapshot; its own drops (Udp RcvbufErrors "
          f"{n(summary['fill_snmp_delta'].get('Udp', {}).get('RcvbufErrors'))}) are not in the table.\n")

host = d.get("Udp", {}).get("RcvbufErrors")
ours = t["kernel_rcvbuf_drops"]
if host is not None and ours is not None:
    if host == ours:
        md.append(f"The host's `RcvbufErrors` rose by exactly the probe's own socket drops ({n(ours)}): "
                  "no other UDP socket on the host dropped a datagram meanwhile.\n")
    else:
        md.append(f"The host's `RcvbufErrors` rose by {n(host)}, the probe's sockets dropped {n(ours)}: "
                  f"the difference ({n(host - ours)}) is other UDP traffic on the host during the probe "
                  "(the counters are per network namespace, not per process); trust the per-run "
                  "`kernel_rcvbuf_drops` for the probe's own losses.\n")

others = [(c, o) for c in cells for o in c["other_failures"]]
if others:
    md.append("## Runs that failed for another reason than loss\n")
    for c, o in others:
        md.append(f"- payload {c['payload_bytes']}, window {c['window']}, repetition {o['repetition']}: "
                  f"{o['error']}; matrix.sh: {o['matrix_errors']}")
    md.append("")

md.append("Charts and the full per-configuration table: [report/report.md](report/report.md), "
          "[loss chart](report/loss.svg). Raw runs: `runs.jsonl`; data: `limits.json`.\n")
with open(os.path.join(out, "limits.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(md))
print(f"udp-limits.sh: {t['runs']} runs: {t['passed']} passed, "
      f"{t['failed_by_loss']} lost echoes as expected (bursts over the receive buffer), "
      f"{t['refused_over_limit']} refused as expected (payload over {IPV4_MAX_PAYLOAD} B), "
      + (f"{t['failed_otherwise']} FAILED for another reason" if t["failed_otherwise"]
         else "no surprise"), file=sys.stderr)
sys.exit(1 if t["failed_otherwise"] else 0)
PY

verdict=0
python3 -S -c "$SUMMARY" "$out" "$bench" "$payloads" "$windows" "$clients" "$seconds" "$warmup" \
  "$repetitions" "$invocation" "$started" "$finished" || verdict=$?
[[ $verdict -le 1 ]] || die "summarising $out/runs.jsonl failed (python3 exit status $verdict)"

echo "$PROG: wrote"
for f in runs.jsonl snmp-before.txt snmp-after.txt limits.json limits.md report/report.md report/loss.svg \
  report/throughput.svg report/p99.svg; do
  [[ -e "$out/$f" ]] && echo "  $out/$f"
done
if [[ $verdict -ne 0 ]]; then
  echo "$PROG: some runs failed for a reason other than lost echoes; see $out/limits.md" >&2
  exit 1
fi
echo "$PROG: done; lost echoes per cell and the burst/buffer table: $out/limits.md" >&2
