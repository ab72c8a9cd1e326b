// The DPDK header lib/win uses (private): rte_ring for the depot, with DPDK's own C++20
// warnings silenced for this include only (see rdmx/core/dpdk_include.hpp).
#pragma once

#include <rdmx/core/dpdk_include.hpp>

RDMX_DPDK_INCLUDES_BEGIN
#include <rte_ring.h>
RDMX_DPDK_INCLUDES_END
