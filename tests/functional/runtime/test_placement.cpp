// Placement of poll cores and the emu device thread on synthetic machines (no hwloc needed),
// plus one look at this machine through hwloc.
#include <gtest/gtest.h>

#include <set>

#include <rdmx/rt/placement.hpp>
#include <rdmx/rt/topology.hpp>

namespace rt = rdmx::rt;

namespace {

std::vector<unsigned> range(unsigned a, unsigned b) {
  std::vector<unsigned> v;
  for (unsigned i = a; i < b; ++i) v.push_back(i);
  return v;
}

unsigned core_of(const rt::Topology& t, unsigned cpu) {
  return t.find_pu(cpu)->core;
}
int node_of(const rt::Topology& t, unsigned cpu) {
  return t.find_pu(cpu)->numa_node;
}

}  // namespace

TEST(SyntheticTopology, NumbersLikeLinux) {
  auto t = rt::synthetic_topology(2, 8, 2);
  EXPECT_EQ(t.pus.size(), 32u);
  EXPECT_EQ(t.n_cores(), 16u);
  EXPECT_EQ(core_of(t, 3), core_of(t, 19));  // SMT siblings
  EXPECT_EQ(node_of(t, 8), 1);
  EXPECT_EQ(node_of(t, 24), 1);
  EXPECT_EQ(node_of(t, 7), 0);
}

// This machine's shape: 2 cores, 1 node; EAL main lcore 0, one worker.
TEST(Placement, TwoCoresOnePollCorePlusDeviceThread) {
  auto t = rt::synthetic_topology(1, 2, 1);
  auto lc = rt::lcores_on_cpus(t, std::vector<unsigned>{0, 1});
  auto p = rt::plan(t, 1, true, 0, lc);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->poll.size(), 1u);
  EXPECT_EQ(p->poll[0].lcore_id, 1u);
  EXPECT_EQ(p->device_thread_cpu, 0);  // with the (sleeping) main lcore, not on the poll core
  EXPECT_TRUE(p->shares_physical_core);
  ASSERT_EQ(p->warnings.size(), 1u);
  EXPECT_NE(p->warnings[0].find("main lcore"), std::string::npos);
  // Two poll cores cannot fit: only one worker lcore.
  auto q = rt::plan(t, 2, true, 0, lc);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("-l"), std::string::npos);
  EXPECT_FALSE(rt::plan(t, 0, false, 0, lc).ok());
}

TEST(Placement, SingleCpuMustShareWithPollCore) {
  auto t = rt::synthetic_topology(1, 1, 1);
  // --lcores style: two lcores on the one CPU.
  std::vector<rt::LcoreSlot> lc = {{0, 0, 0, true}, {1, 0, 0, false}};
  auto p = rt::plan(t, 1, true, 0, lc);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->device_thread_cpu, 0);
  bool strong = false;
  for (const auto& w : p->warnings) strong |= w.find("CPU of a poll core") != std::string::npos;
  EXPECT_TRUE(strong);
}

// 2 nodes x 8 cores x 2 threads, all 32 CPUs given to the EAL, device on node 1.
TEST(Placement, TwoByEightSmtDeviceOnNode1) {
  auto t = rt::synthetic_topology(2, 8, 2);
  auto lc = rt::lcores_on_cpus(t, range(0, 32));
  auto p = rt::plan(t, 4, true, 1, lc);
  ASSERT_TRUE(p.ok()) << p.error().message;
  std::set<unsigned> cores;
  for (const auto& s : p->poll) {
    EXPECT_EQ(node_of(t, s.cpu), 1) << "poll lcore " << s.lcore_id;
    cores.insert(core_of(t, s.cpu));
  }
  EXPECT_EQ(cores.size(), 4u) << "poll cores must be on distinct physical cores";
  ASSERT_GE(p->device_thread_cpu, 0);
  const unsigned dev = static_cast<unsigned>(p->device_thread_cpu);
  EXPECT_EQ(node_of(t, dev), 1);
  EXPECT_EQ(cores.count(core_of(t, dev)), 0u);
  EXPECT_FALSE(p->shares_physical_core);
  EXPECT_TRUE(p->warnings.empty()) << p->warnings[0];
}

