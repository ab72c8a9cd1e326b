#!/bin/sh
# Install test: `meson install` into a DESTDIR, then build and run programs against the installed
# tree through pkg-config only (PKG_CONFIG_PATH into the DESTDIR, LD_LIBRARY_PATH for the run):
#   - examples/blockd/blockd.c (C, librdmx.so via rdmx.pc), run over emu;
#   - a C++ program on the C++ API (librdmx.a via rdmx-cpp.pc), run over emu.
# Also checks the layout: SONAME, exported symbols, headers, apps, docs.
#
# usage: install_test.sh BUILD_DIR SOURCE_DIR MESON CC CXX SANITIZE
# (CC and CXX are command lines, e.g. "ccache cc": used unquoted on purpose)
set -eu
build=$1 src=$2 meson=$3 cc=$4 cxx=$5 sanitize=$6

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

# The sanitizer the tree was built with must be in the user's program too.
san=""
[ "$sanitize" != none ] && san="-fsanitize=$sanitize -fno-omit-frame-pointer"

$meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet >"$tmp.log" 2>&1 ||
  { cat "$tmp.log" >&2; rm -f "$tmp.log"; fail "meson install"; }
rm -f "$tmp.log"

pc=$(find "$tmp" -name rdmx.pc -path '*pkgconfig*' | head -n 1)
[ -n "$pc" ] || fail "no rdmx.pc installed"
pcdir=$(dirname "$pc")
[ -f "$pcdir/rdmx-cpp.pc" ] || fail "no rdmx-cpp.pc installed"
# The .pc files are relocatable (prefix from ${pcfiledir}): the DESTDIR tree is used as it is,
# with nothing but PKG_CONFIG_PATH, as a user of a staged install would.
for f in "$pcdir/rdmx.pc" "$pcdir/rdmx-cpp.pc"; do
  grep -q '^prefix=${pcfiledir}' "$f" || fail "$(basename "$f") is not relocatable (this build \
directory predates pkgconfig.relocatable=true: meson configure $build -Dpkgconfig.relocatable=true)"
done
export PKG_CONFIG_PATH="$pcdir"
# rdmx.h needs only <stdint.h>: no other package's Cflags (DPDK's -include rte_config.h and
# -march) reach a C embedder, and a static link still gets every library librdmx.a needs.
grep -q '^Requires' "$pcdir/rdmx.pc" && fail "rdmx.pc has Requires lines: $(grep '^Requires' "$pcdir/rdmx.pc")"
for bad in -march -include dpdk libnl dbus; do
  case " $(pkg-config --cflags rdmx) " in *"$bad"*) fail "pkg-config --cflags rdmx carries '$bad': $(pkg-config --cflags rdmx)" ;; esac
done
for need in -lrte_eal -libverbs -lmlx5 -lrdmacm -lhwloc -lstdc++; do
  case " $(pkg-config --static --libs rdmx) " in *" $need "*) ;; *) fail "pkg-config --static --libs rdmx lacks $need" ;; esac
done

# rdmx-cpp.pc likewise: the C++ headers need rdmx's include directory only (one header set, the
# runtime's launcher, includes DPDK's: its user adds DPDK's flags, step 2b), so no Requires and
# no other package's flags.
grep -q '^Requires' "$pcdir/rdmx-cpp.pc" && fail "rdmx-cpp.pc has Requires lines: $(grep '^Requires' "$pcdir/rdmx-cpp.pc")"
for bad in -march -include dpdk libnl dbus; do
  case " $(pkg-config --cflags rdmx-cpp) " in *"$bad"*) fail "pkg-config --cflags rdmx-cpp carries '$bad': $(pkg-config --cflags rdmx-cpp)" ;; esac
done
for need in librdmx.a -lrte_eal -libverbs -lmlx5 -lrdmacm -lhwloc -lcrypto; do
  case " $(pkg-config --libs rdmx-cpp) " in *"$need "*) ;; *) fail "pkg-config --libs rdmx-cpp lacks $need" ;; esac
done

