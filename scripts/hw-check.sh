#!/usr/bin/env bash
# Hardware qualification of rdmx on a machine with an mlx5 NIC (doc/guides/mlx5.md "Qualifying a
# NIC"): prints the capabilities rdmx depends on, runs the hardware test suite (dv_probe's
# DvHardware.*: caps, MR + windows, loopback connect, error -> recover -> RTS), the window data
# path on the device (map, WRITE, READ, unmap, stale key refused, SEND_WITH_INV), an rdmafwd
# loopback run and rdmx-perf's latency tests on the device, and writes one JSON report.
#
#   scripts/hw-check.sh [-C BUILD_DIR] [-d DEVICE] [-o REPORT.json]
#
# Exit status: 0 every step passed; 1 a step failed (the report says which); 2 usage;
# 3 no mlx5 device (one line on stderr, no report).
set -u

build=build
device="${RDMX_DV_DEVICE:-}"
report=hw-check.json
sysfs="${RDMX_HWCHECK_SYSFS:-/sys/class/infiniband}"  # tests point it at an empty directory

usage() { echo "usage: hw-check.sh [-C BUILD_DIR] [-d DEVICE] [-o REPORT.json]" >&2; exit 2; }
while getopts "C:d:o:h" opt; do
  case "$opt" in
    C) build="$OPTARG" ;;
    d) device="$OPTARG" ;;
    o) report="$OPTARG" ;;
    h) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage

# The device: the one named, else the first mlx5_* the kernel lists.
if [ -z "$device" ]; then
  for d in "$sysfs"/mlx5_*; do
    [ -e "$d" ] && { device="${d##*/}"; break; }
  done
fi
if [ -z "$device" ] || [ ! -e "$sysfs/$device" ]; then
  echo "hw-check: no mlx5 RDMA device${device:+ named $device} (looked in $sysfs; is mlx5_ib loaded?)" >&2
  exit 3
fi
for tool in "$build/apps/rdmafwd/rdmafwd" "$build/apps/rdmx-perf/rdmx-perf" "$build/tests/dv/test_dv_probe" \
    "$build/tests/security/test_sec_device_datapath"; do
  [ -x "$tool" ] || { echo "hw-check: $tool not built (meson setup $build && ninja -C $build)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "hw-check: python3 is needed to write the report" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
step() {  # step NAME CMD...: runs CMD, keeps its output and exit status for the report
  local name=$1; shift
  echo "== $name: $*" >&2
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  echo "$rc" >"$tmp/$name.rc"
  [ "$rc" -eq 0 ] || { failed=1; echo "   FAILED (exit $rc); see the report" >&2; }
}

# 1. The caps rdmx depends on (the device's own view: ibv_devinfo -v; rdmx's DEVX-read HCA caps
#    are checked by DvHardware.CapsAreSane below).
if command -v ibv_devinfo >/dev/null; then
  step caps ibv_devinfo -v -d "$device"
else
  echo "ibv_devinfo not installed (Debian: ibverbs-utils)" >"$tmp/caps.out"; echo 0 >"$tmp/caps.rc"
fi
# 2. The hardware suite.
step hw_suite env RDMX_DV_DEVICE="$device" "$build/tests/dv/test_dv_probe" --gtest_filter='DvHardware.*'
# 3. rdmafwd loopback on the device (both lanes in one process), JSON statistics.
step hw_datapath env RDMX_RIG_DEVICE="$device" "$build/tests/security/test_sec_device_datapath"
step rdmafwd_loopback "$build/apps/rdmafwd/rdmafwd" -l 0-1 --no-huge -m 256 -- \
  --device "$device" --fwd rpc --duration 3 --json
# 4. rdmx-perf's latency tests on the device.
step perf_latency "$build/apps/rdmx-perf/rdmx-perf" -l 0-1 --no-huge -m 256 -- \
  --test io_lat --device "$device" --iterations 20000 --json -

python3 - "$tmp" "$device" "$report" <<'EOF'
import json, os, socket, sys, time
tmp, device, out = sys.argv[1:4]
def read(n, ext):
    p = os.path.join(tmp, f"{n}.{ext}")
    return open(p, errors="replace").read() if os.path.exists(p) else ""
steps = {}
for n in ["caps", "hw_suite", "hw_datapath", "rdmafwd_loopback", "perf_latency"]:
    s = {"exit": int(read(n, "rc") or 1), "stdout": read(n, "out")[-20000:],
         "stderr": read(n, "err")[-8000:]}
    if n in ("rdmafwd_loopback", "perf_latency"):
        parsed = []
        for line in s["stdout"].splitlines():
            try: parsed.append(json.loads(line))
            except ValueError: pass
        if parsed: s["json"] = parsed
    steps[n] = s
rep = {"tool": "rdmx hw-check", "version": 1, "host": socket.gethostname(),
       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": device,
       "passed": all(s["exit"] == 0 for s in steps.values()), "steps": steps}
json.dump(rep, open(out, "w"), indent=1)
print(f"hw-check: report in {out}: {'PASSED' if rep['passed'] else 'FAILED'}")
EOF
exit "$failed"
