// The DPDK headers rdmx's runtime uses, with DPDK's own C++20 warnings silenced for these
// includes only (see rdmx/core/dpdk_include.hpp).
#pragma once

#include <rdmx/core/dpdk_include.hpp>

RDMX_DPDK_INCLUDES_BEGIN
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_pause.h>
RDMX_DPDK_INCLUDES_END
