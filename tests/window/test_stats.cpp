// The window statistics as a library service (rdmx/win/stats.hpp, stats_registry.hpp): the one
// table, snapshots read from another thread while the core works (run under TSan in CI), the
// xstats names, and the process-wide registry telemetry serves.
#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include <rdmx/win/stats.hpp>
#include <rdmx/win/stats_registry.hpp>

#include "emu_rig.hpp"

namespace rdmx_test {
namespace {

TEST(Stats, TableDescribesEveryCounterOnce) {
  const auto t = core_stat_table();
  ASSERT_FALSE(t.empty());
  std::set<std::string> names;
  std::set<uint32_t> offsets;
  CoreCounts c;
  uint64_t v = 1;
  for (const StatDesc& d : t) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_TRUE(offsets.insert(d.offset).second) << d.name;
    EXPECT_LT(d.offset + sizeof(uint64_t), offsetof(CoreCounts, errors) + 1) << d.name;
    EXPECT_TRUE(d.unit && *d.unit && d.help && *d.help) << d.name;
    std::memcpy(reinterpret_cast<char*>(&c) + d.offset, &v, sizeof v);
    ++v;
  }
  // The offsets are the fields': each row reads back what was written through it.
  EXPECT_EQ(c.maps, 1u);
  v = 1;
  for (const StatDesc& d : t) EXPECT_EQ(d.value(c), v++) << d.name;
  // xstats: the scalars first, in table order, then one "rejected_" per Errc.
  NamedValue out[kMaxXstats];
  const size_t n = xstats(c, out, kMaxXstats);
  ASSERT_GE(n, t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_STREQ(out[i].name, t[i].name);
    EXPECT_EQ(out[i].value, i + 1);
  }
  if (kStatsEnabled) {
    EXPECT_EQ(n, t.size() + kNumErrc);  // no syndrome seen
    EXPECT_STREQ(out[t.size() + static_cast<uint32_t>(Errc::kNoWindow)].name, "rejected_no_window");
  }
  // Sizing call.
  EXPECT_EQ(xstats(c, nullptr, 0), n);
}

TEST(Stats, SnapshotMatchesTheCoreAndTheRegistry) {
  EmuRig r(16, 16);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10; ++i) {
    auto pages = r.random_pages(rng, 4);
    MapResult m = r.ca().map(pages, kRw, 0, 4 * 4096);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
    r.settle(r.ca());
  }
  // A refused call (no pages) is counted by its Errc.
  EXPECT_EQ(r.ca().map({}, kRw, 0, 1).errc, Errc::kInvalidArgument);
  const CoreCounts s = snapshot(r.ca().stats());
  EXPECT_EQ(s.maps, 10u);
  EXPECT_EQ(s.unmaps, 10u);
  EXPECT_EQ(s.umr_completions, 20u);  // always counted
  EXPECT_EQ(s.pages_mapped, kStatsEnabled ? 40u : 0u);
  EXPECT_EQ(s.error_count(Errc::kInvalidArgument), kStatsEnabled ? 1u : 0u);
  // The registry knows the core by its index and reads the same numbers.
  const uint32_t idx = r.ca().stats_index();
  bool listed = false;
  for (uint32_t i : stats_cores()) listed |= i == idx;
  EXPECT_TRUE(listed);
  CoreCounts via;
  ASSERT_TRUE(stats_of_core(idx, &via));
  EXPECT_EQ(via.maps, s.maps);
  EXPECT_EQ(via.pages_mapped, s.pages_mapped);
  // The process total keeps a destroyed core's counts.
  const CoreCounts before = stats_total();
  EXPECT_GE(before.maps, s.maps);
  r.a.destroy_cores();
  EXPECT_FALSE(stats_of_core(idx, &via));
  EXPECT_GE(stats_total().maps, before.maps);
}

// An interleaved map has no page list: it counts its length in pages, rounded up (it counted
// none, so --metadata runs showed "pages mapped 0").
TEST(Stats, InterleavedMapsCountTheirPages) {
  if (!kStatsEnabled) GTEST_SKIP() << "-Dstats=false";
  EmuRig r(16, 16);
  const uint64_t base = r.a.arena().base();
  // Two blocks of 4096 data bytes and 8 metadata bytes: 8208 bytes, 3 pages' worth.
  const InterleavedPart parts[] = {{base, 4096, 4096}, {base + 64 * 4096, 8, 0}};
  const uint64_t before = snapshot(r.ca().stats()).pages_mapped;
  MapResult m = r.ca().map_interleaved(parts, 2, kRw);
  ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
  EXPECT_EQ(snapshot(r.ca().stats()).pages_mapped - before, 3u);
  ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
  r.settle(r.ca());
}

// A reader thread snapshots while the core's thread maps and unmaps: every snapshot keeps causes
// before effects and never goes backwards. Under TSan (build-tsan) a plain counter here is a
// reported data race.
TEST(Stats, ReaderOnAnotherThreadSeesCausesBeforeEffects) {
  EmuRig r(16, 16);
  PollCore& core = r.ca();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> snapshots{0};
  std::string failure;
  std::thread reader([&] {
    CoreCounts last;
    while (!done.load(std::memory_order_acquire) || snapshots.load() < 10) {
      const CoreCounts s = snapshot(core.stats());
      char why[200] = "";
      if (s.unmaps + s.remote_invalidations > s.maps)
        std::snprintf(why, sizeof why, "unmaps %lu > maps %lu", (unsigned long)s.unmaps,
                      (unsigned long)s.maps);
      else if (s.pages_mapped > 16 * s.maps)
        std::snprintf(why, sizeof why, "pages %lu > 16 x maps %lu", (unsigned long)s.pages_mapped,
                      (unsigned long)s.maps);
      else if (s.umr_completions > s.maps + s.unmaps)
        std::snprintf(why, sizeof why, "completions %lu > UMRs posted %lu",
                      (unsigned long)s.umr_completions, (unsigned long)(s.maps + s.unmaps));
      else
        for (const StatDesc& d : core_stat_table())
          if (d.kind == StatKind::kCounter && d.value(s) < d.value(last))
            std::snprintf(why, sizeof why, "%s went back", d.name);
      if (*why) {
        failure = why;
        return;
      }
      last = s;
      snapshots.fetch_add(1);
    }
  });
  std::mt19937_64 rng(5);
  const auto t_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  uint64_t pairs = 0;
  while (std::chrono::steady_clock::now() < t_end || pairs < 100) {
    auto pages = r.random_pages(rng, 1 + static_cast<uint32_t>(rng() % 16));
    MapResult m = core.map(pages, kRw, 0, pages.size() * 4096);
    ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
    ASSERT_EQ(core.unmap(m.window), Errc::kOk);
    r.settle(core);
    ++pairs;
  }
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(failure, "");
  EXPECT_GE(snapshots.load(), 10u);
  EXPECT_EQ(snapshot(core.stats()).maps, pairs);
}

}  // namespace
}  // namespace rdmx_test
