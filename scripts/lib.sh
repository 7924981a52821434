#!/usr/bin/env bash
# The helpers the scripts share: sourced, not run. A script sets PROG (its
# name, for messages) and sources this file relative to its own directory,
# so it works from any working directory:
#
#   PROG="rudp-tail.sh"
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# die MESSAGE...           "$PROG: MESSAGE" on stderr, exit 2 (bad arguments
#                          or settings)
# parse_out_args [FLAG...] -- ARG...
#                          the arguments [--out DIR] [--overwrite] [--FLAG...]
#                          [OUT_DIR]: sets out (empty when not given),
#                          overwrite and each FLAG (0 or 1); -h/--help runs the
#                          script's usage and exits 0; anything else dies
# list VAR DEFAULT         the words of $VAR (commas count as spaces), or
#                          DEFAULT when $VAR is unset or blank
# uint_ok NAME VALUE LO HI dies unless VALUE is an integer LO..HI
# decimal_ok VALUE COND    VALUE a decimal (1, 1.5, .5) for which the awk
#                          condition COND on v holds, e.g. 'v > 0 && v <= 3600'
# seconds_ok NAME VALUE [HI]
#                          dies unless VALUE is a decimal with 0 < s <= HI
#                          (default 3600, keel-bench's --seconds)
# jitter_ok VALUE          VALUE a duration up to the 25 ms delay (0, 500us,
#                          3ms, 0.02s)
# keel_bench_check         dies unless KEEL_BENCH is unset or names an
#                          executable file (with the settings' checks)
# keel_bench_ready         before the runs: KEEL_BENCH as given, or else
#                          builds and sets the workspace's
#                          target/release/keel-bench (exit 1 if that fails)
# place_threads PID PLACEMENT
#                          pins keel-bench run PID's threads once its server's
#                          (keel-shared-0) and clients' (keel-shard-*) exist:
#                          free nothing; server the server's thread on CPU 0;
#                          split that, and every other thread on CPUs 1..;
#                          one every thread on CPU 0 (taskset). Sets placed
#                          to true if the server's thread then runs on CPU 0
#                          alone (free: always), false if not or if the run
#                          ended first
#
# The regexes $decimal and $uint are set too, for checks of their own.

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  # Run rather than sourced: say what it is, by the scripts' conventions
  # (--help exits 0, anything else exits 2 naming the argument).
  case "${1-}" in
    -h | --help)
      sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"
      exit 0
      ;;
    *)
      echo "lib.sh: sourced by the other scripts, not run (got \"${1-}\"; see --help)" >&2
      exit 2
      ;;
  esac
fi

decimal='^([0-9]+\.?[0-9]*|\.[0-9]+)$'
uint='^[0-9]+$'

die() {
  echo "$PROG: $*" >&2
  exit 2
}

parse_out_args() {
  local -a flags=()
  local f matched
  while [[ $# -gt 0 && "$1" != -- ]]; do
    flags+=("$1")
    shift
  done
  shift # the --
  out=""
  overwrite=0
  for f in "${flags[@]}"; do printf -v "$f" 0; done
  while [[ $# -gt 0 ]]; do
    matched=0
    for f in overwrite "${flags[@]}"; do
      case "$1" in
        --"$f") printf -v "$f" 1 && matched=1 ;;
        --"$f"=*) die "--$f takes no value" ;;
      esac
    done
    if [[ $matched -eq 1 ]]; then
      shift
      continue
    fi
    case "$1" in
      -h | --help)
        usage
        exit 0
        ;;
      --out)
        [[ $# -ge 2 && -n "$2" && "$2" != -* ]] || die "--out: missing value (a directory; see --help)"
        [[ -z "$out" ]] || die "--out: given twice (\"$out\" and \"$2\")"
        out="$2"
        shift
        ;;
      --out=*)
        [[ -n "${1#--out=}" ]] || die "--out: empty value (a directory; see --help)"
        [[ -z "$out" ]] || die "--out: given twice (\"$out\" and \"${1#--out=}\")"
        out="${1#--out=}"
        ;;
      -*) die "unknown option $1 (see --help)" ;;
      *)
        [[ -z "$out" ]] || die "one output directory only: \"$out\" and \"$1\" (see --help)"
        out="$1"
        ;;
    esac
    shift
  done
}

