// The DPDK headers lib/mem uses (private). DPDK 22.11's C headers trip -Wshadow (rte_mp_reply is
// both a function and a struct) and C++20's -Wvolatile (++ on a volatile in rte_spinlock.h);
// the warnings are silenced for these includes only.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#if defined(__clang__)
#pragma GCC diagnostic ignored "-Wdeprecated-volatile"
#else
#pragma GCC diagnostic ignored "-Wvolatile"
#endif
#include <rte_errno.h>
#include <rte_memory.h>
#include <rte_memzone.h>
#pragma GCC diagnostic pop
