// lib/endpoint: the device-name grammar and the connect/recover services (suite 'emu').
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

namespace {

using namespace rdmx;
using namespace rdmx::endpoint;
using Clock = std::chrono::steady_clock;

template <class T>
T take(Result<T>&& r) {
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

TEST(DeviceSpec, OneMeaningPerName) {
  struct Case {
    const char* spec;
    Backend backend;
    emu::Mode mode;
    const char* verbs;
  } cases[] = {
      {"emu", Backend::kEmu, emu::Mode::kThreaded, ""},
      {"emu-threaded", Backend::kEmu, emu::Mode::kThreaded, ""},
      {"emu-inline", Backend::kEmu, emu::Mode::kInline, ""},
      {"emu-sink", Backend::kEmu, emu::Mode::kSink, ""},
      {"mlx5", Backend::kMlx5, emu::Mode::kThreaded, ""},
      {"mlx5_3", Backend::kMlx5, emu::Mode::kThreaded, "mlx5_3"},
      {"rocep1s0f0", Backend::kMlx5, emu::Mode::kThreaded, "rocep1s0f0"},
  };
  for (const Case& c : cases) {
    auto s = parse_device_spec(c.spec, nullptr);
    ASSERT_TRUE(s.ok()) << c.spec << ": " << s.error().message;
    EXPECT_EQ(s.value().backend, c.backend) << c.spec;
    if (c.backend == Backend::kEmu) {
      EXPECT_EQ(s.value().mode, c.mode) << c.spec;
    }
    EXPECT_EQ(s.value().verbs_name, c.verbs) << c.spec;
  }
}

TEST(DeviceSpec, SuffixesOverrideOptions) {
  DeviceOptions o;
  auto s = parse_device_spec("emu@shm:w1,side=1,timeout=250", &o);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(o.wire, "shm:w1");
  EXPECT_EQ(o.side, 1);
  EXPECT_EQ(o.attach_timeout, std::chrono::milliseconds(250));
  DeviceOptions m;
  ASSERT_TRUE(parse_device_spec("mlx5_0,port=2,gid=3", &m).ok());
  EXPECT_EQ(m.ib_port, 2);
  EXPECT_EQ(m.gid_index, 3);
}

TEST(DeviceSpec, Refusals) {
  const struct {
    const char* spec;
    Errc code;
    const char* words;
  } cases[] = {
      {"", Errc::kNoDevice, "empty device name"},
      {"emu-frob", Errc::kNoDevice, "emu-frob"},
      {"emu:cx6", Errc::kUnsupported, "profile 'cx6'"},
      {"mlx5_0@shm:x", Errc::kInvalidArgument, "emu only"},
      {"emu,port=0", Errc::kInvalidArgument, "port=0"},
      {"emu,side=2", Errc::kInvalidArgument, "side=2"},
      {"emu,color=red", Errc::kInvalidArgument, "unknown device option 'color'"},
      {"emu,port", Errc::kInvalidArgument, "not key=value"},
  };
  for (const auto& c : cases) {
    auto s = parse_device_spec(c.spec, nullptr);
    ASSERT_FALSE(s.ok()) << c.spec;
    EXPECT_EQ(s.error().code, c.code) << c.spec << ": " << s.error().message;
    EXPECT_NE(s.error().message.find(c.words), std::string::npos) << s.error().message;
  }
}

TEST(DeviceOpen, BackendNamesAndAttachTimeoutInTime) {
  auto d = take(open_device("emu-inline,side=1"));
  EXPECT_EQ(d.backend, "emu-inline");
  EXPECT_EQ(d.dev->name(), "emu1");
  ASSERT_NE(d.emu, nullptr);
  auto sink = take(open_device("emu-sink"));
  EXPECT_EQ(sink.backend, "emu-sink");
  const auto t0 = Clock::now();
  auto none = open_device("emu@shm:rdmx-endpoint-test-absent,side=1,timeout=100");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::kTimeout);
  EXPECT_NE(none.error().message.find("100 ms"), std::string::npos) << none.error().message;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  auto mlx5 = open_device("mlx5_7");
  ASSERT_FALSE(mlx5.ok());
  EXPECT_EQ(mlx5.error().code, Errc::kNoDevice);
  EXPECT_FALSE(take_emu(std::move(d)).value() == nullptr);
}

struct Side {
  OpenedDevice dev;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<win::WindowPool> pool;
  std::unique_ptr<win::PollCore> core;
  void build() {
    mem::ArenaConfig ac;
    ac.bytes = 256 * 4096;
    arena = take(mem::Arena::create(*dev.dev, ac));
    win::PoolConfig pc;
    pc.n_windows = 16;
    pc.max_pages = 8;
    pool = take(win::WindowPool::create(*dev.dev, *arena, pc));
    win::CoreConfig cc;
    cc.cache_size = 8;
    cc.qp.sq_wqebbs = 256;
    cc.qp.rq_wqes = 16;
    cc.qp.cq_cqes = 1024;
    core = take(win::PollCore::create(*pool, cc));
  }
  ~Side() {
    core.reset();
    pool.reset();
    arena.reset();
  }
};

// The recovery protocol as one call: an error on A with map UMRs still in flight and nothing
// polled; recover_cores drains, reconnects and re-invalidates, three times in a row, and the core
// maps again; the emu's PRM checker sees no rule broken. (emu writes its flush CQEs as the QP
// enters ERR, so the drain-before-reset order is not observable here; on a NIC they arrive
// later, which is why recover_cores drains first.)
TEST(Recover, WithWorkInFlight) {
  for (const char* spec : {"emu", "emu-inline"}) {
    auto pair = take(open_device_pair(spec));
    Side a, b;
    a.dev = std::move(pair[0]);
    b.dev = std::move(pair[1]);
    a.build();
    b.build();
    ASSERT_TRUE(connect_cores(*a.core, *b.core).ok());
    std::vector<uint64_t> pages(4);
    for (uint32_t i = 0; i < pages.size(); ++i) pages[i] = a.arena->page_addr(i);
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 6; ++i)
        ASSERT_TRUE(
            a.core->map(pages, mlx5::kAccessRemoteWrite | mlx5::kAccessLocalWrite, 0, 4 * 4096)
                .ok());
      a.core->flush();
      ASSERT_TRUE(a.dev.emu->faults().qp_to_error(a.core->qp_handle()).ok());
      const Status s = recover_cores(*a.core, *b.core);
      ASSERT_TRUE(s.ok()) << spec << " round " << round << ": " << s.error().message;
      EXPECT_EQ(a.core->umrs_in_flight(), 0u);
      EXPECT_EQ(a.core->stats().recoveries, uint64_t(round + 1));
    }
    EXPECT_TRUE(
        a.core->map(std::span<const uint64_t>(pages.data(), 1), mlx5::kAccessLocalWrite, 0, 4096)
            .ok());
    a.core->flush();
    EXPECT_TRUE(a.core->quiesce());
    EXPECT_EQ(a.dev.emu->checker().total() + b.dev.emu->checker().total(), 0u)
        << a.dev.emu->checker().dump() << b.dev.emu->checker().dump();
  }
}

