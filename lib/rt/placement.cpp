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

// What the poll cores are placed on so far: the physical cores holding one and every CPU taken
// (the main lcore's too).
struct Taken {
  unsigned main_core;
  std::set<unsigned> poll_cores;
  std::set<unsigned> used_cpus;
};

// The free worker lcore that suits the next poll core best: on the device's node, alone on its
// physical core, away from the main lcore, lowest CPU first (the score's fields in that order).
const LcoreSlot* best_poll_lcore(const Topology& topo, const Placement& pl,
                                 const std::vector<const LcoreSlot*>& workers, const Taken& taken,
                                 std::tuple<int, int, int, unsigned>* best_score) {
  const LcoreSlot* best = nullptr;
  for (const LcoreSlot* w : workers) {
    if (std::any_of(pl.poll.begin(), pl.poll.end(),
                    [&](const LcoreSlot& p) { return p.lcore_id == w->lcore_id; })) {
      continue;
    }
    Where at = where(topo, w->cpu, w->socket);
    std::tuple<int, int, int, unsigned> score{at.node != pl.device_numa_node ? 1 : 0,
                                              taken.poll_cores.count(at.core) ? 1 : 0,
                                              at.core == taken.main_core ? 1 : 0, w->cpu};
    if (best == nullptr || score < *best_score) {
      best = w;
      *best_score = score;
    }
  }
  return best;
}

// Picks n_poll_cores worker lcores one by one, warning about each compromise.
void place_poll_cores(const Topology& topo, unsigned n_poll_cores,
                      const std::vector<const LcoreSlot*>& workers, Taken& taken, Placement& pl) {
  for (unsigned k = 0; k < n_poll_cores; ++k) {
    std::tuple<int, int, int, unsigned> best_score{};
    const LcoreSlot* best = best_poll_lcore(topo, pl, workers, taken, &best_score);
    Where at = where(topo, best->cpu, best->socket);
    const std::string who =
        "poll lcore " + std::to_string(best->lcore_id) + " on " + cpu_desc(topo, best->cpu);
    if (std::get<0>(best_score)) {
      pl.warnings.push_back(who + " is remote: the device is on node " +
                            std::to_string(pl.device_numa_node) +
                            " and no free lcore is left there (add lcores of that node with -l)");
    }
    if (std::get<1>(best_score)) {
      pl.shares_physical_core = true;
      pl.warnings.push_back(who +
                            " shares its physical core with another poll lcore (SMT sibling): "
                            "not enough physical cores");
    }
    if (std::get<2>(best_score)) {
      pl.shares_physical_core = true;
      pl.warnings.push_back(who + " shares its physical core with the main lcore");
    }
    taken.poll_cores.insert(at.core);
    taken.used_cpus.insert(best->cpu);
    pl.poll.push_back(*best);
  }
}

// Picks the device thread's CPU: any PU of the machine (it is a plain pinned thread, not an
// lcore), preferring one that shares nothing with a poll core or the main lcore, then the
// device's node, then a CPU nobody uses.
Status place_device_thread(const Topology& topo, const Taken& taken, Placement& pl) {
  const Pu* best = nullptr;
  std::tuple<int, int, int, unsigned> best_score{};
  for (const Pu& p : topo.pus) {
    const bool on_poll_cpu = std::any_of(pl.poll.begin(), pl.poll.end(),
                                         [&](const LcoreSlot& s) { return s.cpu == p.cpu; });
    std::tuple<int, int, int, unsigned> score{on_poll_cpu                      ? 3
                                              : taken.poll_cores.count(p.core) ? 2
                                              : p.core == taken.main_core      ? 1
                                                                               : 0,
                                              p.numa_node != pl.device_numa_node ? 1 : 0,
                                              taken.used_cpus.count(p.cpu) ? 1 : 0, p.cpu};
    if (best == nullptr || score < best_score) {
      best = &p;
      best_score = score;
    }
  }
  if (best == nullptr) {
    return make_error(Errc::kInvalidArgument, "placement: the topology has no CPU");
  }
  pl.device_thread_cpu = static_cast<int>(best->cpu);
  const std::string who = "device thread on " + cpu_desc(topo, best->cpu);
  const int share = std::get<0>(best_score);
  if (share != 0) pl.shares_physical_core = true;
  if (share == 3) {
    pl.warnings.push_back(who +
                          " shares the CPU of a poll core: both spin, expect a large slowdown");
  } else if (share == 2) {
    pl.warnings.push_back(who + " is an SMT sibling of a poll core: not enough physical cores");
  } else if (share == 1) {
    pl.warnings.push_back(who +
                          " shares its physical core with the main lcore (the main thread "
                          "sleeps while poll cores run; fine for tests, not for measurements)");
  }
  if (std::get<1>(best_score)) {
    pl.warnings.push_back(who + " is not on the device's node " +
                          std::to_string(pl.device_numa_node));
  }
  return {};
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
  Taken taken{main ? where(topo, main->cpu, main->socket).core : ~0u, {}, {}};
  if (main) taken.used_cpus.insert(main->cpu);
  place_poll_cores(topo, n_poll_cores, workers, taken, pl);
  if (want_device_thread) RDMX_TRY(place_device_thread(topo, taken, pl));
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
