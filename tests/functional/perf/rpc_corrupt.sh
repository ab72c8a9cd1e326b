#!/bin/sh
# rpc_lat checks every payload byte: one wrong byte (hidden --corrupt: the last byte of the first
# WRITE's data as the server received it, or of the first READ's data the server sends) must fail
# the run, exit 1, with the reason, and no figure.
perf=$1
failed=0
for op in write read; do
  out=$(timeout 60 "$perf" -- --test rpc_lat --iterations 40 --warmup 4 --rounds 2 --pages 1 \
    --quiet --corrupt $op 2>&1); rc=$?
  want="data mismatch: a $(echo $op | tr a-z A-Z)'s payload differs"
  case "$rc" in
    1) printf '%s\n' "$out" | grep -q "test rpc_lat failed: $want" ||
         { echo "FAIL --corrupt $op: exit 1 but no '$want'"; printf '%s\n' "$out" | tail -n 5; failed=1; } ;;
    *) echo "FAIL --corrupt $op: exit $rc, want 1"; printf '%s\n' "$out" | tail -n 5; failed=1 ;;
  esac
  if printf '%s\n' "$out" | grep -q '^rpc\.'; then
    echo "FAIL --corrupt $op: figures printed for a run that failed"; failed=1
  fi
done
[ $failed = 0 ] && echo ok
exit $failed
