#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time on its seed corpus.
#   scripts/fuzz.sh [SECONDS]   (default 48 per target: nine targets in about eight minutes)
# Crashes are written to build-fuzz/crashes/; keep each as a regression seed under
# tests/fuzz/corpus/<target>/ once fixed.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-48}
dir=build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$dir" -Dfuzz=enabled -Dsanitize=address,undefined \
    -Dbuildtype=debugoptimized -Db_lundef=false -Dcpp_args=-fsanitize=fuzzer-no-link \
    >/dev/null || exit 1
fi
# Only the fuzz targets (and what they link): the rest of the tree is built and tested by gcc.
targets=$(meson introspect "$dir" --targets | python3 -c '
import json, os, sys
d = sys.argv[1]
print(" ".join(os.path.relpath(t["filename"][0], d) for t in json.load(sys.stdin)
               if t["name"].startswith("fuzz_") and t["type"] == "executable"))' "$dir")
if [ -z "$targets" ]; then
  echo "no fuzz targets configured (is clang installed?)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
ninja -C "$dir" $targets || exit 1
mkdir -p "$dir/crashes"
pass=0 fail=0
for t in $(find "$dir/tests/fuzz" -maxdepth 1 -type f -name 'fuzz_*' -perm -u+x | sort); do
  name=$(basename "$t")
  corpus="tests/fuzz/corpus/${name#fuzz_}"
  work="$dir/corpus-${name#fuzz_}"
  mkdir -p "$work"
  [ -d "$corpus" ] && cp -n "$corpus"/* "$work"/ 2>/dev/null
  echo "--- $name for ${secs}s"
  "$t" "$work" -max_total_time="$secs" -artifact_prefix="$dir/crashes/$name-" \
    -print_final_stats=1 >"$dir/$name.log" 2>&1
  st=$?
  tail -12 "$dir/$name.log"
  if [ "$st" -eq 0 ]; then
    pass=$((pass + 1))
  else
    echo "FUZZ FAILURE: $name (artifacts in $dir/crashes)"
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
