// The DPDK headers rdmx's runtime uses, included once with the warnings they trip in C++20.
//
// Why the pragmas: DPDK 22.11's C headers are not written for C++20 with -Wshadow -Werror.
//  - rte_eal.h declares a function rte_mp_reply() and a struct rte_mp_reply (-Wshadow in C++).
//  - generic/rte_spinlock.h does ++/-- on a volatile int (deprecated in C++20: -Wvolatile in
//    GCC, -Wdeprecated-volatile in clang); it comes in through rte_memory.h/rte_malloc.h.
// The warnings are in DPDK's code, not ours, so they are silenced for these includes only.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#if defined(__clang__)
#pragma GCC diagnostic ignored "-Wdeprecated-volatile"
#else
#pragma GCC diagnostic ignored "-Wvolatile"
#endif
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_pause.h>
#pragma GCC diagnostic pop