libdir=$(pkg-config --variable=libdir rdmx)
incdir=$(pkg-config --variable=includedir rdmx)
[ -f "$incdir/rdmx/rdmx.h" ] || fail "rdmx.h not installed in $incdir/rdmx"
[ -f "$incdir/rdmx/win/poll_core.hpp" ] || fail "C++ headers not installed"
[ -f "$incdir/rdmx/mlx5/prm/wqe.hpp" ] || fail "prm headers not installed"
[ -f "$libdir/librdmx.a" ] || fail "librdmx.a not installed"
soname=$(readelf -d "$libdir/librdmx.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = librdmx.so.0 ] || fail "SONAME is '$soname', want librdmx.so.0"
[ -e "$libdir/librdmx.so.0" ] || fail "librdmx.so.0 link missing"
leaked=$(nm -D --defined-only "$libdir/librdmx.so" | awk '$3 !~ /^rdmx_/ && $3 !~ /^RDMX_/ {print $3}')
[ -z "$leaked" ] || fail "librdmx.so exports more than the C API: $(echo "$leaked" | head -n 5)"
for app in rdmafwd rdmx-perf rdmx-wqe; do
  find "$tmp" -type f -name "$app" -path '*/bin/*' | grep -q . || fail "app $app not installed"
done
find "$tmp" -path '*/doc/rdmx/guides/embedding.md' | grep -q . || fail "guides not installed"
for f in README.md performance.md; do
  find "$tmp" -path "*/doc/rdmx/$f" | grep -q . || fail "$f not installed"
done
for page in man1/rdmafwd.1 man1/rdmx-perf.1 man1/rdmx-wqe.1 man3/rdmx.3; do
  find "$tmp" -path "*/man/$page*" | grep -q . || fail "man page $page not installed"
done

# 1. The example, as a C user builds it.
cflags=$(pkg-config --cflags rdmx)
libs=$(pkg-config --libs rdmx)
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror $san $cflags "$src/examples/blockd/blockd.c" "$src/examples/blockd/blockd_server.c" -o "$tmp/blockd" \
  $libs || fail "blockd does not build against the installed tree"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/blockd" --requests 300 \
  >"$tmp/blockd.out" || { cat "$tmp/blockd.out"; fail "installed blockd failed"; }
cat "$tmp/blockd.out"
LD_LIBRARY_PATH="$libdir" ldd "$tmp/blockd" | grep -q "librdmx.so.0 => $libdir" ||
  fail "blockd does not load the installed librdmx.so.0"

# 1b. The same program linked statically against librdmx.a (system libraries stay shared), with
# what `pkg-config --static` lists; it must not need librdmx.so at run time.
static_libs=$(pkg-config --static --libs rdmx | sed 's/ -lrdmx / /; s/^-lrdmx //')
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror $san $cflags "$src/examples/blockd/blockd.c" "$src/examples/blockd/blockd_server.c" \
  -o "$tmp/blockd-static" "$libdir/librdmx.a" $static_libs ||
  fail "blockd does not link statically with pkg-config --static --libs rdmx"
ldd "$tmp/blockd-static" | grep -q librdmx && fail "static blockd still loads librdmx.so"
"$tmp/blockd-static" --requests 100 >"$tmp/blockd-static.out" ||
  { cat "$tmp/blockd-static.out"; fail "static blockd failed"; }

# 2. The C++ API from the installed headers and librdmx.a.
cat >"$tmp/cpp_user.cpp" <<'EOF'
#include <cstdio>
#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/mem/page_allocator.hpp>
#include <rdmx/rdmx.h>
#include <rdmx/win/stats.hpp>
int main() {
  if (rdmx::win::kStatsEnabled != rdmx::win::library_stats_enabled()) {
    std::printf("RDMX_STATS %d in this program, librdmx.a built with %d\n",
                rdmx::win::kStatsEnabled ? 1 : 0, rdmx::win::library_stats_enabled() ? 1 : 0);
    return 7;
  }
  auto devs = rdmx::endpoint::open_device_pair("emu");  // or open_device("mlx5_0") per side
  if (!devs) return 1;
  rdmx::endpoint::EndpointConfig cfg;
  cfg.arena.bytes = 1 << 20;
  auto a = rdmx::endpoint::Endpoint::create(std::move(devs.value()[0]), cfg);
  auto b = rdmx::endpoint::Endpoint::create(std::move(devs.value()[1]), cfg);
  if (!a || !b) return 2;
  if (!rdmx::endpoint::connect_endpoints(a.value(), b.value())) return 3;
  rdmx::win::PollCore& core = a.value().core();
  rdmx::mem::PageAllocator pages(a.value().arena());
  uint64_t page = pages.alloc();
  auto m = core.map({&page, 1}, rdmx::mlx5::kAccessLocalWrite, 0, 4096);
  if (!m.ok()) return 4;
  if (core.unmap(m.window) != rdmx::Errc::kOk) return 5;
  if (!core.quiesce()) return 6;
  std::printf("C++ API: mapped and unmapped window rkey 0x%x (rdmx %s)\n", m.rkey,
              rdmx_version_string());
  return 0;
}
EOF
# shellcheck disable=SC2086
$cxx -Wall -Wextra -Werror $san $(pkg-config --cflags rdmx-cpp) "$tmp/cpp_user.cpp" \
  -o "$tmp/cpp_user" $(pkg-config --libs rdmx-cpp) || fail "C++ user does not build"
"$tmp/cpp_user" || fail "C++ user failed"

# 2b. Every installed C++ header compiles with rdmx-cpp's flags alone, except the runtime's
# launcher (DPDK's headers), which compiles once DPDK's flags are added.
cxxflags=$(pkg-config --cflags rdmx-cpp)
: >"$tmp/all_headers.cpp"
: >"$tmp/dpdk_headers.cpp"
for h in $(cd "$incdir" && find rdmx -name '*.hpp' | sort); do
  case $h in
    rdmx/rt/launcher.hpp | rdmx/rt/dpdk.hpp) echo "#include <$h>" >>"$tmp/dpdk_headers.cpp" ;;
    *) echo "#include <$h>" >>"$tmp/all_headers.cpp" ;;
  esac
done
[ "$(wc -l <"$tmp/all_headers.cpp")" -gt 20 ] || fail "only $(wc -l <"$tmp/all_headers.cpp") C++ headers installed"
# shellcheck disable=SC2086
$cxx -Wall -Wextra -Werror $cxxflags -fsyntax-only "$tmp/all_headers.cpp" ||
  fail "the installed C++ headers need more than pkg-config --cflags rdmx-cpp"
# shellcheck disable=SC2086
$cxx -Wall -Wextra -Werror $cxxflags $(pkg-config --cflags libdpdk) -fsyntax-only \
  "$tmp/dpdk_headers.cpp" || fail "rdmx/rt/launcher.hpp does not compile with DPDK's flags added"
echo "install_test: ok (DESTDIR layout, rdmx.pc, rdmx-cpp.pc, every C++ header, blockd and a C++ user built and run)"
