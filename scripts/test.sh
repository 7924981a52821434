#!/usr/bin/env bash
# What CI runs (.ci/run calls this and nothing else): format, lints, tests, docs.
# Installs what a fresh machine lacks for the tests, then fails on the first error.
set -euo pipefail
cd "$(dirname "$0")/.."

need_component() {
  if ! cargo "$1" --version >/dev/null 2>&1; then
    echo "test.sh: installing rustup component $2" >&2
    rustup component add "$2"
  fi
}
need_component fmt rustfmt
need_component clippy clippy

# Peers and tools some tests use: sockperf (sockperf's ping-pong client
# against `keel-bench serve --sockperf`), iproute2 and nftables (network
# namespaces and kernel faults). Installed when apt-get can; the tests that
# need them say why they skipped otherwise.
need_pkg() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing Debian package $2 (for $1)" >&2
    if [ -z "${apt_updated:-}" ]; then
      apt-get update -qq >/dev/null 2>&1 || true
      apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 ||
      echo "test.sh: could not install $2; tests needing $1 will skip" >&2
  else
    echo "test.sh: $1 missing and cannot install $2 (not root or no apt-get); tests needing it will skip" >&2
  fi
}
need_pkg sockperf sockperf
need_pkg ip iproute2
need_pkg nft nftables
need_pkg tc iproute2
# cbindgen 0.24 (Debian) generates the C header of keel-rudp-ffi.
need_pkg cbindgen cbindgen

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets -- -D warnings
echo "== import cycles" >&2
# Modules depend one way inside each crate.
python3 scripts/import-cycles.py crates/reactor crates/impair crates/udp crates/rudp-proto crates/rudp crates/rudp-ffi bench-cli
echo "== tools/loopback-floor.c builds without warnings" >&2
cc -O2 -Wall -Wextra -Werror -o target/loopback-floor tools/loopback-floor.c
echo "== keel-rudp-ffi: the C header is up to date" >&2
# Regenerated into target/ and compared with the checked-in one; another
# cbindgen version may format differently, so only 0.24 is compared.
mkdir -p target/c-api
if command -v cbindgen >/dev/null 2>&1 && cbindgen --version | grep -q '^cbindgen 0\.24\.'; then
  (cd crates/rudp-ffi && cbindgen --quiet --config cbindgen.toml --crate keel-rudp-ffi \
    --output ../../target/c-api/keel_rudp.h)
  diff -u crates/rudp-ffi/include/keel_rudp.h target/c-api/keel_rudp.h || {
    echo "test.sh: crates/rudp-ffi/include/keel_rudp.h is stale; regenerate it with" \
      "(cd crates/rudp-ffi && cbindgen --config cbindgen.toml --crate keel-rudp-ffi --output include/keel_rudp.h)" >&2
    exit 1
  }
else
  echo "test.sh: cbindgen 0.24 missing; skipping the check that keel_rudp.h is up to date" >&2
fi
echo "== keel-rudp-ffi: the C loopback test (tests/c/loopback.c against the static library)" >&2
cargo build -p keel-rudp-ffi
cc -std=c99 -Wall -Wextra -Werror -Icrates/rudp-ffi/include -o target/c-api/loopback \
  crates/rudp-ffi/tests/c/loopback.c target/debug/libkeel_rudp_ffi.a -lpthread -ldl -lm
timeout 20 target/c-api/loopback
echo "== keel-rudp-ffi: the Python loopback test (tests/python/loopback.py, ctypes, the shared library)" >&2
timeout 20 python3 crates/rudp-ffi/tests/python/loopback.py target/debug/libkeel_rudp_ffi.so
echo "== cargo test" >&2
cargo test --workspace
# The lane scheduling state machine, model-checked with loom (its own target
# dir: --cfg loom rebuilds everything). Fails if the model did not run, so a
# renamed module cannot turn this step into a silent "0 passed".
echo "== loom: keel-reactor lane::sched" >&2
mkdir -p target/loom
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p keel-reactor --lib --profile loom lane::sched 2>&1 | tee target/loom/sched.log
grep -q 'no_concurrent_runs_and_no_lost_work \.\.\. ok' target/loom/sched.log || {
  echo "test.sh: the loom model of lane::sched did not run" >&2
  exit 1
}
echo "== cargo doc" >&2
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps
echo "test.sh: all green" >&2
