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

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test" >&2
cargo test --workspace
# The lane scheduling state machine, model-checked with loom (its own target
# dir: --cfg loom rebuilds everything). Fails if the model did not run, so a
# renamed module cannot turn this step into a silent "0 passed".
echo "== loom: keel-reactor lane::sched" >&2
mkdir -p target/loom
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p keel-reactor --lib --release lane::sched 2>&1 | tee target/loom/sched.log
grep -q 'no_concurrent_runs_and_no_lost_work \.\.\. ok' target/loom/sched.log || {
  echo "test.sh: the loom model of lane::sched did not run" >&2
  exit 1
}
echo "== cargo doc" >&2
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps
echo "test.sh: all green" >&2
