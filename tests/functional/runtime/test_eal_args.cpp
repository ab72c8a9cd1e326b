// Pure EAL argument handling: split at `--`, hugepage detection, the no-hugepage fallback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <rdmx/rt/eal.hpp>
#include <rdmx/rt/topology.hpp>

namespace rt = rdmx::rt;
namespace fs = std::filesystem;

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

rt::HugepageInfo no_hugepages() {
  rt::HugepageInfo hp;
  hp.sizes.push_back({2048, 0, 0});
  return hp;
}

rt::HugepageInfo some_hugepages() {
  rt::HugepageInfo hp;
  hp.sizes.push_back({2048, 512, 512});
  hp.meminfo_free = 512;
  return hp;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("rdmx-rt-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const fs::path& rel, const std::string& text) const {
    fs::create_directories((path / rel).parent_path());
    std::ofstream(path / rel) << text;
  }
  static inline int counter = 0;
};

}  // namespace

TEST(SplitArgs, CutsAtFirstDoubleDash) {
  const char* argv[] = {"rdmafwd", "-l", "0-1", "--no-huge", "--", "--mode=write", "--", "x"};
  auto r = rt::split_args(8, argv);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prog, "rdmafwd");
  EXPECT_EQ(r->eal, (std::vector<std::string>{"-l", "0-1", "--no-huge"}));
  EXPECT_EQ(r->app, (std::vector<std::string>{"--mode=write", "--", "x"}));
}

TEST(SplitArgs, NoDoubleDashMeansAllEal) {
  const char* argv[] = {"p", "-l", "0"};
  auto r = rt::split_args(3, argv);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->eal.size(), 2u);
  EXPECT_TRUE(r->app.empty());
}

TEST(SplitArgs, RejectsEmptyAndNull) {
  EXPECT_FALSE(rt::split_args(0, nullptr).ok());
  const char* argv[] = {"p", nullptr};
  EXPECT_FALSE(rt::split_args(2, argv).ok());
}

TEST(HasOption, ShortLongAndValueForms) {
  std::vector<std::string> a = {"-m256", "--socket-mem=512,0", "--no-huge"};
  EXPECT_TRUE(rt::has_option(a, "-m"));
  EXPECT_TRUE(rt::has_option(a, "--socket-mem"));
  EXPECT_TRUE(rt::has_option(a, "--no-huge"));
  EXPECT_FALSE(rt::has_option(a, "--no-pci"));
  EXPECT_FALSE(rt::has_option({"--no-hugefoo"}, "--no-huge"));
}

TEST(PlanEalArgs, FallsBackToNoHugeWithNotice) {
  rt::EalOptions o;
  auto p = rt::plan_eal_args({"-l", "0-1"}, o, no_hugepages(), 42);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->no_huge);
  EXPECT_EQ(p->argv, (std::vector<std::string>{"-l", "0-1", "--no-huge", "-m", "256"}));
  ASSERT_EQ(p->notices.size(), 1u);
  EXPECT_NE(p->notices[0].find("--no-huge -m 256"), std::string::npos);
}

TEST(PlanEalArgs, UsesHugepagesWhenFree) {
  rt::EalOptions o;
  auto p = rt::plan_eal_args({"-l", "0-1"}, o, some_hugepages(), 42);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->no_huge);
  EXPECT_EQ(p->argv, (std::vector<std::string>{"-l", "0-1"}));
  EXPECT_TRUE(p->notices.empty());
}

TEST(PlanEalArgs, UserMemoryChoiceIsKept) {
  rt::EalOptions o;
  for (auto args :
       {std::vector<std::string>{"-m", "512"}, std::vector<std::string>{"-m512"},
        std::vector<std::string>{"--socket-mem=512"}, std::vector<std::string>{"--no-huge"}}) {
    auto p = rt::plan_eal_args(args, o, no_hugepages(), 1);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->argv, args);
    EXPECT_TRUE(p->notices.empty());
  }
  o.auto_no_huge = false;
  auto p = rt::plan_eal_args({}, o, no_hugepages(), 1);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->argv.empty());
}

