#!/usr/bin/env bash
# scripts/hw-check.sh without a device: exit 3, exactly one line on stderr naming the problem,
# no report written; a usage error: exit 2. RDMX_HWCHECK_SYSFS points at an empty directory so
# the result does not depend on the machine.
set -u
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

RDMX_HWCHECK_SYSFS="$tmp/sys" "$script" -o "$tmp/r.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 3 ] || fail "no device: exit $rc, want 3"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "want one line on stderr, got: $(cat "$tmp/err")"
grep -q "no mlx5 RDMA device" "$tmp/err" || fail "message: $(cat "$tmp/err")"
[ ! -e "$tmp/r.json" ] || fail "a report was written without a device"

RDMX_HWCHECK_SYSFS="$tmp/sys" "$script" -d mlx5_7 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 3 ] || fail "named missing device: exit $rc, want 3"
grep -q "named mlx5_7" "$tmp/err" || fail "the message does not name mlx5_7: $(cat "$tmp/err")"

"$script" --bogus >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "bad option: exit $rc, want 2"
echo "ok"
