// lib/endpoint: the device-name grammar, the endpoint builder and the connect/recover services
// (suite 'emu').
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <vector>

#include <rdmx/endpoint/cm.hpp>
#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
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
  // The spec's own wire replaces a tool's shared-memory wire, and the side meant for that one.
  DeviceOptions r;
  r.wire = "shm:peer";
  r.side = 1;
  ASSERT_TRUE(parse_device_spec("emu@roce:10.0.0.2", &r).ok());
  EXPECT_EQ(r.wire, "roce:10.0.0.2");
  EXPECT_EQ(r.side, 0);
  DeviceOptions k;
  k.wire = "shm:peer";
  ASSERT_TRUE(parse_device_spec("emu@shm:other,side=1", &k).ok());
  EXPECT_EQ(k.wire, "shm:other");
  EXPECT_EQ(k.side, 1);  // given by the spec itself
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

// The endpoint the connect/recover tests use: 256 data pages, 16 windows of 8 pages, one core
// (default queue depths).
EndpointConfig small_config() {
  EndpointConfig ec;
  ec.arena.bytes = 256 * 4096;
  ec.pool.n_windows = 16;
  ec.pool.max_pages = 8;
  ec.core.cache_size = 8;
  return ec;
}

std::array<Endpoint, 2> endpoint_pair(const char* spec) {
  auto pair = take(open_device_pair(spec));
  Endpoint a = take(Endpoint::create(std::move(pair[0]), small_config()));
  Endpoint b = take(Endpoint::create(std::move(pair[1]), small_config()));
  return {std::move(a), std::move(b)};
}

// The recovery protocol as one call: an error on A with map UMRs still in flight and nothing
// polled; recover_cores drains, reconnects and re-invalidates, three times in a row, and the core
// maps again; the emu's PRM checker sees no rule broken. (emu writes its flush CQEs as the QP
// enters ERR, so the drain-before-reset order is not observable here; on a NIC they arrive
// later, which is why recover_cores drains first.)
TEST(Recover, WithWorkInFlight) {
  for (const char* spec : {"emu", "emu-inline"}) {
    auto [a, b] = endpoint_pair(spec);
    ASSERT_TRUE(connect_endpoints(a, b).ok());
    std::vector<uint64_t> pages(4);
    for (uint32_t i = 0; i < pages.size(); ++i) pages[i] = a.arena().page_addr(i);
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 6; ++i)
        ASSERT_TRUE(a.core()
                        .map(pages, mlx5::kAccessRemoteWrite | mlx5::kAccessLocalWrite, 0, 4 * 4096)
                        .ok());
      a.core().flush();
      ASSERT_TRUE(a.emu()->faults().qp_to_error(a.core().qp_handle()).ok());
      const Status s = recover_cores(a.core(), b.core());
      ASSERT_TRUE(s.ok()) << spec << " round " << round << ": " << s.error().message;
      EXPECT_EQ(a.core().umrs_in_flight(), 0u);
      EXPECT_EQ(a.core().stats().recoveries, uint64_t(round + 1));
    }
    EXPECT_TRUE(
        a.core()
            .map(std::span<const uint64_t>(pages.data(), 1), mlx5::kAccessLocalWrite, 0, 4096)
            .ok());
    a.core().flush();
    EXPECT_TRUE(a.core().quiesce());
    EXPECT_EQ(a.emu()->checker().total() + b.emu()->checker().total(), 0u)
        << a.emu()->checker().dump() << b.emu()->checker().dump();
  }
}

TEST(Connect, AcrossTheCodec) {
  auto [ea, eb] = endpoint_pair("emu-inline");
  win::PollCore* a = &ea.core();
  win::PollCore* b = &eb.core();
  const mlx5::ConnectInfoBytes ia = local_connect_info(*a);
  const mlx5::ConnectInfoBytes ib = local_connect_info(*b);
  ASSERT_TRUE(connect_core(*a, ib).ok());
  ASSERT_TRUE(connect_core(*b, ia).ok());
  mlx5::ConnectInfoBytes bad = ib;
  bad[9] ^= 1;
  const Status s = connect_core(*a, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::kProtocol);
}

// The builder sizes the arena by the pool: the data part keeps every page asked for, whether
// the pool needs pointer-mode KLM arrays at the tail (max_pages above the inline limit: then
// exactly those pages) or not.
TEST(Builder, ArenaSizedByThePool) {
  for (uint32_t max_pages : {8u, 53u, 256u, 1024u}) {
    EndpointConfig ec;
    ec.arena.bytes = 10 * 4096 + 1;  // rounded up to 11 pages
    ec.pool.n_windows = 24;
    ec.pool.max_pages = max_pages;
    ec.n_cores = 2;
    ec.core.cache_size = 4;
    const size_t need = arena_bytes_needed(ec);
    EXPECT_EQ(need, 11 * 4096 + win::WindowPool::arena_tail_bytes(ec.pool, 4096)) << max_pages;
    Endpoint e = take(Endpoint::create(take(open_device("emu-inline")), ec));
    // The tail is the bound for any device; a pool that needs no pointer mode leaves it mappable.
    if (max_pages > e.pool().inline_klm_limit())
      EXPECT_EQ(e.arena().n_pages(), 11u) << max_pages;
    else
      EXPECT_GE(e.arena().n_pages(), 11u) << max_pages;
    EXPECT_EQ(e.arena().size(), need) << max_pages;
    EXPECT_EQ(e.n_cores(), 2u);
    EXPECT_EQ(e.backend(), "emu-inline");
    ASSERT_NE(e.emu(), nullptr);
  }
  // A caller's buffer is the arena: the tail comes out of it.
  EndpointConfig ec;
  alignas(4096) static uint8_t buf[64 * 4096];
  ec.arena.source = mem::Source::kUser;
  ec.arena.user_buf = buf;
  ec.arena.bytes = sizeof buf;
  ec.pool.n_windows = 8;
  ec.pool.max_pages = 256;
  EXPECT_EQ(arena_bytes_needed(ec), sizeof buf);
  Endpoint e = take(Endpoint::create(take(open_device("emu-inline")), ec));
  EXPECT_EQ(e.arena().size(), sizeof buf);
  EXPECT_LT(e.arena().n_pages(), 64u);
}