TEST(PlanEalArgs, RefusesNoHugeWithInMemory) {
  auto p = rt::plan_eal_args({"--no-huge", "--in-memory"}, {}, some_hugepages(), 1);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, rdmx::Errc::kInvalidArgument);
  EXPECT_NE(p.error().message.find("--in-memory"), std::string::npos);
}

TEST(PlanEalArgs, FallbackReplacesInMemory) {
  auto p = rt::plan_eal_args({"--in-memory"}, {}, no_hugepages(), 1);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(contains(p->argv, "--in-memory"));
  EXPECT_TRUE(contains(p->argv, "--no-shconf"));
  EXPECT_TRUE(contains(p->argv, "--no-huge"));
  EXPECT_EQ(p->notices.size(), 2u);
}

TEST(PlanEalArgs, NoPciAndFilePrefix) {
  rt::EalOptions o;
  o.no_pci = true;
  o.file_prefix = "t";
  o.unique_file_prefix = true;
  auto p = rt::plan_eal_args({}, o, some_hugepages(), 77);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(contains(p->argv, "--no-pci"));
  EXPECT_TRUE(contains(p->argv, "--file-prefix=t-77"));
  EXPECT_TRUE(p->owns_runtime_dir);
  // A user prefix wins and is never removed by us.
  auto q = rt::plan_eal_args({"--file-prefix", "mine", "--no-pci"}, o, some_hugepages(), 77);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->file_prefix, "mine");
  EXPECT_FALSE(q->owns_runtime_dir);
  EXPECT_EQ(std::count(q->argv.begin(), q->argv.end(), "--no-pci"), 1);
}

TEST(DetectHugepages, ReadsMeminfoAndSysfs) {
  TempDir d;
  d.write("meminfo", "MemTotal: 1 kB\nHugePages_Total:      16\nHugePages_Free:       3\n");
  d.write("hp/hugepages-2048kB/nr_hugepages", "16\n");
  d.write("hp/hugepages-2048kB/free_hugepages", "3\n");
  d.write("hp/hugepages-1048576kB/nr_hugepages", "0\n");
  d.write("hp/hugepages-1048576kB/free_hugepages", "0\n");
  auto hp = rt::detect_hugepages((d.path / "meminfo").string(), (d.path / "hp").string());
  EXPECT_EQ(hp.meminfo_free, 3u);
  ASSERT_EQ(hp.sizes.size(), 2u);
  EXPECT_TRUE(hp.any_free());
  d.write("meminfo", "HugePages_Free:       0\n");
  d.write("hp/hugepages-2048kB/free_hugepages", "0\n");
  hp = rt::detect_hugepages((d.path / "meminfo").string(), (d.path / "hp").string());
  EXPECT_FALSE(hp.any_free());
  hp = rt::detect_hugepages("/nonexistent/meminfo", "/nonexistent/hp");
  EXPECT_FALSE(hp.any_free());
}

TEST(DeviceLocality, FromSysfs) {
  TempDir d;
  d.write("mlx5_0/device/numa_node", "1\n");
  d.write("mlx5_0/device/local_cpulist", "8-11,24\n");
  auto loc = rt::device_locality_from_sysfs((d.path / "mlx5_0").string());
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->numa_node, 1);
  EXPECT_EQ(loc->local_cpus, (std::vector<unsigned>{8, 9, 10, 11, 24}));
  d.write("pci/numa_node", "-1\n");
  loc = rt::device_locality_from_sysfs((d.path / "pci").string());
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->numa_node, 0);
  EXPECT_NE(loc->note.find("-1"), std::string::npos);
  EXPECT_FALSE(rt::device_locality_from_sysfs((d.path / "none").string()).ok());
  EXPECT_EQ(rt::emu_device_locality().numa_node, 0);
  EXPECT_EQ(rt::emu_device_locality(1).numa_node, 1);
}

TEST(CpuList, Parses) {
  auto r = rt::parse_cpu_list("0-2,5,7-8\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<unsigned>{0, 1, 2, 5, 7, 8}));
  EXPECT_FALSE(rt::parse_cpu_list("3-1").ok());
  EXPECT_FALSE(rt::parse_cpu_list("x").ok());
}
