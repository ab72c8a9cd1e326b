// The DPDK header lib/window uses (private): rte_ring for the depot. DPDK 22.11's C headers trip
// -Wshadow and C++20's -Wvolatile; the warnings are silenced for this include only.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#if defined(__clang__)
#pragma GCC diagnostic ignored "-Wdeprecated-volatile"
#else
#pragma GCC diagnostic ignored "-Wvolatile"
#endif
#include <rte_ring.h>
#pragma GCC diagnostic pop
