#include <rdmx/rt/topology.hpp>

#include <hwloc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

namespace rdmx::rt {

const Pu* Topology::find_pu(unsigned cpu) const noexcept {
  for (const auto& p : pus) {
    if (p.cpu == cpu) return &p;
  }
  return nullptr;
}

unsigned Topology::n_cores() const noexcept {
  std::set<unsigned> cores;
  for (const auto& p : pus) cores.insert(p.core);
  return static_cast<unsigned>(cores.size());
}

Result<Topology> discover_topology() {
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0) {
    return make_error(Errc::kDeviceError, "hwloc_topology_init failed");
  }
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return make_error(Errc::kDeviceError, "hwloc_topology_load failed");
  }
  Topology topo;
  topo.source = "hwloc " HWLOC_VERSION;
  int n_nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  topo.n_numa_nodes = n_nodes > 0 ? n_nodes : 1;
  int n_pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  for (int i = 0; i < n_pus; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    if (pu == nullptr) continue;
    Pu p;
    p.cpu = pu->os_index;
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
    // A PU without a core object (some VMs) is its own core; offset keeps ids unique.
    p.core = core != nullptr ? core->logical_index : 100000u + pu->logical_index;
    int node = pu->nodeset != nullptr ? hwloc_bitmap_first(pu->nodeset) : -1;
    p.numa_node = node >= 0 ? node : 0;
    topo.pus.push_back(p);
  }
  hwloc_topology_destroy(t);
  if (topo.pus.empty()) return make_error(Errc::kDeviceError, "hwloc found no processing unit");
  std::sort(topo.pus.begin(), topo.pus.end(),
            [](const Pu& a, const Pu& b) { return a.cpu < b.cpu; });
  return topo;
}

Topology synthetic_topology(int n_nodes, unsigned cores_per_node, unsigned threads_per_core) {
  Topology topo;
  topo.n_numa_nodes = n_nodes;
  topo.source = "synthetic " + std::to_string(n_nodes) + "x" + std::to_string(cores_per_node) +
                "x" + std::to_string(threads_per_core);
  const unsigned n_cores = static_cast<unsigned>(n_nodes) * cores_per_node;
  for (unsigned t = 0; t < threads_per_core; ++t) {
    for (unsigned c = 0; c < n_cores; ++c) {
      Pu p;
      p.cpu = t * n_cores + c;
      p.core = c;
      p.numa_node = static_cast<int>(c / cores_per_node);
      topo.pus.push_back(p);
    }
  }
  return topo;
}

Result<std::vector<unsigned>> parse_cpu_list(const std::string& text) {
  std::vector<unsigned> out;
  size_t i = 0;
  auto num = [&](unsigned* v) {
    size_t start = i;
    unsigned x = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      x = x * 10 + static_cast<unsigned>(text[i] - '0');
      ++i;
    }
    *v = x;
    return i > start;
  };
  while (i < text.size() && text[i] != '\n') {
    unsigned a = 0;
    unsigned b = 0;
    if (!num(&a)) return make_error(Errc::kInvalidArgument, "bad cpu list: '" + text + "'");
    b = a;
    if (i < text.size() && text[i] == '-') {
      ++i;
      if (!num(&b) || b < a) {
        return make_error(Errc::kInvalidArgument, "bad cpu list: '" + text + "'");
      }
    }
    for (unsigned c = a; c <= b; ++c) out.push_back(c);
    if (i < text.size() && text[i] == ',') ++i;
  }
  return out;
}

Result<DeviceLocality> device_locality_from_sysfs(const std::string& sysfs_path) {
  namespace fs = std::filesystem;
  fs::path base(sysfs_path);
  fs::path dev = base;
  if (!fs::exists(dev / "numa_node") && fs::exists(base / "device" / "numa_node")) {
    dev = base / "device";
  }
  std::ifstream f(dev / "numa_node");
  int node = 0;
  if (!(f >> node)) {
    return make_error(Errc::kNoDevice, "no numa_node under " + sysfs_path +
                                           " (expected an ib device or PCI device directory)");
  }
  DeviceLocality loc;
  std::error_code ec;
  fs::path real = fs::canonical(dev, ec);
  if (!ec) loc.pci = real.filename().string();
  if (node < 0) {
    loc.numa_node = 0;
    loc.note = "numa_node is -1 in " + (dev / "numa_node").string() +
               " (no NUMA information): using node 0";
  } else {
    loc.numa_node = node;
    loc.note = "from " + (dev / "numa_node").string();
  }
  std::ifstream lc(dev / "local_cpulist");
  std::string text;
  if (std::getline(lc, text)) {
    auto cpus = parse_cpu_list(text);
    if (cpus) loc.local_cpus = std::move(cpus).value();
  }
  return loc;
}

DeviceLocality emu_device_locality(int numa_node) {
  DeviceLocality loc;
  loc.numa_node = numa_node;
  loc.note = "emulated device: configured node";
  return loc;
}

}  // namespace rdmx::rt
