#!/bin/sh
# blockd's usage errors: exit 2, one line "blockd: error: ..." and a pointer to --help on stderr,
# never the whole usage; --help prints the usage on stdout and exits 0.
blockd=$1
failed=0
for args in "--bogus" "--qd" "--qd 0" "--role nobody" "--wire tcp:x --role server" "stray"; do
  # shellcheck disable=SC2086
  err=$("$blockd" $args 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | wc -l)
  first=$(printf '%s\n' "$err" | head -n 1)
  second=$(printf '%s\n' "$err" | sed -n 2p)
  if [ $rc -ne 2 ] || [ "$lines" -ne 2 ] || [ "${first#blockd: error: }" = "$first" ] ||
    [ "$second" != "try 'blockd --help' for the options" ]; then
    echo "FAIL blockd $args: exit $rc, stderr:"
    printf '%s\n' "$err"
    failed=1
  fi
done
"$blockd" --help | grep -q '^usage: blockd' || { echo "FAIL blockd --help prints no usage"; failed=1; }
[ $failed = 0 ] && echo "ok"
exit $failed
