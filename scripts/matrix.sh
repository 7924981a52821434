#!/usr/bin/env bash
# Runs keel-bench over a matrix of configurations, one fresh process per
# measurement, and writes one JSON line per run for `keel-bench report`.
#
#   scripts/matrix.sh [OPTIONS]
#   keel-bench report RESULTS.jsonl --out DIR
#
# Run `scripts/matrix.sh --help` for the options. Needs bash and python3 (to
# validate and annotate each run's JSON); cargo only to build the default
# benchmark binary when it is missing; coreutils' timeout to bound each run
# (optional: without it a run that hangs holds the matrix).
#
# Each output line is the benchmark's JSON object, unchanged, followed by:
#   command        the command line of the run (shell-quoted, one string)
#   repetition     1-based repetition number
#   requested      the settings asked for, under the benchmark's JSON names
#   exit_status    the benchmark's exit status (124: killed by the timeout)
#   matrix_errors  what this script's validation found wrong (empty if valid)
#   stderr_tail    the end of the benchmark's stderr, only for failed runs
# A run whose stdout is not one JSON object still gets a line (ok: false,
# with the reason in matrix_errors), so the report lists it.
#
# Progress goes to stderr, one line per run: "[k/n] rep r <configuration>"
# as it starts, then " -> ok <round trips/s>, p99 <us>" (or why it failed)
# when it ends; the output file holds the data.
#
# Exit status: 0 every run valid (with --expect-limits: or failed only as a
# limits probe expects); 1 a run failed (at the first failure, or with
# --keep-going after the whole matrix); 2 bad options or a missing tool.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="matrix.sh"

usage() {
  cat <<EOF
Usage: scripts/matrix.sh [OPTIONS]

Runs keel-bench once per configuration and repetition, each in a fresh process,
and writes one JSON line per run to --output. Repetitions loop outermost (every
configuration once, then again), so slow drift of the machine hits every
configuration alike. Lists are comma separated; the matrix is their product.

  --bench PATH         keel-bench binary (default: target/release/keel-bench,
                       built with cargo if missing)
  --output FILE        JSON lines to write (default: out/matrix/runs.jsonl);
                       an existing non-empty FILE is refused unless --overwrite
  --overwrite          replace an existing --output FILE (its runs are lost)
  --payloads LIST      --payload values, bytes, 16..65507    (default: 1024)
  --clients LIST       --clients values, 1..1024             (default: 16)
  --windows LIST       --window values, 1..1024              (default: 1)
  --io-models LIST     --io-model values, shared or sharded  (default: shared)
  --io-threads LIST    --io-threads values, 1..64            (default: 1)
  --server-lanes LIST  --server-lanes values, 1..64          (default: 1)
  --work-values LIST   --work values, 0..10000000            (default: 0)
  --seconds S          measured phase of every run, 0 < S <= 3600 (default: 1)
  --warmup S           warm-up of every run, 0 <= S <= 3600  (default: 0.25)
  --repetitions N      runs of each configuration     (default: 3)
  --keep-going         run the whole matrix even after a failed run
  --expect-limits      a limits probe (scripts/udp-limits.sh): a run that fails only
                       by lost echoes (a burst over the receive buffer) is reported
                       "lost as expected", one refused for a payload over the IPv4
                       limit (65507 B) "refused as expected"; neither counts as a
                       failure (their lines keep ok: false)
  -h, --help           this text

Every value is checked against keel-bench's ranges before the first run (exit
status 2 naming the option and what it accepts). Each run is validated: its
stdout is one JSON object, ok is true, the exit status agrees, and the echoed
settings match the request. One progress line per run goes to stderr:
"[k/n] rep r configuration" as the run starts, then "-> ok round trips/s, p99"
(or "-> FAILED: why") when it ends.

Exit status: 0 all runs valid (or, with --expect-limits, failed as expected),
1 a run failed, 2 bad options or missing tool.
EOF
}

# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

