// DPDK headers used by the peers (rte_mempool, rte_ring), with the warnings DPDK 22.11 trips in
// C++20 silenced for these includes only (see rdmx/rt/dpdk.hpp).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wcast-qual"
#if defined(__clang__)
#pragma GCC diagnostic ignored "-Wdeprecated-volatile"
#else
#pragma GCC diagnostic ignored "-Wvolatile"
#endif
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#pragma GCC diagnostic pop