// Cores come and go on a built endpoint; errors name the step that failed; destruction in order
// leaves the device's checker clean.
TEST(Builder, CoresAndErrors) {
  Endpoint e = take(Endpoint::create(take(open_device("emu-inline")), small_config()));
  auto c2 = e.add_core(small_config().core);
  ASSERT_TRUE(c2.ok()) << c2.error().message;
  EXPECT_EQ(e.n_cores(), 2u);
  EXPECT_TRUE(e.remove_core(c2.value()));
  EXPECT_FALSE(e.remove_core(c2.value()));
  EXPECT_EQ(e.n_cores(), 1u);
  e.destroy_cores();
  EXPECT_EQ(e.n_cores(), 0u);
  EXPECT_EQ(e.pool().depot_count(), e.pool().n_windows());  // every window back in the depot
  EXPECT_EQ(e.emu()->checker().total(), 0u) << e.emu()->checker().dump();

  EndpointConfig bad = small_config();
  bad.pool.n_windows = 0;
  auto r = Endpoint::create(take(open_device("emu-inline")), bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("window pool: ", 0), 0u) << r.error().message;
  auto none = Endpoint::create(OpenedDevice{}, small_config());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::kInvalidArgument);
}

}  // namespace

// rdma_cm through the library: an emulated device has none, and says so rather than crash.
namespace {
TEST(EndpointCm, EmuDeviceIsRefused) {
  auto d = rdmx::endpoint::open_device("emu-inline");
  ASSERT_TRUE(d.ok()) << d.error().message;
  auto c = rdmx::endpoint::CmPeer::client(*d.value().dev);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, rdmx::Errc::kUnsupported);
  EXPECT_NE(c.error().message.find("needs a real mlx5 device"), std::string::npos);
  auto l = rdmx::endpoint::CmPeer::listen(*d.value().dev, {"127.0.0.1", 0});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code, rdmx::Errc::kUnsupported);
}
}  // namespace

// The connections a CmPeer holds (CmConnections): one per QP. A QP connected again gives its last
// connection back at once, a session that ends gives back its own, and an id given back (or
// replaced) is not given back twice: a long-running server holds only its current ones.
namespace {
struct FakeCmConn {
  int* gone;
  explicit FakeCmConn(int* g) : gone(g) {}
  ~FakeCmConn() { ++*gone; }
};

TEST(EndpointCm, OneConnectionPerQpAndReleasedWithItsSession) {
  int gone = 0;
  rdmx::endpoint::CmConnections<FakeCmConn> held;
  // A server whose clients reconnect 100 times over two QPs holds two connections, not 200.
  uint64_t last[2] = {0, 0};
  for (int round = 0; round < 100; ++round)
    for (uint32_t qp : {0x10u, 0x11u}) {
      const uint64_t id = held.add(qp, std::make_unique<FakeCmConn>(&gone));
      EXPECT_NE(id, 0u);
      EXPECT_NE(id, last[qp - 0x10]);
      last[qp - 0x10] = id;
    }
  EXPECT_EQ(held.size(), 2u);
  EXPECT_EQ(gone, 198);
  // The session on QP 0x10 ends: its connection goes, the other stays.
  EXPECT_TRUE(held.release(last[0]));
  EXPECT_EQ(held.size(), 1u);
  EXPECT_EQ(gone, 199);
  EXPECT_FALSE(held.release(last[0]));  // once
  // An id whose QP was connected again since is not the new connection's.
  const uint64_t old = last[1];
  last[1] = held.add(0x11, std::make_unique<FakeCmConn>(&gone));
  EXPECT_EQ(gone, 200);
  EXPECT_FALSE(held.release(old));
  EXPECT_EQ(held.size(), 1u);
  held.clear();
  EXPECT_EQ(gone, 201);
}

// Without a device: a CmPeer holds nothing, gives back nothing, and a failed connect (emu has no
// rdma_cm) adds nothing.
TEST(EndpointCm, FailedConnectHoldsNothing) {
  auto d = rdmx::endpoint::open_device("emu-inline");
  ASSERT_TRUE(d.ok()) << d.error().message;
  auto peer = rdmx::endpoint::CmPeer::client_any();
  EXPECT_EQ(peer->connections(), 0u);
  EXPECT_FALSE(peer->release(1));
  auto c = peer->connect(*d.value().dev, 0x10, {"127.0.0.1", 7471});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, rdmx::Errc::kUnsupported);
  auto a = peer->accept(*d.value().dev, 0x10, 10);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, rdmx::Errc::kState);  // a client does not listen
  EXPECT_EQ(peer->connections(), 0u);
}
}  // namespace
