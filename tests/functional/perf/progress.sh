#!/bin/sh
# rdmx-perf's progress line on long runs (every 10 s by default; the hidden --progress-period MS
# shortens it for the test): "rdmx-perf: N s: CASE, round R of N" on stderr, never on stdout
# (the tables and JSON stay clean), and none with --quiet.
perf=$1
run() { timeout 60 "$perf" -- --test umr --pages 1 --iterations 4000 --warmup 100 --rounds 3 "$@"; }
err=$(run --progress-period 1 2>&1 >/dev/null) || { echo "run failed: $err"; exit 1; }
echo "$err" | grep -Eq '^rdmx-perf: [0-9]+ s: .*, round [0-9]+ of 3$' ||
  { echo "no progress line on stderr: $err"; exit 1; }
out=$(run --progress-period 1 2>/dev/null)
echo "$out" | grep -q 'round [0-9]* of' && { echo "progress on stdout"; exit 1; }
err=$(run --progress-period 1 --quiet 2>&1 >/dev/null)
echo "$err" | grep -q 'round [0-9]* of' && { echo "progress despite --quiet: $err"; exit 1; }
echo "ok"