// An arena sized as data pages + WindowPool::arena_tail_bytes keeps exactly its data pages once
// the pool reserved its pointer-mode KLM arrays (windows larger than any inline UMR).
TEST(Sizing, ArenaTailBytesIsWhatThePoolReserves) {
  auto d = take(open_device("emu-inline"));
  for (uint32_t max_pages : {53u, 256u, 1024u}) {
    win::PoolConfig pc;
    pc.n_windows = 24;
    pc.max_pages = max_pages;
    const size_t tail = win::WindowPool::arena_tail_bytes(pc, 4096);
    EXPECT_GE(tail, size_t{24} * max_pages * 16);
    mem::ArenaConfig ac;
    ac.bytes = 10 * 4096 + tail;
    auto arena = take(mem::Arena::create(*d.dev, ac));
    auto pool = take(win::WindowPool::create(*d.dev, *arena, pc));
    EXPECT_EQ(arena->n_pages(), 10u) << max_pages;
  }
}

TEST(Connect, AcrossTheCodec) {
  auto pair = take(open_device_pair("emu-inline"));
  Side a, b;
  a.dev = std::move(pair[0]);
  b.dev = std::move(pair[1]);
  a.build();
  b.build();
  const mlx5::ConnectInfoBytes ia = local_connect_info(*a.core);
  const mlx5::ConnectInfoBytes ib = local_connect_info(*b.core);
  ASSERT_TRUE(connect_core(*a.core, ib).ok());
  ASSERT_TRUE(connect_core(*b.core, ia).ok());
  mlx5::ConnectInfoBytes bad = ib;
  bad[9] ^= 1;
  const Status s = connect_core(*a.core, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::kProtocol);
}

}  // namespace