list() {
  local v="${!1-}"
  [[ -n "${v// /}" ]] || v="$2"
  echo "${v//,/ }"
}

uint_ok() {
  [[ "$2" =~ $uint ]] && [[ ${#2} -le 9 ]] && (("10#$2" >= $3 && "10#$2" <= $4)) ||
    die "$1: expected an integer $3..$4, got \"$2\""
}

decimal_ok() {
  [[ "$1" =~ $decimal ]] && awk -v v="$1" "BEGIN { exit !($2) }"
}

seconds_ok() {
  local hi="${3:-3600}"
  decimal_ok "$2" "v > 0 && v <= $hi" ||
    die "$1: expected seconds, a decimal with 0 < s <= $hi, got \"$2\""
}

jitter_ok() {
  [[ "$1" =~ ^(0|([0-9]+\.?[0-9]*|\.[0-9]+)(us|ms|s))$ ]] &&
    awk -v v="$1" 'BEGIN { n = v + 0; u = substr(v, length(v) - 1);
      s = (u == "us") ? n / 1e6 : (u == "ms") ? n / 1e3 : n; exit !(s <= 0.025) }'
}

# loss_fraction PERCENT: the fraction keel-bench's --impair loss= takes, with
# no more digits than it needs (0.5 % is 0.005, 10 % is 0.1).
loss_fraction() {
  awk -v l="$1" 'BEGIN { s = sprintf("%.6f", l / 100); sub(/0+$/, "", s); sub(/\.$/, ".0", s); print s }'
}

# tag_lines FILE FIELDS: FILE's lines on stdout, each JSON object among them
# with FIELDS (a JSON object, e.g. '{"case": "tail"}') set in it; other
# lines as they are, blank ones left out (a failed run's line still counts).
tag_lines() {
  python3 -S - "$1" "$2" <<'PY'
import json, sys
path, fields = sys.argv[1], json.loads(sys.argv[2])
for line in open(path, encoding="utf-8", errors="replace"):
    if not line.strip():
        continue
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        obj.update(fields)
        line = json.dumps(obj)
    print(line.rstrip("\n"))
PY
}

# The workspace these scripts belong to (for keel_bench_ready's build).
keel_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

keel_bench_check() {
  if [[ -n "${KEEL_BENCH:-}" ]]; then
    [[ -f "$KEEL_BENCH" && -x "$KEEL_BENCH" ]] || die "KEEL_BENCH: $KEEL_BENCH is not an executable file"
  fi
}

keel_bench_ready() {
  if [[ -z "${KEEL_BENCH:-}" ]]; then
    (cd "$keel_root" && cargo build --release -q -p keel-bench) || {
      echo "$PROG: building keel-bench failed" >&2
      exit 1
    }
    KEEL_BENCH="$keel_root/target/release/keel-bench"
  fi
}

place_threads() {
  local pid=$1 how=$2 t c n
  placed=true
  [[ $how == free ]] && return 0
  placed=false
  n=$(nproc 2>/dev/null || echo 1)
  until grep -qx keel-shared-0 /proc/"$pid"/task/*/comm 2>/dev/null &&
    grep -q '^keel-shard-' /proc/"$pid"/task/*/comm 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.02
  done
  for t in /proc/"$pid"/task/*; do
    c=$(cat "$t/comm" 2>/dev/null) || continue
    case $how in
      server) [[ $c != keel-shared-0 ]] || taskset -p -c 0 "${t##*/}" >/dev/null 2>&1 || true ;;
      split)
        if [[ $c == keel-shared-0 ]]; then
          taskset -p -c 0 "${t##*/}" >/dev/null 2>&1 || true
        else
          taskset -p -c "1-$((n - 1))" "${t##*/}" >/dev/null 2>&1 || true
        fi
        ;;
      one) taskset -p -c 0 "${t##*/}" >/dev/null 2>&1 || true ;;
    esac
    if [[ $c == keel-shared-0 && "$(taskset -cp "${t##*/}" 2>/dev/null | sed 's/.*: *//')" == 0 ]]; then
      placed=true
    fi
  done
}
