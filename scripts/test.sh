#!/usr/bin/env bash
# What CI runs (.ci/run calls this and nothing else): format, lints, tests, docs.
# Installs what a fresh machine lacks for the tests, then fails on the first error.
#
#   scripts/test.sh        (no arguments; exit status 0 all passed, that of
#                           the failed step otherwise, 2 bad arguments)
set -euo pipefail
case "${1:-}" in
  -h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
    ;;
esac
if [[ $# -gt 0 ]]; then
  echo "test.sh: unknown argument '$1' (it takes none; see --help)" >&2
  exit 2
fi
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
# Mono's C# compiler and runtime run the C# binding's test (keel-rudp-ffi).
need_pkg mcs mono-mcs
need_pkg mono mono-runtime

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets -- -D warnings
echo "== import cycles" >&2
# Modules depend one way inside each crate.
python3 scripts/import-cycles.py crates/reactor crates/impair crates/udp crates/rudp-proto crates/rudp crates/rudp-ffi bench-cli
echo "== layers: the protocol crates depend on nothing IO-related" >&2
# keel-rudp-proto is sans-IO (what the C API and any driver build on) and
# keel-impair is pure: neither may pull in the reactor, keel-udp, mio or
# socket2 (docs/architecture.md).
for c in keel-rudp-proto keel-impair; do
  bad=$(cargo tree -p "$c" -e normal --prefix none | awk '{print $1}' |
    grep -xE 'keel-reactor|keel-udp|keel-rudp|mio|socket2|signal-hook' || true)
  if [ -n "$bad" ]; then
    echo "test.sh: $c depends on $bad (it must stay free of IO)" >&2
    exit 1
  fi
done
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
echo "== keel-rudp-ffi: the C tests (tests/c/*.c against the static library)" >&2
cargo build -p keel-rudp-ffi
cargo build -p keel-rudp-ffi --example c_peers
ffi_lib="target/debug/libkeel_rudp_ffi.a -lpthread -ldl -lm"
for t in loopback client server; do
  # shellcheck disable=SC2086 # ffi_lib is a list of words
  cc -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -Icrates/rudp-ffi/include \
    -o "target/c-api/$t" "crates/rudp-ffi/tests/c/$t.c" $ffi_lib
done
# The complete example of docs/c-api.md builds as it is written there.
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -Werror -Icrates/rudp-ffi/include -o target/c-api/game \
  crates/rudp-ffi/examples/c/game.c $ffi_lib
# loopback.c: a C server and client in one process; c_peers: a C client
# with a token against a Rust server through the link conditioner, and a
# Rust client against a C server.
timeout 20 target/c-api/loopback
timeout 60 target/debug/examples/c_peers target/c-api/client target/c-api/server
echo "== keel-rudp-ffi: the C tests under AddressSanitizer and UBSan" >&2
# The library's allocations go through malloc, so ASan also sees a C
# program reading an event's buffer after the library freed it.
asan="-g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# shellcheck disable=SC2086 # asan and ffi_lib are lists of words
if echo 'int main(void){return 0;}' | cc $asan -x c -o target/c-api/asan-probe - 2>/dev/null &&
  target/c-api/asan-probe; then
  for t in loopback client server; do
    # shellcheck disable=SC2086
    cc -std=c99 -D_POSIX_C_SOURCE=200809L $asan -Wall -Wextra -Werror -Icrates/rudp-ffi/include \
      -o "target/c-api/$t-asan" "crates/rudp-ffi/tests/c/$t.c" $ffi_lib
  done
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
  timeout 30 target/c-api/loopback-asan
  timeout 90 target/debug/examples/c_peers target/c-api/client-asan target/c-api/server-asan
  unset ASAN_OPTIONS UBSAN_OPTIONS
else
  echo "test.sh: this C compiler cannot build with -fsanitize=address,undefined; skipping the sanitizer runs" >&2
fi
echo "== keel-rudp-ffi: the Python loopback test (tests/python/loopback.py, ctypes, the shared library)" >&2
timeout 20 python3 crates/rudp-ffi/tests/python/loopback.py target/debug/libkeel_rudp_ffi.so
echo "== keel-rudp-ffi: the Python features test (tests/python/features.py: the binding against the header; broadcast, stop, connection state; token mode with tokens from mint_token)" >&2
# The Rust example mint_token mints the tokens, as a game's backend would.
cargo build -p keel-rudp --example mint_token
timeout 20 python3 crates/rudp-ffi/tests/python/features.py target/debug/libkeel_rudp_ffi.so \
  target/debug/examples/mint_token
echo "== keel-rudp-ffi: the C# tests (tests/csharp/Loopback.cs, Features.cs; P/Invoke, Mono)" >&2
# The binding first alone, as a Unity project gets it: C# 4, every public
# item documented (CS1591 is an error); then the test with it, run against
# target/debug/libkeel_rudp_ffi.so (Mono's dlopen searches LD_LIBRARY_PATH).
if command -v mcs >/dev/null 2>&1 && command -v mono >/dev/null 2>&1; then
  mcs -target:library -langversion:4 -warn:4 -warnaserror -doc:target/c-api/KeelRudp.xml \
    -out:target/c-api/KeelRudp.dll crates/rudp-ffi/bindings/csharp/KeelRudp.cs
  mcs -warnaserror -out:target/c-api/Loopback.exe crates/rudp-ffi/bindings/csharp/KeelRudp.cs \
    crates/rudp-ffi/tests/csharp/Loopback.cs
  LD_LIBRARY_PATH="target/debug${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 20 mono target/c-api/Loopback.exe
  # The binding against the header, broadcast, stop, connection state, and
  # token mode with tokens from mint_token (built for the Python step).
  mcs -warnaserror -out:target/c-api/Features.exe crates/rudp-ffi/bindings/csharp/KeelRudp.cs \
    crates/rudp-ffi/tests/csharp/Features.cs
  LD_LIBRARY_PATH="target/debug${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 20 mono target/c-api/Features.exe \
    crates/rudp-ffi/include/keel_rudp.h target/debug/examples/mint_token
else
  echo "test.sh: mcs or mono missing (Debian packages mono-mcs, mono-runtime); skipping the C# loopback test" >&2
fi
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
echo "== cargo package: the library crates (keel-bench and keel-testkit are publish = false)" >&2
# Under a second: the archives and their manifests, not a build of each
# (add the verification by dropping --no-verify: cargo builds every crate
# from its archive, path dependencies through a local registry, ~15 s).
cargo package --workspace --exclude keel-bench --exclude keel-testkit --no-verify --offline --allow-dirty -q
echo "test.sh: all green" >&2
