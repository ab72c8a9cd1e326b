#!/usr/bin/env bash
# rdmx developer entry point: installs what is missing, builds, and runs the main job or the
# test suite. Works as root on a fresh Debian 12 machine with no hugepages and no RDMA device.
#
#   scripts/dev.sh run     build, then run rdmafwd on the emulated device for a bounded time
#   scripts/dev.sh test    build, then run the whole test suite (exit non-zero on any failure)
#
# Environment: BUILD_DIR (default build), SANITIZE (none | address,undefined | thread),
#              RDMX_NO_INSTALL=1 to skip apt-get, MESON_TEST_ARGS extra args for meson test.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential pkg-config meson ninja-build libdpdk-dev libibverbs-dev librdmacm-dev
      libhwloc-dev zlib1g-dev libssl-dev libgtest-dev libgmock-dev nlohmann-json3-dev clang
      libclang-rt-14-dev python3 valgrind help2man man-db tshark tcpdump python3-scapy iproute2"

install_deps() {
  [ "${RDMX_NO_INSTALL:-0}" = 1 ] && return 0
  local missing=""
  for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "rdmx: installing:$missing"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
}

build() {
  local dir="${BUILD_DIR:-build}" san="${SANITIZE:-none}"
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Dsanitize="$san"
  elif [ "$(meson introspect --buildoptions "$dir" |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "sanitize"))')" != "$san" ]; then
    # Only a changed option reconfigures; ninja re-runs meson by itself when a meson.build changed.
    meson configure "$dir" -Dsanitize="$san" >/dev/null
  fi
  ninja -C "$dir"
}

cmd="${1:-}"
case "$cmd" in
  run)
    install_deps
    build
    dir="${BUILD_DIR:-build}"
    if [ -x "$dir/apps/rdmafwd/rdmafwd" ]; then
      exec "$dir/apps/rdmafwd/rdmafwd" -l 0-1 --no-huge -m 256 -- --device emu --fwd rpc \
        --nb-cores 1 --pages-per-io 16 --duration 5
    else
      echo "rdmx: rdmafwd is not built yet; running the test suite's emulated-device tests instead"
      meson test -C "$dir" --print-errorlogs
    fi
    ;;
  test)
    install_deps
    build
    dir="${BUILD_DIR:-build}"
    if [ "${SANITIZE:-none}" = thread ]; then
      export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 ${TSAN_OPTIONS:-}"
    fi
    rc=0
    meson test -C "$dir" --print-errorlogs --num-processes 2 ${MESON_TEST_ARGS:-} || rc=$?
    python3 scripts/test-summary.py "$dir/meson-logs/testlog.json"
    exit $rc
    ;;
  *)
    echo "usage: scripts/dev.sh run|test" >&2
    exit 2
    ;;
esac
