#!/usr/bin/env bash
# Checks the CPU<->NIC memory barriers in the object code, per architecture: compiles the queue
# code for aarch64 with Debian's cross compiler (installed here when missing) and for x86-64 with
# the host compiler, and asserts on the instructions around the send and receive doorbells and
# the CQE ownership read (the sequences of rdma-core util/udma_barrier.h as used by
# providers/mlx5 qp.c post_send_db and cq.c get_next_cqe; see doc/guides/mlx5.md "Memory barriers").
# Prints one line per check and ends with "N passed, N failed, N skipped"; exits non-zero on a
# failure. The aarch64 checks are skipped (with a message) only where the cross compiler cannot be
# installed.
set -uo pipefail
cd "$(dirname "$0")/.."

pass=0 fail=0 skip=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1"; fail=$((fail + 1)); }
sk() { echo "SKIP $1"; skip=$((skip + 1)); }

CXX_AA64=aarch64-linux-gnu-g++
OBJDUMP_AA64=aarch64-linux-gnu-objdump
if ! command -v "$CXX_AA64" >/dev/null 2>&1 && [ "${RDMX_NO_INSTALL:-0}" != 1 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  echo "installing g++-aarch64-linux-gnu"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    g++-aarch64-linux-gnu binutils-aarch64-linux-gnu >/dev/null 2>&1 ||
    echo "apt-get install g++-aarch64-linux-gnu failed"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# mlx5dv.h and verbs.h are architecture-independent headers; give the cross compiler only that
# directory of the host's (its own sysroot provides libc and linux/ headers).
mkdir -p "$work/inc"
ln -s /usr/include/infiniband "$work/inc/infiniband"
INC=(-I lib/core/include -I lib/mlx5/prm/include -I lib/mlx5/include)
FLAGS=(-std=c++20 -O2 -Wall -Wextra -Werror)

# check_seq NAME OBJDUMP OBJ FUNCTION ARCH: asserts on the function's instructions (python below).
check_seq() {
  local name=$1 objdump=$2 obj=$3 fn=$4 arch=$5 out
  if out=$("$objdump" -d --no-show-raw-insn "$obj" |
           python3 scripts/check-barriers.py "$arch" "$fn" 2>&1); then
    ok "$name"
  else
    ko "$name"
    echo "$out" | sed 's/^/    /'
  fi
}

# aarch64
if command -v "$CXX_AA64" >/dev/null 2>&1; then
  all=1
  for src in lib/mlx5/queue.cpp lib/mlx5/prm/wqe.cpp lib/mlx5/prm/cqe.cpp \
             lib/mlx5/prm/decode.cpp lib/core/core.cpp; do
    if ! "$CXX_AA64" "${FLAGS[@]}" "${INC[@]}" -isystem "$work/inc" -c "$src" \
         -o "$work/$(basename "$src").aa64.o"; then
      all=0
    fi
  done
  if [ $all = 1 ]; then ok "aarch64: queue, prm and core code compile"
  else ko "aarch64: queue, prm and core code compile"; fi
  if "$CXX_AA64" "${FLAGS[@]}" "${INC[@]}" -isystem "$work/inc" -c tests/cross/barrier_probe.cpp \
     -o "$work/probe.aa64.o"; then
    check_seq "aarch64: send doorbell = dmb oshst, record, dsb st, 64-bit register store, dsb st" \
      "$OBJDUMP_AA64" "$work/probe.aa64.o" probe_sq_doorbell aarch64
    check_seq "aarch64: receive doorbell = dmb oshst, record" \
      "$OBJDUMP_AA64" "$work/probe.aa64.o" probe_rq_doorbell aarch64
    check_seq "aarch64: CQE = owner byte load, dmb oshld, then the CQE fields" \
      "$OBJDUMP_AA64" "$work/probe.aa64.o" probe_cqe_read aarch64
  else
    ko "aarch64: barrier probe compiles"
  fi
else
  sk "aarch64: g++-aarch64-linux-gnu is not installed and could not be installed (no apt or no network)"
fi

# x86-64
if g++ "${FLAGS[@]}" "${INC[@]}" -c tests/cross/barrier_probe.cpp -o "$work/probe.x86.o"; then
  check_seq "x86-64: send doorbell = record, sfence, 64-bit register store, sfence" \
    objdump "$work/probe.x86.o" probe_sq_doorbell x86_64
  check_seq "x86-64: CQE = owner byte load, lfence, then the CQE fields" \
    objdump "$work/probe.x86.o" probe_cqe_read x86_64
else
  ko "x86-64: barrier probe compiles"
fi

# Any other architecture: a compile-time error, not silently wrong fences.
if out=$(echo '#include <rdmx/mlx5/barrier.hpp>' |
         g++ -m32 -x c++ -std=c++20 -fsyntax-only "${INC[@]}" - 2>&1); then
  ko "i386: barrier.hpp refuses to compile"
elif echo "$out" | grep -q "no NIC memory barriers"; then
  ok "i386: barrier.hpp refuses to compile"
else
  ko "i386: barrier.hpp refuses to compile"
  echo "$out" | sed 's/^/    /'
fi

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
