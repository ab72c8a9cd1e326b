#!/usr/bin/env bash
# What the test suite left behind: DPDK runtime directories (/var/run/dpdk/rdmx-*, rdmafwd-*,
# fwdpfx*; $XDG_RUNTIME_DIR/dpdk when not root) and emu's shared-memory files (/dev/shm/rdmx-*,
# rdmafwd-*, blockd-*) made since a given time, whose process is gone. A live process's entry
# (a directory named PREFIX-PID whose PID exists, a /dev/shm file some process has mapped or
# open) is not a leftover: on a shared machine other runs are under way.
#
#   scripts/check-leftovers.sh [--since EPOCH_SECONDS]   (default: every entry, whatever its age)
#
# Ends with "N passed, N failed, N skipped" (one check); exits 1 and lists the entries when any.
set -uo pipefail
since=0
[ "${1:-}" = --since ] && since=${2:?--since needs a time}

dpdk_base=/var/run/dpdk
[ "$(id -u)" -ne 0 ] && dpdk_base="${XDG_RUNTIME_DIR:-/tmp}/dpdk"

in_use() {  # in_use PATH: some live process has it open or mapped
  local p=$1
  grep -qsF "$p" /proc/[0-9]*/maps 2>/dev/null && return 0
  # (find fails on other users' fd directories: under pipefail only grep's verdict may count)
  { find /proc/[0-9]*/fd -maxdepth 1 -lname "$p" 2>/dev/null || true; } | grep -q . && return 0
  return 1
}

left=()
for d in "$dpdk_base"/rdmx-* "$dpdk_base"/rdmafwd-* "$dpdk_base"/fwdpfx* \
  /dev/shm/rdmx-* /dev/shm/rdmafwd-* /dev/shm/blockd-*; do
  [ -e "$d" ] || continue
  mtime=$(stat -c %Y "$d" 2>/dev/null) || continue  # gone meanwhile: its process ended cleanly
  [ "$mtime" -ge "$since" ] || continue
  name=$(basename "$d")
  pid=${name##*[!0-9]}  # trailing digits: the owner's pid for PREFIX-PID names
  if [ -n "$pid" ] && [ "${#pid}" -le 9 ] && kill -0 "$pid" 2>/dev/null; then continue; fi
  in_use "$d" && continue
  left+=("$d")
done
# A process that is ending removes its own entries last: look again after a moment, and keep
# only what is still there.
if [ ${#left[@]} -gt 0 ]; then
  sleep 2
  still=()
  for d in "${left[@]}"; do [ -e "$d" ] && still+=("$d"); done
  left=("${still[@]}")
fi
if [ ${#left[@]} -gt 0 ]; then
  echo "FAIL left behind (their processes are gone):"
  printf '  %s\n' "${left[@]}"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
echo "PASS nothing left in $dpdk_base or /dev/shm"
echo "1 passed, 0 failed, 0 skipped"
