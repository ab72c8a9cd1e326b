#!/bin/sh
# rdmx-perf's arguments, as the other tools take them (getopt_long): --opt VALUE and --opt=VALUE;
# a bad one is exactly one line, "rdmx-perf: error: ...", and exit 2, before the EAL starts (the
# EAL prints lines of its own: one line in all means it never ran).
perf=$1
failed=0
expect() {  # expect "message" args... (the whole command line: EAL args, --, rdmx-perf's)
  msg=$1; shift
  out=$(timeout 30 "$perf" "$@" 2>&1); rc=$?
  n=$(printf '%s\n' "$out" | wc -l)
  case "$rc $n $out" in
    "2 1 rdmx-perf: error: $msg"*) ;;
    *) echo "FAIL $*: exit $rc (want 2), $n lines (want 1: 'rdmx-perf: error: $msg...'):"
       printf '%s\n' "$out" | head -n 5
       failed=$((failed + 1)) ;;
  esac
}
expect "option '--iterations' needs a value" -- --test cache --iterations
expect "--iterations 'abc': not a number" -- --test cache --iterations=abc
expect "--iterations '-1': not a number" -- --test cache --iterations -1
expect "unknown option '--frobnicate'" -- --frobnicate
expect "option '--quiet' takes no value" -- --test cache --quiet=1
expect "unexpected argument 'extra'" -- --test cache extra
# Counts that make no run: zero, and values outside what the test can do, with the range.
expect "--iterations 0: out of range 1..1000000000000" -- --test cache --iterations 0
expect "--iterations 3 is fewer than --rounds 7" -- --test cache --iterations 3
expect "--rounds 0: out of range 1..1000" -- --test cache --rounds 0
expect "--batch 0: out of range 1..128" -- --test umr --batch 0
expect "--stamped 0: out of range 1..100000000" -- --test umr --stamped 0
expect "--pages 257: out of range 1..256 (a window holds 256 pages)" -- --test umr --pages 1,257
expect "--pages 100000: out of range 1..256" -- --test umr --pages 100000
expect "--pages '1,,2': not a comma-separated list" -- --test umr --pages 1,,2
# The test: missing, unknown, or given before `--` (where it would be an EAL argument).
expect "--test NAME is required: one of cache, umr" --
expect "--test frob: no such test (one of cache, umr" -- --test frob
expect "--test is an rdmx-perf option: put it after '--'" --test cache
expect "--iterations is an rdmx-perf option: put it after '--'" --iterations=5 -- --test cache
# An output file that cannot be written is refused before the run, not after it.
expect "--json /nonexistent/x.json: No such file or directory" -- --test cache --json /nonexistent/x.json
expect "--histogram /nonexistent/h.txt: No such file or directory" -- --test cache --histogram /nonexistent/h.txt
# A bad EAL argument: DPDK's reason in one line, without DPDK's usage text.
expect "EAL: invalid EAL arguments: invalid core list syntax" -l 0-abc -- --test cache
expect "EAL: invalid EAL arguments: unrecognized option '--no-such-eal-option'" --no-such-eal-option -- --test cache
# ... and DPDK's reason once, though DPDK's two passes over the arguments each report it.
out=$(timeout 30 "$perf" --no-such-eal-option -- --test cache 2>&1)
[ "$out" = "rdmx-perf: error: EAL: invalid EAL arguments: unrecognized option '--no-such-eal-option'" ] ||
  { echo "FAIL the EAL's reason not said exactly once: $out"; failed=$((failed + 1)); }
[ "$failed" = 0 ] || { echo "$failed argument checks failed"; exit 1; }
# io tests whose WRITEs/READs complete in error (hidden --bad-rkey) fail, exit 1, at once.
for t in io_lat io_bw; do
  out=$(timeout 60 "$perf" -- --test $t --iterations 400 --warmup 40 --rounds 2 --pages 1 --bad-rkey 2>&1)
  rc=$?
  [ "$rc" = 1 ] || { echo "$t --bad-rkey: exit $rc, want 1 (124: it hung): $out"; exit 1; }
  echo "$out" | grep -q "^rdmx-perf: test $t failed: a WRITE/READ completed in error (remote-access" ||
    { echo "$t --bad-rkey: $out"; exit 1; }
done
echo "ok"
