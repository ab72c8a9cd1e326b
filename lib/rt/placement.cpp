#include <rdmx/rt/placement.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace rdmx::rt {

namespace {

// Where a CPU is. A CPU the topology does not know (cpuset outside what hwloc let us see) is its
// own core on the lcore's socket.
struct Where {
  unsigned core;
  int node;
};

Where where(const Topology& topo, unsigned cpu, int fallback_node) {
  if (const Pu* p = topo.find_pu(cpu)) return {p->core, p->numa_node};
  return {1000000u + cpu, fallback_node};
}

std::string cpu_desc(const Topology& topo, unsigned cpu) {
  Where w = where(topo, cpu, 0);
  return "cpu " + std::to_string(cpu) + " (node " + std::to_string(w.node) + ", core " +
         std::to_string(w.core) + ")";
}

}  // namespace

Result<Placement> plan(const Topology& topo, unsigned n_poll_cores, bool want_device_thread,
                       int device_numa_node, std::span<const LcoreSlot> available_lcores) {
  if (n_poll_cores == 0) {
    return make_error(Errc::kInvalidArgument, "placement: at least one poll core is needed");
  }
  Placement pl;
  pl.device_numa_node = device_numa_node;

  const LcoreSlot* main = nullptr;
  std::vector<const LcoreSlot*> workers;
  for (const auto& s : available_lcores) {
    if (s.is_main) {
      main = &s;
    } else {
      workers.push_back(&s);
    }
  }
  if (workers.size() < n_poll_cores) {
    return make_error(
        Errc::kInvalidArgument,
        "placement: " + std::to_string(n_poll_cores) + " poll core(s) asked for but the EAL has " +
            std::to_string(workers.size()) +
            " worker lcore(s) (the main lcore cannot poll); give more with -l, e.g. -l 0-" +
            std::to_string(n_poll_cores));
  }
  const unsigned main_core = main ? where(topo, main->cpu, main->socket).core : ~0u;
  std::set<unsigned> poll_cores;  // physical cores holding a poll core
  std::set<unsigned> used_cpus;
  if (main) used_cpus.insert(main->cpu);

  for (unsigned k = 0; k < n_poll_cores; ++k) {
    const LcoreSlot* best = nullptr;
    std::tuple<int, int, int, unsigned> best_score{};
    for (const LcoreSlot* w : workers) {
      if (std::any_of(pl.poll.begin(), pl.poll.end(),
                      [&](const LcoreSlot& p) { return p.lcore_id == w->lcore_id; })) {
        continue;
      }
      Where at = where(topo, w->cpu, w->socket);
      std::tuple<int, int, int, unsigned> score{at.node != device_numa_node ? 1 : 0,
                                                poll_cores.count(at.core) ? 1 : 0,
                                                at.core == main_core ? 1 : 0, w->cpu};
      if (best == nullptr || score < best_score) {
        best = w;
        best_score = score;
      }
    }
    Where at = where(topo, best->cpu, best->socket);
    if (std::get<0>(best_score)) {
      pl.warnings.push_back("poll lcore " + std::to_string(best->lcore_id) + " on " +
                            cpu_desc(topo, best->cpu) + " is remote: the device is on node " +
                            std::to_string(device_numa_node) +
                            " and no free lcore is left there (add lcores of that node with -l)");
    }
    if (std::get<1>(best_score)) {
      pl.shares_physical_core = true;
      pl.warnings.push_back("poll lcore " + std::to_string(best->lcore_id) + " on " +
                            cpu_desc(topo, best->cpu) +
                            " shares its physical core with another poll lcore (SMT sibling): "
                            "not enough physical cores");
    }
    if (std::get<2>(best_score)) {
      pl.shares_physical_core = true;
      pl.warnings.push_back("poll lcore " + std::to_string(best->lcore_id) + " on " +
                            cpu_desc(topo, best->cpu) +
                            " shares its physical core with the main lcore");
    }
    poll_cores.insert(at.core);
    used_cpus.insert(best->cpu);
    pl.poll.push_back(*best);
  }

  if (want_device_thread) {
    // Any PU of the machine may host it (it is a plain pinned thread, not an lcore).
    const Pu* best = nullptr;
    std::tuple<int, int, int, unsigned> best_score{};
    for (const Pu& p : topo.pus) {
      const bool on_poll_cpu = std::any_of(pl.poll.begin(), pl.poll.end(),
                                           [&](const LcoreSlot& s) { return s.cpu == p.cpu; });
      std::tuple<int, int, int, unsigned> score{on_poll_cpu                ? 3
                                                : poll_cores.count(p.core) ? 2
                                                : p.core == main_core      ? 1
                                                                           : 0,
                                                p.numa_node != device_numa_node ? 1 : 0,
                                                used_cpus.count(p.cpu) ? 1 : 0, p.cpu};
      if (best == nullptr || score < best_score) {
        best = &p;
        best_score = score;
      }
    }
    if (best == nullptr) {
      return make_error(Errc::kInvalidArgument, "placement: the topology has no CPU");
    }
    pl.device_thread_cpu = static_cast<int>(best->cpu);
    const int share = std::get<0>(best_score);
    if (share == 3) {
      pl.shares_physical_core = true;
      pl.warnings.push_back("device thread on " + cpu_desc(topo, best->cpu) +
                            " shares the CPU of a poll core: both spin, expect a large slowdown");
    } else if (share == 2) {
      pl.shares_physical_core = true;
      pl.warnings.push_back("device thread on " + cpu_desc(topo, best->cpu) +
                            " is an SMT sibling of a poll core: not enough physical cores");
    } else if (share == 1) {
      pl.shares_physical_core = true;
      pl.warnings.push_back("device thread on " + cpu_desc(topo, best->cpu) +
                            " shares its physical core with the main lcore (the main thread "
                            "sleeps while poll cores run; fine for tests, not for measurements)");
    }
    if (std::get<1>(best_score)) {
      pl.warnings.push_back("device thread on " + cpu_desc(topo, best->cpu) +
                            " is not on the device's node " + std::to_string(device_numa_node));
    }
  }
  return pl;
}

