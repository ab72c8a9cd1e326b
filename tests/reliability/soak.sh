#!/usr/bin/env bash
# Reliability soak for a configurable duration (doc/guides/reliability.md):
#   tests/reliability/soak.sh [SECONDS]       (default 60; the 1-hour run: soak.sh 3600)
# Environment: BUILD_DIR (default build).
#
# Two parts, each for SECONDS:
#  1. test_rel_soak: the PollCore/emu soak with random fault injection (error CQE mid-burst, QP to
#     error with WQEs in flight, peer unreachable, delayed completions), a cookie ledger of every
#     operation, the window state checker every round, verified round trips; inline and threaded
#     emu (half the time each). rdmafwd has no random fault injection option yet, so the faults
#     are injected here.
#  2. rdmafwd --fwd rpc on emu with payload verification (its default), RSS sampled from /proc.
# Prints lost operations, leaked windows, verification failures and RSS at start/end; exits
# non-zero when any of them is not zero / not flat.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
dir=${BUILD_DIR:-build}
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" >/dev/null || exit 1
fi
ninja -C "$dir" tests/reliability/test_rel_soak apps/rdmafwd/rdmafwd >/dev/null || exit 1
logdir=$(mktemp -d /tmp/rdmx-soak.XXXXXX)
fail=0

echo "--- part 1: PollCore/emu soak with random faults, ${secs}s"
RDMX_SOAK_SECONDS="$secs" "$dir/tests/reliability/test_rel_soak" >"$logdir/soak.log" 2>&1
st=$?
grep -E '^soak' "$logdir/soak.log"
[ "$st" -eq 0 ] || { echo "SOAK FAILURE (log: $logdir/soak.log)"; fail=1; }
lost=$(grep -E '^soak: faults' "$logdir/soak.log" | sed -E 's/.*lost ([0-9]+).*/\1/' | paste -sd+ | bc)
leaked=$(grep -E '^soak \(' "$logdir/soak.log" | sed -E 's/.*leaked windows ([0-9]+).*/\1/' | paste -sd+ | bc)
vfail=$(grep -E '^soak: faults' "$logdir/soak.log" | sed -E 's/.*verification failures ([0-9]+).*/\1/' | paste -sd+ | bc)

echo "--- part 2: rdmafwd --fwd rpc (verification on) on emu, ${secs}s"
"$dir/apps/rdmafwd/rdmafwd" -l 0-1 --no-huge -m 256 -- --device emu --fwd rpc \
  --duration "$secs" >"$logdir/rdmafwd.log" 2>&1 &
pid=$!
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null; }
warm=$(( secs / 10 > 2 ? secs / 10 : 2 ))
sleep "$warm"
rss_start=$(rss)
rss_end=$rss_start
while kill -0 "$pid" 2>/dev/null; do
  r=$(rss)
  [ -n "$r" ] && rss_end=$r
  sleep 1
done
wait "$pid"
st=$?
grep -E 'I/Os|errors:' "$logdir/rdmafwd.log" | sed 's/^ */  /'
[ "$st" -eq 0 ] || { echo "RDMAFWD FAILURE exit $st (log: $logdir/rdmafwd.log)"; fail=1; }
fwd_v=$(grep -oE 'verify failures [0-9]+' "$logdir/rdmafwd.log" | awk '{s+=$3} END {print s+0}')
fwd_e=$(grep -oE 'I/O errors [0-9]+' "$logdir/rdmafwd.log" | awk '{s+=$3} END {print s+0}')

echo "--- summary (${secs}s)"
echo "lost operations: ${lost:-?}"
echo "leaked windows: ${leaked:-?}"
echo "verification failures: soak ${vfail:-?}, rdmafwd ${fwd_v}"
echo "rdmafwd I/O errors: ${fwd_e}"
echo "rdmafwd RSS: start ${rss_start:-?} KiB, end ${rss_end:-?} KiB"
[ "${lost:-1}" = 0 ] && [ "${leaked:-1}" = 0 ] && [ "${vfail:-1}" = 0 ] && [ "$fwd_v" = 0 ] &&
  [ "$fwd_e" = 0 ] || fail=1
if [ -n "${rss_start:-}" ] && [ -n "${rss_end:-}" ] && [ "$rss_end" -gt $(( rss_start + 16384 )) ]; then
  echo "RSS grew by more than 16 MiB"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "soak: PASS" || echo "soak: FAIL (logs in $logdir)"
exit "$fail"
