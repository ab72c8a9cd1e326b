// Brackets for including DPDK's C headers from C++20 with -Wshadow -Werror.
//
// DPDK 22.11's headers are not written for that: rte_eal.h declares both a function and a
// struct named rte_mp_reply (-Wshadow in C++), and generic/rte_spinlock.h does ++/-- on a
// volatile int (deprecated in C++20: -Wvolatile in GCC, -Wdeprecated-volatile in clang). The
// warnings are in DPDK's code, not ours, so they are silenced for those includes only:
//
//   RDMX_DPDK_INCLUDES_BEGIN
//   #include <rte_ring.h>
//   RDMX_DPDK_INCLUDES_END
#pragma once

#if defined(__clang__)
#define RDMX_DPDK_IGNORE_VOLATILE_ _Pragma("GCC diagnostic ignored \"-Wdeprecated-volatile\"")
#else
#define RDMX_DPDK_IGNORE_VOLATILE_ _Pragma("GCC diagnostic ignored \"-Wvolatile\"")
#endif

#define RDMX_DPDK_INCLUDES_BEGIN                                                \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wshadow\"") \
      RDMX_DPDK_IGNORE_VOLATILE_
#define RDMX_DPDK_INCLUDES_END _Pragma("GCC diagnostic pop")
