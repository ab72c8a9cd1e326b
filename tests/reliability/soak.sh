#!/usr/bin/env bash
# Reliability soak for a configurable duration (doc/guides/reliability.md):
#   tests/reliability/soak.sh [SECONDS]       (default 60; the 1-hour run: soak.sh 3600)
# Environment: BUILD_DIR (default build).
#
# Two parts, each for SECONDS:
#  1. test_rel_soak: the PollCore/emu soak with random fault injection (error CQE mid-burst, QP to
#     error with WQEs in flight, peer unreachable, delayed completions), a cookie ledger of every
#     operation, the window state checker every round, verified round trips; inline and threaded
#     emu (half the time each).
#  2. rdmafwd --fwd rpc on emu with payload verification (its default) and its own random fault
#     injection (--fault-every 2000: error CQE mid-burst, QP to error, peer unreachable for a
#     while, delayed completions; every fault recovered), RSS sampled from /proc.
# Prints lost operations, leaked windows, verification failures, rdmafwd's faults injected and
# recovered and RSS at start/end; exits non-zero when a count is not zero, a fault was not
# recovered or RSS is not flat.
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

echo "--- part 2: rdmafwd --fwd rpc (verification on) on emu with --fault-every 2000, ${secs}s"
"$dir/apps/rdmafwd/rdmafwd" -l 0-1 --no-huge -m 256 -- --device emu --fwd rpc \
  --duration "$secs" --fault-every 2000 --fault-seed "${RDMX_SOAK_SEED:-1}" \
  >"$logdir/rdmafwd.log" 2>&1 &
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
grep -E 'I/Os|errors:|faults:' "$logdir/rdmafwd.log" | sed 's/^ */  /'
[ "$st" -eq 0 ] || { echo "RDMAFWD FAILURE exit $st (log: $logdir/rdmafwd.log)"; fail=1; }
fwd_v=$(grep -oE 'verify failures [0-9]+' "$logdir/rdmafwd.log" | awk '{s+=$3} END {print s+0}')
fwd_e=$(grep -oE 'I/O errors [0-9]+' "$logdir/rdmafwd.log" | awk '{s+=$3} END {print s+0}')
# "faults: injected N  recovered N  I/Os failed by faults N  abandoned N  lost N" (last block:
# the total when there are several lanes).
faults_line=$(grep -E '^ *faults: injected' "$logdir/rdmafwd.log" | tail -1)
fwd_fi=$(sed -E 's/.*injected ([0-9]+).*/\1/' <<<"$faults_line")
fwd_fr=$(sed -E 's/.*  recovered ([0-9]+).*/\1/' <<<"$faults_line")
fwd_ff=$(sed -E 's/.*failed by faults ([0-9]+).*/\1/' <<<"$faults_line")
fwd_lost=$(sed -E 's/.*  lost ([0-9]+).*/\1/' <<<"$faults_line")
fwd_ab=$(sed -E 's/.*abandoned ([0-9]+).*/\1/' <<<"$faults_line")

echo "--- summary (${secs}s)"
echo "lost operations: ${lost:-?}"
echo "leaked windows: ${leaked:-?}"
echo "verification failures: soak ${vfail:-?}, rdmafwd ${fwd_v}"
echo "rdmafwd I/O errors: ${fwd_e}"
echo "rdmafwd faults: injected ${fwd_fi:-?}, recovered ${fwd_fr:-?}; I/Os failed by faults ${fwd_ff:-?} (counted), abandoned ${fwd_ab:-?}, lost ${fwd_lost:-?}"
echo "rdmafwd RSS: start ${rss_start:-?} KiB, end ${rss_end:-?} KiB"
[ "${lost:-1}" = 0 ] && [ "${leaked:-1}" = 0 ] && [ "${vfail:-1}" = 0 ] && [ "$fwd_v" = 0 ] &&
  [ "$fwd_e" = 0 ] || fail=1
[ -n "${fwd_fi:-}" ] && [ "${fwd_fi}" -gt 0 ] && [ "${fwd_fr:-x}" = "$fwd_fi" ] &&
  [ "${fwd_lost:-1}" = 0 ] && [ "${fwd_ab:-1}" = 0 ] ||
  { echo "rdmafwd: a fault was not injected/recovered, or I/Os were lost"; fail=1; }
if [ -n "${rss_start:-}" ] && [ -n "${rss_end:-}" ] && [ "$rss_end" -gt $(( rss_start + 16384 )) ]; then
  echo "RSS grew by more than 16 MiB"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "soak: PASS" || echo "soak: FAIL (logs in $logdir)"
exit "$fail"
