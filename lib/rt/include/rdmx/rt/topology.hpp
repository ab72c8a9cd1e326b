// Machine topology: NUMA nodes, physical cores, processing units (PUs = hardware threads), and
// where the RDMA device sits.
//
// Topology is plain data. discover_topology() fills it from hwloc; synthetic_topology() builds
// one for tests (no hwloc involved), so the placement planner (placement.hpp) is tested on
// machines this one is not. Setup path only; any thread.
#pragma once

#include <string>
#include <vector>

#include <rdmx/core/result.hpp>

namespace rdmx::rt {

struct Pu {
  unsigned cpu = 0;   // OS index: what sched_setaffinity, `-l` and /proc/cpuinfo call a CPU
  unsigned core = 0;  // physical core, unique across the machine; SMT siblings share it
  int numa_node = 0;  // OS index of the NUMA node (0 on machines without NUMA)
};

struct Topology {
  std::vector<Pu> pus;  // sorted by cpu
  int n_numa_nodes = 1;
  std::string source;  // "hwloc 2.9.0", "synthetic 2x8x2", ...

  const Pu* find_pu(unsigned cpu) const noexcept;
  unsigned n_cores() const noexcept;  // physical cores
};

// Reads the machine's topology with hwloc (only the PUs the process may run on). Fails with
// kDeviceError when hwloc cannot load it.
Result<Topology> discover_topology();

// n_nodes NUMA nodes x cores_per_node physical cores x threads_per_core PUs, numbered as Linux
// does on x86: first one thread of every core (node by node), then the second threads, so CPU c
// and c + n_nodes*cores_per_node are siblings.
Topology synthetic_topology(int n_nodes, unsigned cores_per_node, unsigned threads_per_core);

// Where the device is. dv: from its sysfs path (e.g. /sys/class/infiniband/mlx5_0, whose
// device/numa_node the kernel fills from the PCI slot's locality); emu: a configured node.
struct DeviceLocality {
  int numa_node = 0;
  std::string pci;                   // PCI address when known ("0000:3b:00.0")
  std::vector<unsigned> local_cpus;  // device/local_cpulist when present
  std::string note;                  // how the node was found
};

// `sysfs_path` may name the ib device (/sys/class/infiniband/mlx5_0) or its PCI device directory.
// A numa_node of -1 (no NUMA information) becomes node 0 with a note. Fails when the path has
// no numa_node file at all.
Result<DeviceLocality> device_locality_from_sysfs(const std::string& sysfs_path);
// The emulated device: it lives where it is told (default node 0).
DeviceLocality emu_device_locality(int numa_node = 0);

// Parses a Linux cpu list ("0-3,8,10-11"). Fails on malformed text.
Result<std::vector<unsigned>> parse_cpu_list(const std::string& text);

}  // namespace rdmx::rt
