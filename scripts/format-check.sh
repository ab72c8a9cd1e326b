#!/usr/bin/env bash
# clang-format check of the C/C++ files (.c .h .cpp .hpp) against the committed .clang-format.
#
#   scripts/format-check.sh                 every tracked file, except those listed in
#                                           scripts/format-baseline.txt (not clean when this
#                                           check came in; a file leaves the list when formatted)
#   scripts/format-check.sh BASE            the files changed between BASE and the work tree
#   RDMX_FORMAT_RANGE=A..B scripts/format-check.sh
#                                           the files changed in that commit range (CI: the
#                                           range a push or merge request brings)
#
# In a range, every changed file must be clean, baseline or not: a change that touches a file
# formats it. Files deleted in the range are skipped. Uses clang-format from PATH (CLANG_FORMAT
# overrides); skips, with a message, when there is none. Ends with "N passed, N failed,
# N skipped" for one check; exits 1 when a file is not clean, and prints the diff clang-format
# would apply.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
cf=${CLANG_FORMAT:-clang-format}
baseline=scripts/format-baseline.txt
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "SKIP $cf not installed"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
pathspec=('*.c' '*.h' '*.cpp' '*.hpp')
range=${RDMX_FORMAT_RANGE:-}
if [ -n "$range" ]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$range" -- "${pathspec[@]}")
  what="changed in $range"
elif [ -n "${1:-}" ]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$1" -- "${pathspec[@]}")
  what="changed since $1"
else
  mapfile -t files < <(git ls-files -- "${pathspec[@]}" | grep -vxF -f <(grep -v '^#' "$baseline"))
  what="tracked, outside $baseline"
fi
pass=0 fail=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if "$cf" --dry-run -Werror "$f" >/dev/null 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $f is not clang-formatted ($cf -i $f):"
    "$cf" "$f" | diff -u "$f" - | head -n 20
  fi
done
if [ -z "$range" ] && [ -z "${1:-}" ]; then
  while read -r f; do
    case $f in '#'* | '') continue ;; esac
    [ -f "$f" ] && "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 &&
      echo "NOTE $f is clean now: remove it from $baseline"
  done <"$baseline"
fi
echo "format: ${#files[@]} files $what: $pass clean, $fail not"
# One check in CI's totals (as check-leftovers.sh), not one per file: the file count is above.
if [ "$fail" -eq 0 ]; then echo "1 passed, 0 failed, 0 skipped"; else echo "0 passed, 1 failed, 0 skipped"; exit 1; fi