TEST(Placement, SmtSiblingsOnlyWhenPhysicalCoresRunOut) {
  auto t = rt::synthetic_topology(2, 8, 2);
  auto lc = rt::lcores_on_cpus(t, range(0, 32));
  // Node 1 has 8 physical cores: 8 poll cores fit without sharing; the device thread then has
  // to share (sibling of a poll core) or go remote - it prefers its own core on node 0.
  auto p = rt::plan(t, 8, true, 1, lc);
  ASSERT_TRUE(p.ok());
  std::set<unsigned> cores;
  for (const auto& s : p->poll) cores.insert(core_of(t, s.cpu));
  EXPECT_EQ(cores.size(), 8u);
  EXPECT_EQ(node_of(t, static_cast<unsigned>(p->device_thread_cpu)), 0);
  EXPECT_FALSE(p->shares_physical_core);
  EXPECT_EQ(p->warnings.size(), 1u);  // "not on the device's node"
  // 10 poll cores on node 1: two must be SMT siblings, with a warning each.
  auto q = rt::plan(t, 10, false, 1, lc);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->shares_physical_core);
  size_t sib = 0;
  for (const auto& w : q->warnings) sib += w.find("SMT sibling") != std::string::npos;
  EXPECT_EQ(sib, 2u);
  for (const auto& s : q->poll) EXPECT_EQ(node_of(t, s.cpu), 1);
}

// 2 NUMA nodes, device on node 1, but the EAL was given only node-0 CPUs plus one of node 1.
TEST(Placement, RemoteNodeWhenLocalLcoresRunOut) {
  auto t = rt::synthetic_topology(2, 4, 1);
  auto lc = rt::lcores_on_cpus(t, std::vector<unsigned>{0, 1, 2, 4});
  auto p = rt::plan(t, 2, false, 1, lc);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->poll.size(), 2u);
  EXPECT_EQ(p->poll[0].cpu, 4u);  // the node-1 lcore first
  EXPECT_EQ(node_of(t, p->poll[1].cpu), 0);
  ASSERT_EQ(p->warnings.size(), 1u);
  EXPECT_NE(p->warnings[0].find("remote"), std::string::npos);
  EXPECT_EQ(p->device_thread_cpu, -1);
}

TEST(Placement, AvoidsMainLcoreSibling) {
  auto t = rt::synthetic_topology(1, 2, 2);  // cpus 0,2 on core 0; 1,3 on core 1
  auto lc = rt::lcores_on_cpus(t, std::vector<unsigned>{0, 2, 1, 3});
  auto p = rt::plan(t, 1, false, 0, lc);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(core_of(t, p->poll[0].cpu), 1u);
  EXPECT_TRUE(p->warnings.empty());
}

TEST(FormatTopology, ShowsNodesDeviceAndPlacement) {
  auto t = rt::synthetic_topology(1, 2, 1);
  auto lc = rt::lcores_on_cpus(t, std::vector<unsigned>{0, 1});
  auto p = rt::plan(t, 1, true, 0, lc);
  ASSERT_TRUE(p.ok());
  auto dev = rt::emu_device_locality(0);
  std::string s = rt::format_topology(t, &dev, &p.value());
  EXPECT_NE(s.find("1 NUMA node(s), 2 physical core(s), 2 PU(s)"), std::string::npos) << s;
  EXPECT_NE(s.find("poll lcore 1 on cpu 1"), std::string::npos) << s;
  EXPECT_NE(s.find("device thread on cpu 0"), std::string::npos) << s;
  EXPECT_NE(s.find("warning:"), std::string::npos) << s;
}

TEST(DiscoverTopology, ThisMachine) {
  auto t = rt::discover_topology();
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_GE(t->pus.size(), 1u);
  EXPECT_GE(t->n_numa_nodes, 1);
  EXPECT_NE(t->source.find("hwloc"), std::string::npos);
  std::printf("%s", rt::format_topology(*t).c_str());
}