bench=""
output=""
payloads="1024"
clients="16"
windows="1"
io_models="shared"
io_threads="1"
server_lanes="1"
work_values="0"
seconds="1"
warmup="0.25"
repetitions="3"
keep_going=0
overwrite=0
expect_limits=0

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
    --keep-going)
      [[ $has_value -eq 0 ]] || die "--keep-going takes no value"
      keep_going=1
      continue
      ;;
    --overwrite)
      [[ $has_value -eq 0 ]] || die "--overwrite takes no value"
      overwrite=1
      continue
      ;;
    --expect-limits)
      [[ $has_value -eq 0 ]] || die "--expect-limits takes no value"
      expect_limits=1
      continue
      ;;
    --bench | --output | --payloads | --clients | --windows | --io-models | --io-threads | \
      --server-lanes | --work-values | --seconds | --warmup | --repetitions)
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
    --bench) bench="$value" ;;
    --output) output="$value" ;;
    --payloads) payloads="$value" ;;
    --clients) clients="$value" ;;
    --windows) windows="$value" ;;
    --io-models) io_models="$value" ;;
    --io-threads) io_threads="$value" ;;
    --server-lanes) server_lanes="$value" ;;
    --work-values) work_values="$value" ;;
    --seconds) seconds="$value" ;;
    --warmup) warmup="$value" ;;
    --repetitions) repetitions="$value" ;;
  esac
done

# --- values: every item checked here, before any run -------------------------
#
# The ranges are keel-bench's own (its --help; bench-cli/src/flags/table.rs):
# a value it would refuse fails here, with exit status 2, instead of at the
# first run that uses it (after the runs before it).

