// The per-core hot-path log ring: single producer (a poll core), single consumer (a drainer).
#include <gtest/gtest.h>

#include <cinttypes>
#include <thread>

#include <rdmx/rt/hot_log.hpp>

namespace rt = rdmx::rt;

TEST(HotLog, PushPopFormat) {
  rt::HotLogRing r(4, 3);
  const uint64_t syn = 0x22;
  void* p = nullptr;
  RDMX_HOT_LOG(r, rdmx::LogLevel::kWarn, "cqe error syndrome 0x%" PRIx64 " wqe %p", syn, p);
  RDMX_HOT_LOG(r, rdmx::LogLevel::kInfo, "no args");
  rt::HotLogRecord rec;
  ASSERT_TRUE(r.pop(&rec));
  EXPECT_EQ(rec.n_args, 2);
  EXPECT_EQ(rec.lcore, 3u);
  std::string s = rt::format_hot_log_record(rec);
  EXPECT_NE(s.find("lcore 3"), std::string::npos) << s;
  EXPECT_NE(s.find("syndrome 0x22 wqe"), std::string::npos) << s;
  ASSERT_TRUE(r.pop(&rec));
  EXPECT_EQ(rt::format_hot_log_record(rec).substr(rt::format_hot_log_record(rec).size() - 7),
            "no args");
  EXPECT_FALSE(r.pop(&rec));
}

TEST(HotLog, FullRingDropsAndCounts) {
  rt::HotLogRing r(4);
  for (uint64_t i = 0; i < 6; ++i) RDMX_HOT_LOG(r, rdmx::LogLevel::kInfo, "%" PRIu64, i);
  EXPECT_EQ(r.dropped(), 2u);
  EXPECT_EQ(r.drain(), 4u);
  EXPECT_EQ(r.drain(), 0u);
}

// Real threads: order and content survive (TSan checks the acquire/release pairs).
TEST(HotLog, SpscAcrossThreads) {
  rt::HotLogRing r(256);
  constexpr uint64_t kN = 50000;
  uint64_t failed = 0;
  std::thread prod([&] {
    for (uint64_t i = 0; i < kN;) {
      if (r.push(rdmx::LogLevel::kDebug, "%" PRIu64, i)) {
        ++i;
      } else {
        ++failed;  // full: the record is dropped (a poll core would move on)
      }
    }
  });
  uint64_t next = 0;
  rt::HotLogRecord rec;
  while (next < kN) {
    if (r.pop(&rec)) {
      ASSERT_EQ(rec.args[0], next);
      ++next;
    }
  }
  prod.join();
  EXPECT_EQ(r.dropped(), failed);
}

TEST(HotLog, DrainerThread) {
  rt::HotLogRing a(16), b(16);
  rt::HotLogDrainer d;
  d.start({&a, &b}, 100);
  for (uint64_t i = 0; i < 10; ++i) {
    RDMX_HOT_LOG(a, rdmx::LogLevel::kDebug, "a %" PRIu64, i);
    RDMX_HOT_LOG(b, rdmx::LogLevel::kDebug, "b %" PRIu64, i);
  }
  d.stop();
  EXPECT_EQ(d.drained(), 20u);
}
