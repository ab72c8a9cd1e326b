#!/bin/sh
# rdmx-perf --device-cpu naming a CPU the process may not use: one error line, exit 2, at once
# (it used to hang with no output: the device thread could never be placed there).
perf=$1
cpu=$(( $(nproc --all) + 7 ))
out=$(timeout 30 "$perf" -l 0 --no-huge -m 64 -- --test umr_lat --device-cpu "$cpu" 2>&1)
rc=$?
[ "$rc" = 2 ] || { echo "exit $rc, want 2: $out"; exit 1; }
echo "$out" | grep -q "^rdmx-perf: error: --device-cpu $cpu: not a CPU this process may run on" ||
  { echo "message: $out"; exit 1; }
echo "ok: $(echo "$out" | grep '^rdmx-perf: error')"
