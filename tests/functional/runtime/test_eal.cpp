// EAL start-up on this machine: no hugepages -> --no-huge fallback with a notice; one init per
// process; cleanup removes our runtime directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <rdmx/rt/dpdk.hpp>
#include <rdmx/rt/eal.hpp>
#include <rdmx/rt/placement.hpp>
#include <rdmx/rt/topology.hpp>

namespace rt = rdmx::rt;

TEST(Eal, RefusesNoHugeWithInMemoryBeforeStarting) {
  rt::EalArgs a{"t", {"--no-huge", "--in-memory"}, {}};
  auto r = rt::Eal::init(a, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, rdmx::Errc::kInvalidArgument);
  EXPECT_EQ(rte_eal_has_hugepages(), 1) << "EAL must not have been initialised";
}

TEST(Eal, StartsWithDefaultsAndCleansUp) {
  const bool hugepages = rt::detect_hugepages().any_free();
  const char* argv[] = {"rdmx-test", "--no-pci", "--", "app-arg"};
  auto args = rt::split_args(4, argv);
  ASSERT_TRUE(args.ok());
  rt::EalOptions o;
  o.file_prefix = "rdmx-eal-test";
  o.unique_file_prefix = true;
  std::string runtime_dir;
  {
    testing::internal::CaptureStderr();
    auto eal = rt::Eal::init(*args, o);
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(eal.ok()) << eal.error().message << "\n" << err;
    if (!hugepages) {
      // The fallback is visible in the plan and the argument vector; the library leaves showing
      // the notice to the caller (so a tool prints it once, with its own prefix).
      EXPECT_TRUE(eal->no_huge());
      ASSERT_FALSE(eal->notices().empty());
      EXPECT_NE(eal->notices()[0].find("--no-huge -m 256"), std::string::npos);
      EXPECT_EQ(err.find("no free hugepages"), std::string::npos) << err;
      EXPECT_EQ(rte_eal_has_hugepages(), 0);
    } else {
      EXPECT_FALSE(eal->no_huge());
    }
    EXPECT_EQ(args->app, std::vector<std::string>{"app-arg"});
    auto lcores = eal->lcores();
    ASSERT_FALSE(lcores.empty());
    EXPECT_TRUE(lcores[0].is_main);
    EXPECT_EQ(lcores[0].lcore_id, eal->main_lcore());
    EXPECT_EQ(lcores.size(), rte_lcore_count());
    runtime_dir = rte_eal_get_runtime_dir();
    EXPECT_NE(runtime_dir.find("rdmx-eal-test-" + std::to_string(::getpid())), std::string::npos);

    // --show-topology on the real machine with the EAL's lcores.
    auto topo = rt::discover_topology();
    ASSERT_TRUE(topo.ok());
    auto dev = rt::emu_device_locality(0);
    if (lcores.size() >= 2) {
      auto pl = rt::plan(*topo, 1, true, dev.numa_node, lcores);
      ASSERT_TRUE(pl.ok()) << pl.error().message;
      std::printf("%s", rt::format_topology(*topo, &dev, &pl.value()).c_str());
    }

    // One init per process.
    auto again = rt::Eal::init(*args, o);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, rdmx::Errc::kState);
  }  // rte_eal_cleanup
  EXPECT_FALSE(std::filesystem::exists(runtime_dir)) << runtime_dir;
}
