// Placement of poll cores and of the emulated device's thread.
//
// Rules, in order (doc/guides/runtime.md, "Placement"):
//  1. Poll cores are worker lcores (never the main lcore: rte_eal_remote_launch cannot run on it).
//  2. Poll cores go on the device's NUMA node first; a remote node only when the local one has no
//     free lcore left (warning).
//  3. A poll core does not share a physical core (SMT sibling) with another poll core, with the
//     device thread or with the main lcore when there is any other choice; when it must, a
//     warning says so.
//  4. The device thread (emu threaded mode; dv has none) gets a CPU on the device's node that no
//     poll core uses, preferring a physical core of its own, then the main lcore's core (the main
//     thread mostly sleeps while poll cores run), then - last resort - a poll core's sibling.
//
// plan() is pure: it sees only the Topology and the lcore list, so tests feed it synthetic
// machines. Setup path; any thread.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/rt/eal.hpp>
#include <rdmx/rt/topology.hpp>

namespace rdmx::rt {

struct Placement {
  std::vector<LcoreSlot> poll;  // chosen poll lcores, in the order they were chosen
  int device_thread_cpu = -1;   // -1: no device thread wanted
  int device_numa_node = 0;
  bool shares_physical_core = false;  // some chosen pair had to share a physical core
  std::vector<std::string> warnings;
};

// n_poll_cores >= 1. available_lcores: the EAL's lcores (Eal::lcores()); the main lcore is never
// chosen as a poll core but its CPU is taken into account. Fails with kInvalidArgument when there
// are fewer worker lcores than poll cores asked for (the message says how to get more: `-l`).
Result<Placement> plan(const Topology& topo, unsigned n_poll_cores, bool want_device_thread,
                       int device_numa_node, std::span<const LcoreSlot> available_lcores);

// `--show-topology` text: nodes, cores, PUs (siblings grouped), the device's node and, when
// given, the placement and its warnings.
std::string format_topology(const Topology& topo, const DeviceLocality* dev = nullptr,
                            const Placement* placement = nullptr);

// Lcore slots for a synthetic run: lcore i on CPU cpus[i], lcore 0 main (tests and tools).
std::vector<LcoreSlot> lcores_on_cpus(const Topology& topo, std::span<const unsigned> cpus);

}  // namespace rdmx::rt