std::string format_topology(const Topology& topo, const DeviceLocality* dev,
                            const Placement* placement) {
  std::string out;
  out += "topology (" + topo.source + "): " + std::to_string(topo.n_numa_nodes) +
         " NUMA node(s), " + std::to_string(topo.n_cores()) + " physical core(s), " +
         std::to_string(topo.pus.size()) + " PU(s)\n";
  // node -> core -> cpus
  std::map<int, std::map<unsigned, std::vector<unsigned>>> tree;
  for (const auto& p : topo.pus) tree[p.numa_node][p.core].push_back(p.cpu);
  for (const auto& [node, cores] : tree) {
    out += "  node " + std::to_string(node) + ":";
    for (const auto& [core, cpus] : cores) {
      out += " core " + std::to_string(core) + " [cpu";
      for (size_t i = 0; i < cpus.size(); ++i) {
        out += i ? "," : " ";
        out += std::to_string(cpus[i]);
      }
      out += "]";
    }
    out += "\n";
  }
  if (dev != nullptr) {
    out += "device: NUMA node " + std::to_string(dev->numa_node);
    if (!dev->pci.empty()) out += ", PCI " + dev->pci;
    if (!dev->note.empty()) out += " (" + dev->note + ")";
    out += "\n";
  }
  if (placement != nullptr) {
    out += "placement:\n";
    for (const auto& s : placement->poll) {
      out += "  poll lcore " + std::to_string(s.lcore_id) + " on " + cpu_desc(topo, s.cpu) + "\n";
    }
    if (placement->device_thread_cpu >= 0) {
      out += "  device thread on " +
             cpu_desc(topo, static_cast<unsigned>(placement->device_thread_cpu)) + "\n";
    }
    for (const auto& w : placement->warnings) out += "  warning: " + w + "\n";
  }
  return out;
}

std::vector<LcoreSlot> lcores_on_cpus(const Topology& topo, std::span<const unsigned> cpus) {
  std::vector<LcoreSlot> out;
  for (size_t i = 0; i < cpus.size(); ++i) {
    LcoreSlot s;
    s.lcore_id = static_cast<unsigned>(i);
    s.cpu = cpus[i];
    const Pu* p = topo.find_pu(cpus[i]);
    s.socket = p ? p->numa_node : 0;
    s.is_main = i == 0;
    out.push_back(s);
  }
  return out;
}

}  // namespace rdmx::rt
