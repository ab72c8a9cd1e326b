// The DPDK headers lib/mem uses (private), with DPDK's own C++20 warnings silenced for these
// includes only (see rdmx/core/dpdk_include.hpp).
#pragma once

#include <rdmx/core/dpdk_include.hpp>

RDMX_DPDK_INCLUDES_BEGIN
#include <rte_errno.h>
#include <rte_memory.h>
#include <rte_memzone.h>
RDMX_DPDK_INCLUDES_END
