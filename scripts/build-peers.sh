#!/usr/bin/env bash
# Builds the echo peers of issue 22: bench-peers/target/release/keel-peer
# (bench-peers/README.md; the contract with keel-bench relay and
# scripts/rudp-peers.sh is in its lib.rs). Not part of the suite.
#
#   scripts/build-peers.sh [--no-install] [--features LIST]
#
# * As root (and unless --no-install), installs what the C libraries need
#   with apt-get: libenet-dev (ENet 1.3); with the gns feature, cmake,
#   ninja-build, protobuf-compiler, libprotobuf-dev, libssl-dev, g++, libclang-dev
#   (bindgen, for the GNS flat API).
# * Builds in release with the default features (keel, kcp, quinn, enet)
#   plus --features (comma-separated: gns, renet). An optional feature
#   whose build fails is reported and left out; the rest is still built.
#   Without libenet (not root, --no-install), enet is left out too.
# * Prints the binary's path and the libraries built into it.
#
# Exit status: 0 built (perhaps without some optional library), 1 the
# build failed, 2 bad arguments.
set -euo pipefail
PROG="build-peers.sh"
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
install=1
features=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help)
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0
      ;;
    --no-install) install=0 ;;
    --features)
      [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || die "--features: missing value (e.g. gns,renet)"
      features=$2
      shift
      ;;
    --features=*) features=${1#--features=} ;;
    *) die "unknown argument \"$1\" (see --help)" ;;
  esac
  shift
done
IFS=',' read -r -a wanted <<<"$features"
for f in "${wanted[@]}"; do
  case "$f" in
    gns | renet) ;;
    "") ;;
    *) die "--features: expected gns and/or renet, got \"$f\"" ;;
  esac
done
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0

have_enet() { [[ -f /usr/include/enet/enet.h ]]; }
apt_install() {
  if [[ $install -eq 1 && $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "build-peers.sh: apt-get install $*" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; then
      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
    fi
  fi
}

have_enet || apt_install libenet-dev || true
for f in "${wanted[@]}"; do
  if [[ "$f" == gns ]]; then
    apt_install cmake ninja-build protobuf-compiler libprotobuf-dev libssl-dev g++ pkg-config libclang-dev || true
  fi
done

base=()
if have_enet; then
  base+=(enet)
else
  echo "build-peers.sh: libenet-dev is not installed (run as root, or apt-get install libenet-dev): building without enet" >&2
fi

build() {
  local list
  list=$(IFS=,; echo "$*")
  cargo build --release --manifest-path bench-peers/Cargo.toml --no-default-features \
    ${list:+--features "$list"}
}

built=("${base[@]}")
for f in "${wanted[@]}"; do
  [[ -n "$f" ]] || continue
  if build "${built[@]}" "$f"; then
    built+=("$f")
  else
    echo "build-peers.sh: the $f feature failed to build; leaving it out" >&2
  fi
done
build "${built[@]}" || { echo "build-peers.sh: the build failed" >&2; exit 1; }
bin=bench-peers/target/release/keel-peer
echo "build-peers.sh: built $bin with: keel kcp ikcp quinn quinn-streams ${built[*]}" >&2
echo "$bin"
