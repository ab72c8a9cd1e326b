#!/usr/bin/env bash
# Regression guard for the map+unmap hot path: counts the instructions of one map+unmap pair
# (rdmx-perf --test umr on the emu sink, callgrind; doc/guides/rdmx-perf.md "Instructions per
# op") for each page count in doc/perf/instructions.txt and fails when a count grew by more than
# 5 % over the committed figure. Instruction counts are deterministic on a given compiler and
# flags, unlike times on a shared machine. The sink device's own work (Engine::doorbell_hook,
# inclusive) is subtracted: the figures are rdmx's alone.
#
#   scripts/check-instructions.sh            # uses $BUILD_DIR (default: build), builds rdmx-perf
#   scripts/check-instructions.sh --update   # rewrites doc/perf/instructions.txt with this run
#
# Ends with "N passed, N failed, N skipped"; exits non-zero on a failure. Skips (with a message)
# when valgrind is missing. A count that dropped by more than 5 % passes with a note: commit the
# new figure (--update) so that the guard keeps the gain.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
expected=doc/perf/instructions.txt
tolerance=${RDMX_INSTR_TOLERANCE:-5}  # percent
update=0
[ "${1:-}" = "--update" ] && update=1

pass=0 fail=0 skip=0
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" -eq 0 ]; exit $?; }

if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_annotate >/dev/null 2>&1; then
  echo "SKIP valgrind/callgrind_annotate not installed"
  skip=1
  finish
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  meson setup "$BUILD_DIR" >/dev/null || { echo "FAIL meson setup $BUILD_DIR"; fail=1; finish; }
fi
ninja -C "$BUILD_DIR" apps/rdmx-perf/rdmx-perf >/dev/null ||
  { echo "FAIL building rdmx-perf"; fail=1; finish; }
perf="$root/$BUILD_DIR/apps/rdmx-perf/rdmx-perf"

# A line's key is N (map() + unmap() one at a time, case umr.map_unmap.pN), burstN (the same
# pairs through map_burst + unmap_burst, case umr.map_unmap_burst.pN) or interleavedN
# (map_interleaved of N blocks + unmap, case umr.interleaved.pN).
pages=$(awk '!/^#/ && NF >= 2 {sub(/^(burst|interleaved)/, "", $1); print $1}' "$expected" |
  sort -nu |
  paste -sd, -)
[ -n "$pages" ] || { echo "FAIL no figures in $expected"; fail=1; finish; }
iters=8000
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && valgrind --tool=callgrind --instr-atstart=no "$perf" -- --test umr \
  --pages "$pages" --iterations $iters --warmup 800 --rounds 1 --stamped 8 >run.log 2>&1) ||
  { cat "$work/run.log"; echo "FAIL rdmx-perf under callgrind"; fail=1; finish; }

declare -A got
for f in "$work"/callgrind.out.*.*; do
  case_name=$(grep '^desc: Trigger' "$f" | sed 's/.*Request: //' | awk '{print $1}')
  case "$case_name" in
    umr.map_unmap.p*) p=${case_name#umr.map_unmap.p} ;;
    umr.map_unmap_burst.p*) p=burst${case_name#umr.map_unmap_burst.p} ;;
    umr.interleaved.p*) p=interleaved${case_name#umr.interleaved.p} ;;
    *) continue ;;
  esac
  units=$(grep '^desc: Trigger' "$f" | sed 's/.*units=//' | awk '{print $1}')
  total=$(grep '^totals' "$f" | cut -d' ' -f2)
  sink=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null | grep 'Engine::doorbell_hook' |
    head -1 | awk '{gsub(",", "", $1); print $1}')
  got[$p]=$(awk -v t="$total" -v s="${sink:-0}" -v u="$units" 'BEGIN {printf "%.1f", (t - s) / u}')
done

if [ $update -eq 1 ]; then
  {
    grep '^#' "$expected"
    awk '!/^#/ && NF >= 2 {print $1}' "$expected" | while read -r p; do echo "$p ${got[$p]:-?}"; done
  } >"$work/new" && mv "$work/new" "$expected"
  echo "updated $expected:"; grep -v '^#' "$expected"
  pass=1
  finish
fi

# The committed figures were taken with the AVX2 KLM writers (chosen at setup by CPU feature):
# without AVX2 the counts of long lists (pointer mode, more than 32 pages) do not compare.
avx2=1
grep -qw avx2 /proc/cpuinfo 2>/dev/null || avx2=0
while read -r p want _; do
  case "$p" in '#'* | '') continue ;; esac
  n=${p#burst}
  n=${n#interleaved}
  if [ $avx2 -eq 0 ] && [ "$n" -gt 32 ]; then
    echo "SKIP $p pages: this CPU has no AVX2 (the figure is the AVX2 writer's)"
    skip=$((skip + 1))
    continue
  fi
  have=${got[$p]:-}
  if [ -z "$have" ]; then
    echo "FAIL $p: no count (its case umr.map_unmap[_burst].p$n or umr.interleaved.p$n is missing)"
    fail=$((fail + 1))
    continue
  fi
  verdict=$(awk -v h="$have" -v w="$want" -v t="$tolerance" 'BEGIN {
    d = (h - w) * 100 / w
    if (d > t) printf "FAIL %+.1f%%", d
    else if (d < -t) printf "PASS %+.1f%% (lower: commit it with --update)", d
    else printf "PASS %+.1f%%", d }')
  what="$p pages"
  case "$p" in
    burst*) what="$n pages, bursts" ;;
    interleaved*) what="$n blocks, interleaved" ;;
  esac
  echo "${verdict%% *} $what: $have instructions per map+unmap pair (committed $want;" \
    "${verdict#* }, limit +$tolerance%)"
  case $verdict in FAIL*) fail=$((fail + 1)) ;; *) pass=$((pass + 1)) ;; esac
done <"$expected"
finish
