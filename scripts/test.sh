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
echo "== cargo doc" >&2
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps
echo "test.sh: all green" >&2
