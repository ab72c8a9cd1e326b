#!/usr/bin/env bash
# The two-process (twohost) and device-profile suites on a busy host: two busy loops hold both
# CPUs while the tests run, as when a user compiles beside them. Proves that connections survive
# scheduler stalls (RC timers, retries) rather than relying on a quiet machine.
#   scripts/loaded-test.sh   after `scripts/dev.sh test` has built BUILD_DIR (default build)
# Ends with the "N passed, N failed" line of scripts/test-summary.py; exits non-zero on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${BUILD_DIR:-build}"
[ -d "$dir" ] || { echo "error: $dir is not built (run scripts/dev.sh test first)" >&2; exit 2; }
hogs=()
for _ in 1 2; do
  # Bounded even if this script is killed: the loops end by themselves.
  timeout "${RDMX_LOAD_SECONDS:-1200}" sh -c 'while :; do :; done' &
  hogs+=("$!")
done
trap 'kill "${hogs[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
echo "loaded: two busy loops (pids ${hogs[*]}), load $(cut -d' ' -f1 /proc/loadavg)"
rc=0
meson test -C "$dir" --print-errorlogs --num-processes 2 --no-rebuild --logbase loaded \
  --suite twohost --suite profiles ${MESON_TEST_ARGS:-} || rc=$?
echo "loaded: load $(cut -d' ' -f1 /proc/loadavg) at the end"
python3 scripts/test-summary.py "$dir/meson-logs/loaded.json"
exit $rc