# split_list NAME VALUE PATTERN: sets the array NAME to the comma-separated
# items of VALUE, each matching the extended regex PATTERN.
split_list() {
  local -n into="$1"
  local flag="$2" text="$3" pattern="$4" item
  local -a parts
  into=()
  IFS=',' read -r -a parts <<<"$text"
  for item in "${parts[@]}"; do
    item="${item// /}"
    [[ -n "$item" ]] || continue
    [[ "$item" =~ $pattern ]] || die "$flag: bad item \"$item\" in \"$text\""
    into+=("$item")
  done
  [[ ${#into[@]} -gt 0 ]] || die "$flag: empty list"
}

# in_range FLAG LO HI ITEM...: every ITEM (an integer) within LO..HI.
in_range() {
  local flag="$1" lo="$2" hi="$3" item
  shift 3
  for item in "$@"; do
    [[ ${#item} -le 9 ]] && ((10#$item >= lo && 10#$item <= hi)) ||
      die "$flag: $item is out of range; accepted: integers $lo..$hi"
  done
}

payload_list=() client_list=() window_list=() model_list=() thread_list=() lane_list=() work_list=()
split_list payload_list --payloads "$payloads" "$uint"
split_list client_list --clients "$clients" "$uint"
split_list window_list --windows "$windows" "$uint"
split_list model_list --io-models "$io_models" '^[a-z]+$'
split_list thread_list --io-threads "$io_threads" "$uint"
split_list lane_list --server-lanes "$server_lanes" "$uint"
split_list work_list --work-values "$work_values" "$uint"
if [[ $expect_limits -eq 1 ]]; then
  # A limits probe asks for payloads over the IPv4 limit (65507 B) on
  # purpose: keel-bench refuses them, and that is the probe's result.
  in_range --payloads 16 65535 "${payload_list[@]}"
else
  for p in "${payload_list[@]}"; do
    [[ ${#p} -le 9 ]] && ((10#$p >= 16 && 10#$p <= 65507)) ||
      die "--payloads: $p is out of range; accepted: integers 16..65507 (16-byte header to the IPv4 limit; --expect-limits takes up to 65535, refused as expected)"
  done
fi
in_range --clients 1 1024 "${client_list[@]}"
in_range --windows 1 1024 "${window_list[@]}"
for m in "${model_list[@]}"; do
  [[ "$m" == shared || "$m" == sharded ]] ||
    die "--io-models: unknown IO model \"$m\"; accepted: shared, sharded"
done
in_range --io-threads 1 64 "${thread_list[@]}"
in_range --server-lanes 1 64 "${lane_list[@]}"
in_range --work-values 0 10000000 "${work_list[@]}"
decimal_ok "$seconds" 'v > 0 && v <= 3600' ||
  die "--seconds: expected a decimal number of seconds, 0 < s <= 3600, got \"$seconds\""
decimal_ok "$warmup" 'v <= 3600' ||
  die "--warmup: expected a decimal number of seconds, 0 <= s <= 3600, got \"$warmup\""
[[ "$repetitions" =~ $uint && "$repetitions" -ge 1 ]] ||
  die "--repetitions: expected an integer >= 1, got \"$repetitions\""

# --- tools --------------------------------------------------------------------

command -v python3 >/dev/null 2>&1 ||
  die "needs python3 to validate each run's JSON (Debian: apt-get install python3)"
# The interpreter itself, not a version-manager shim in front of it: it
# starts once per run.
python="$(python3 -c 'import json, math, sys; print(sys.executable)' 2>/dev/null)" ||
  die "python3 is there but cannot import json and math; install a complete python3"
[[ -x "$python" ]] || python="$(command -v python3)"

timeout_cmd=()
if command -v timeout >/dev/null 2>&1; then
  # Warm-up + measured phase + up to 2 s of drain, doubled, plus start-up slack.
  limit="$("$python" -c "import sys, math; print(math.ceil(2 * (float(sys.argv[1]) + float(sys.argv[2]) + 2) + 30))" "$seconds" "$warmup")"
  # --foreground: the run stays in the terminal's process group, so Ctrl-C
  # reaches it.
  timeout_cmd=(timeout --foreground --kill-after=5 "$limit")
else
  limit=""
  echo "$PROG: warning: coreutils' timeout not found; a run that hangs will hold the matrix" >&2
fi

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

if [[ -z "$output" ]]; then
  output="out/matrix/runs.jsonl"
fi
# An earlier matrix's runs are kept unless asked: a long matrix is not
# lost to a repeated command.
[[ ! -s "$output" || $overwrite -eq 1 ]] ||
  die "--output: $output exists and is not empty (an earlier matrix?); pass --overwrite to replace it, or choose another file (report accepts several files)"
mkdir -p "$(dirname "$output")" || die "--output: cannot create the directory of $output"
: >"$output" || die "--output: cannot write $output"

k=0
n=0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Ctrl-C / kill: stop after the run in progress (whose line is not written).
trap 'printf "\n%s: interrupted in run %s of %s (not recorded); results so far: %s\n" "$PROG" "$k" "$n" "$output" >&2; exit 130' INT TERM

# --- validation of one run (python3) ---------------------------------------------

# Run as python3 -S (no site packages: it needs the standard library only).
# argv: output stdout_file stderr_file exit_status repetition k n command
#       payload clients window io_model io_threads lanes work seconds warmup limit
#       expect_limits
# Appends the annotated line to output, ends the progress line on stderr,
# exits 0 when the run is valid, 1 when not, 3 when it failed as a limits
# probe expects (--expect-limits).
read -r -d '' VALIDATE <<'PY' || true
import json, math, sys

(output, out_path, err_path, status, rep, k, n, command,
 payload, clients, window, model, threads, lanes, work, secs, warm, limit,
 expect_limits) = sys.argv[1:]
status, rep, expect_limits = int(status), int(rep), expect_limits == "1"
IPV4_MAX_PAYLOAD = 65507
requested = {
    "protocol": "udp",
    "payload_bytes": int(payload),
    "clients": int(clients),
    "window": int(window),
    "io_model": model,
    "io_threads": int(threads),
    "server_io_lanes": int(lanes),
    "handler_work": int(work),
    "requested_seconds": float(secs),
    "warmup_seconds": float(warm),
}

def reject_constant(name):
    raise ValueError(f"{name} is not JSON")

with open(out_path, encoding="utf-8", errors="replace") as f:
    stdout = f.read()
with open(err_path, encoding="utf-8", errors="replace") as f:
    stderr = f.read()

errors = []
if status == 124 and limit:
    errors.append(f"timed out: killed after {limit} s")
lines = [l for l in stdout.splitlines() if l.strip()]
obj = None
if not lines:
    errors.append(f"no JSON line on stdout (exit status {status})")
else:
    if len(lines) > 1:
        errors.append(f"expected one line on stdout, got {len(lines)}")
    try:
        obj = json.loads(lines[-1], parse_constant=reject_constant)
        if not isinstance(obj, dict):
            errors.append(f"stdout is JSON but not an object: {lines[-1][:200]}")
            obj = None
    except ValueError as e:
        errors.append(f"stdout is not JSON ({e}): {lines[-1][:200]}")

if obj is None:
    obj = {"ok": False, "error": "no usable JSON line from the benchmark"}
else:
    ok = obj.get("ok")
    if not isinstance(ok, bool):
        errors.append("ok missing or not a boolean")
    elif ok and status != 0:
        errors.append(f"exit status {status} although ok is true")
    elif not ok and status == 0:
        errors.append("exit status 0 although ok is false")
    if ok is False and not obj.get("error"):
        errors.append("ok is false without an error")

    def same(want, got):
        if isinstance(got, bool) or got is None:
            return False
        if isinstance(want, str):
            return got == want
        if isinstance(want, int):
            return isinstance(got, int) and got == want
        return isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)

    expect = dict(requested)
    expect["io_contexts"] = 1 if model == "shared" else int(threads)
    for name, want in expect.items():
        got = obj.get(name)
        # A failed run may not know its settings (null); a passing one must.
        if got is None and ok is not True:
            continue
        if not same(want, got):
            errors.append(f"{name}: requested {json.dumps(want)}, got {json.dumps(got)}")

valid = obj.get("ok") is True and not errors
line = dict(obj)
line["command"] = command
line["repetition"] = rep
line["requested"] = requested
line["exit_status"] = status
line["matrix_errors"] = errors
if not valid and stderr.strip():
    line["stderr_tail"] = stderr[-4000:]
with open(output, "a", encoding="utf-8") as f:
    f.write(json.dumps(line, allow_nan=False) + "\n")

def num(name):
    v = obj.get(name)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

def counters_clean():
    """No error counter but the loss (and the drain timeout a loss causes)."""
    return all((num(name) or 0) == 0 for name in (
        "content_errors", "order_errors", "unexpected_messages", "disconnect_errors",
        "unfinished_messages", "callback_exceptions", "duplicate_completions",
        "pending_completions", "client_send_rejections", "client_send_completion_errors",
        "server_send_rejections", "server_send_completion_errors"))

# What a limits probe is there to find: lost echoes (a burst over the
# receive buffer) and payloads over the IPv4 limit refused.
error = str(obj.get("error") or "")
# keel-bench counts each phase's losses apart (lost <= sent in every line):
# an opening burst lost in the warm-up fails the warm-up, and the error says
# "warm-up failed: warmup_errors = N (udp_lost_warmup_messages = N)".
warmup_lost = num("udp_lost_warmup_messages") or 0
warmup_loss_only = (error.startswith("warm-up failed: ") and warmup_lost > 0
                    and num("warmup_errors") == warmup_lost)
lost_as_expected = (expect_limits and not errors and obj.get("ok") is False and status == 1
                    and (error.startswith("udp_lost_messages = ") or warmup_loss_only)
                    and counters_clean())
refused_as_expected = (expect_limits and not errors and obj.get("ok") is False and status == 2
                       and error.startswith("--payload:") and int(payload) > IPV4_MAX_PAYLOAD)

if valid:
    rate = num("roundtrips_per_second")
    p99 = num("rtt_p99_us")
    rate = f"{rate:,.0f} rt/s" if rate is not None else "? rt/s"
    p99 = f"p99 {p99:.1f} us" if p99 is not None else "p99 ?"
    print(f" -> ok {rate}, {p99}", file=sys.stderr)
    sys.exit(0)
if lost_as_expected:
    # Both phases: udp_lost_messages is the measured phase's (of
    # messages_sent), udp_lost_warmup_messages the warm-up's.
    lost, sent = (num("udp_lost_messages") or 0) + warmup_lost, num("messages_sent")
    of = f" of {sent + warmup_lost:,}" if sent is not None else ""
    names = "udp_lost_messages + udp_lost_warmup_messages" if warmup_lost else "udp_lost_messages"
    print(f" -> lost as expected: {lost:,}{of} echoes ({names})", file=sys.stderr)
    sys.exit(3)
if refused_as_expected:
    print(f" -> refused as expected: payload {payload} B is over the IPv4 limit "
          f"({IPV4_MAX_PAYLOAD} B)", file=sys.stderr)
    sys.exit(3)
reasons = []
if obj.get("ok") is not True and obj.get("error"):
    reasons.append(str(obj["error"]))
reasons += errors
print(f" -> FAILED: {'; '.join(reasons) or 'ok is not true'}", file=sys.stderr)
if stderr.strip() and not lines:
    tail = stderr.strip().splitlines()[-5:]
    print("    stderr: " + "\n    stderr: ".join(tail), file=sys.stderr)
sys.exit(1)
PY

# --- the matrix -------------------------------------------------------------------

configs=()
for p in "${payload_list[@]}"; do
  for c in "${client_list[@]}"; do
    for w in "${window_list[@]}"; do
      for wk in "${work_list[@]}"; do
        for l in "${lane_list[@]}"; do
          for m in "${model_list[@]}"; do
            for t in "${thread_list[@]}"; do
              configs+=("$p $c $w $m $t $l $wk")
            done
          done
        done
      done
    done
  done
done

n=$((${#configs[@]} * repetitions))
echo "$PROG: ${#configs[@]} configurations x $repetitions repetitions = $n runs of $seconds s (+ $warmup s warm-up) -> $output" >&2

k=0
failed=0
expected=0
for ((rep = 1; rep <= repetitions; rep++)); do
  for config in "${configs[@]}"; do
    read -r p c w m t l wk <<<"$config"
    k=$((k + 1))
    # The start of the progress line; the validator ends it with the result.
    printf '[%d/%d] rep %d payload=%s clients=%s window=%s io=%s/%s lanes=%s work=%s' \
      "$k" "$n" "$rep" "$p" "$c" "$w" "$m" "$t" "$l" "$wk" >&2
    cmd=("$bench" --protocol udp --payload "$p" --clients "$c" --window "$w"
      --io-model "$m" --io-threads "$t" --server-lanes "$l" --work "$wk"
      --seconds "$seconds" --warmup "$warmup")
    printf -v command '%q ' "${cmd[@]}"
    status=0
    "${timeout_cmd[@]}" "${cmd[@]}" </dev/null >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
    if "$python" -S -c "$VALIDATE" "$output" "$tmp/stdout" "$tmp/stderr" "$status" "$rep" "$k" "$n" \
      "${command% }" "$p" "$c" "$w" "$m" "$t" "$l" "$wk" "$seconds" "$warmup" "$limit" \
      "$expect_limits"; then
      :
    else
      vstatus=$?
      if [[ $vstatus -eq 3 ]]; then
        expected=$((expected + 1))
        continue
      fi
      [[ $vstatus -eq 1 ]] || die "validating run $k failed (python3 exit status $vstatus)"
      failed=$((failed + 1))
      if [[ $keep_going -eq 0 ]]; then
        echo "$PROG: stopped at the first failed run ($k of $n); --keep-going runs the whole matrix. Results so far: $output" >&2
        exit 1
      fi
    fi
  done
done

as_expected=""
[[ $expected -eq 0 ]] || as_expected=" ($expected failed as the limits probe expects)"
if [[ $failed -gt 0 ]]; then
  echo "$PROG: $failed of $n runs failed$as_expected; results: $output" >&2
  exit 1
fi
if [[ $expected -gt 0 ]]; then
  echo "$PROG: all $n runs as expected: $((n - expected)) valid, $expected lost echoes or were refused as a limits probe expects; results: $output" >&2
else
  echo "$PROG: all $n runs valid; results: $output" >&2
fi
