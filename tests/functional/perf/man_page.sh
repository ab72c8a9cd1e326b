#!/bin/sh
# rdmx-perf(1) and --help name no path of the source tree (a reader of the installed page has
# none): the guide is named by its installed path, in SEE ALSO.
perf=$1 page=$2
src='(^|[[:space:](`"])(doc|apps|lib|drivers|tests|scripts|examples)/'
failed=0
for what in help page; do
  if [ $what = help ]; then text=$("$perf" --help); else text=$(cat "$page"); fi
  hits=$(printf '%s\n' "$text" | grep -En "$src")
  [ -z "$hits" ] || { echo "FAIL $what names a source path:"; echo "$hits"; failed=1; }
done
grep -q '^\.SH "SEE ALSO"' "$page" || { echo "FAIL $page has no SEE ALSO section"; failed=1; }
grep -q '/share/doc/rdmx/guides/rdmx-perf\.md' "$page" ||
  { echo "FAIL $page does not name the installed guide"; failed=1; }
[ $failed = 0 ] && echo "ok"
