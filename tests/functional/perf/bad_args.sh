#!/bin/sh
# rdmx-perf's options, as the other tools take them (getopt_long): --opt VALUE and --opt=VALUE;
# a bad one is one "rdmx-perf: error:" line and exit 2, before the EAL starts.
perf=$1
expect() {  # expect "message" args...
  msg=$1; shift
  out=$(timeout 30 "$perf" -- "$@" 2>&1); rc=$?
  [ "$rc" = 2 ] || { echo "$*: exit $rc, want 2: $out"; exit 1; }
  first=$(echo "$out" | head -n 1)
  case "$first" in
    "rdmx-perf: error: $msg"*) ;;
    *) echo "$*: first line '$first', want 'rdmx-perf: error: $msg'"; exit 1 ;;
  esac
}
expect "--iterations needs a value" --test cache --iterations
expect "bad number 'abc' for --iterations" --test cache --iterations=abc
expect "unknown option '--frobnicate'" --frobnicate
expect "unexpected argument 'extra'" --test cache extra
# A bad EAL argument is a usage error too.
out=$(timeout 30 "$perf" --no-such-eal-option -- --test cache 2>&1); rc=$?
[ "$rc" = 2 ] || { echo "bad EAL argument: exit $rc, want 2: $out"; exit 1; }
# io tests whose WRITEs/READs complete in error (hidden --bad-rkey) fail, exit 1, at once.
for t in io_lat io_bw; do
  out=$(timeout 60 "$perf" -- --test $t --iterations 400 --warmup 40 --rounds 2 --pages 1 --bad-rkey 2>&1)
  rc=$?
  [ "$rc" = 1 ] || { echo "$t --bad-rkey: exit $rc, want 1 (124: it hung): $out"; exit 1; }
  echo "$out" | grep -q "^rdmx-perf: test $t failed: a WRITE/READ completed in error (remote-access" ||
    { echo "$t --bad-rkey: $out"; exit 1; }
done
echo "ok"
