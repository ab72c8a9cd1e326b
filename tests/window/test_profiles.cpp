// The window layer on every emu device profile (suite 'emu', inline mode): representative window
// and security cases per profile, the map WQE's bytes checked against the profile's caps; and
// emu's enforcement of the caps (a forbidden UMR mask, an oversized WQE fail with the syndrome
// emu models), each with the raw WQE the window layer used to send before it read the caps.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

namespace {

using rdmx::Errc;
using rdmx::emu::Profile;
using rdmx::mlx5::Completion;
using rdmx::mlx5::kAccessLocalWrite;
using rdmx::mlx5::kAccessRemoteAtomic;
using rdmx::mlx5::kAccessRemoteRead;
using rdmx::mlx5::kAccessRemoteWrite;
using rdmx::mlx5::prm::Sge;
using namespace rdmx::win;
namespace prm = rdmx::mlx5::prm;

constexpr uint32_t kRw = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
constexpr uint32_t kMaxPages = 28;  // above the 20 inline KLMs of a 512-byte max_wqe_sz_sq

template <class T>
T take(rdmx::Result<T>&& r) {
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

uint64_t be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

using Side = rdmx::endpoint::Endpoint;

struct Rig {
  explicit Rig(const std::string& profile) : Rig(profile, profile) {}
  Rig(const std::string& profile_a, const std::string& profile_b) {
    rdmx::endpoint::DeviceOptions oa, ob;
    oa.emu.profile = profile_a;
    ob.emu.profile = profile_b;
    auto devs = take(rdmx::endpoint::open_device_pair("emu-inline", oa, ob));
    a = take(Side::create(std::move(devs[0]), side_config(8, kMaxPages)));
    b = take(Side::create(std::move(devs[1]), side_config(4, 4)));
    connect();
  }
  ~Rig() {
    a.destroy_cores();
    b.destroy_cores();
  }
  static rdmx::endpoint::EndpointConfig side_config(uint32_t windows, uint32_t pages) {
    rdmx::endpoint::EndpointConfig ec;
    ec.arena.bytes = 256 * 4096;
    ec.pool.n_windows = windows;
    ec.pool.max_pages = pages;
    ec.pool.max_inline_klm = 52;  // asks for the PRM maximum: the pool must clamp it to the device
    ec.core.cache_size = 4;
    ec.core.qp.sq_wqebbs = 256;
    ec.core.qp.rq_wqes = 16;
    ec.core.qp.cq_cqes = 1024;
    return ec;
  }
  void connect() {
    ASSERT_TRUE(
        rdmx::mlx5::connect_qps(a.device(), a.core().qp_handle(), b.device(), b.core().qp_handle())
            .ok());
  }
  std::vector<Completion> drain(PollCore& c) {
    std::vector<Completion> out;
    c.flush();
    for (int i = 0; i < 1000; ++i)
      if (!c.poll(64, [&](const Completion& x) { out.push_back(x); })) break;
    return out;
  }
  // Peer (B) WRITE or READ of len bytes at raddr through rkey; the completion status.
  uint8_t peer_op(bool write, uint64_t b_off, uint64_t raddr, uint32_t len, uint32_t rkey) {
    const Sge s{b.arena().base() + b_off, len, b.arena().lkey()};
    const Errc e = write ? b.core().post_write({&s, 1}, raddr, rkey, 1, true)
                         : b.core().post_read({&s, 1}, raddr, rkey, 1, true);
    EXPECT_EQ(e, Errc::kOk);
    b.core().flush();
    for (int i = 0; i < 1000; ++i) {
      uint8_t st = 0xff;
      b.core().poll(16, [&](const Completion& x) {
        if (x.cookie == 1) st = x.status;
      });
      if (st != 0xff) return st;
    }
    ADD_FAILURE() << "peer op did not complete";
    return 0xff;
  }
  uint8_t* arena_a() { return reinterpret_cast<uint8_t*>(a.arena().base()); }
  uint8_t* arena_b() { return reinterpret_cast<uint8_t*>(b.arena().base()); }

  Side a, b;
};

class OnProfile : public ::testing::TestWithParam<std::string> {
 protected:
  const Profile& prof() const { return *rdmx::emu::profile_by_name(GetParam()); }
};

// Maps of 1..28 pages: the WQE obeys the caps (size, atomic bit, the UMR's own fence, fail if
// not free), the peer's WRITE and READ reach exactly the mapped bytes, and after the unmap the
// old key is refused with nothing changed.
TEST_P(OnProfile, MapWriteReadUnmap) {
  Rig r(GetParam());
  const Profile& p = prof();
  const uint32_t inline_max = prm::max_inline_klm_for(p.max_wqe_sz_sq);
  EXPECT_EQ(r.a.pool().inline_klm_limit(), std::min<uint32_t>(inline_max, 52))
      << "the pool clamps the configured 52 to what max_wqe_sz_sq allows";
  std::mt19937_64 rng(3);
  const uint64_t base = r.a.arena().base();
  for (uint32_t n : {1u, 4u, 20u, 24u, kMaxPages}) {
    std::vector<uint64_t> pages(n);
    for (uint32_t i = 0; i < n; ++i) pages[i] = r.a.arena().page_addr((i * 7 + n) % 200);
    const uint32_t off = 100;
    const uint64_t len = uint64_t{n} * 4096 - off - 50;
    prm::RingCursor cur = r.a.core().qp().sq().cursor();
    const uint8_t* wqe = cur.here();  // the map WQE starts here
    MapResult m = r.a.core().map(pages, kRw, off, len);
    ASSERT_TRUE(m.ok()) << n << " pages: " << rdmx::errc_name(m.errc);
    // The WQE as the device gets it.
    EXPECT_EQ(wqe[3], MLX5_OPCODE_UMR);
    const uint32_t ds = wqe[7] & 0x3f;
    EXPECT_LE(ds * 16, p.max_wqe_sz_sq) << n << " pages";
    const uint8_t fence = wqe[11] & 0xe0;
    const uint8_t want = prm::umr_fence_bits(p.umr_fence);
    EXPECT_TRUE(fence == want || (want == 0 && fence == prm::kFenceInitiatorSmall))
        << "UMR fence 0x" << std::hex << int(fence) << " for umr_fence " << int(p.umr_fence);
    EXPECT_EQ(wqe[16] & prm::kUmrFlagCheckMask, prm::kUmrFlagFailIfNotFree)
        << "every map asks the device to fail if the window is not free";
    EXPECT_EQ((wqe[16] & MLX5_WQE_UMR_CTRL_FLAG_INLINE) != 0, n <= r.a.pool().inline_klm_limit());
    const uint64_t mask = be64(wqe + 24);
    EXPECT_EQ((mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC) != 0,
              !p.umr_modify_atomic_disabled)
        << "mask 0x" << std::hex << mask;
    r.a.core().flush();
    ASSERT_TRUE(r.a.core().quiesce());
    // WRITE 64 bytes at the end of the window, READ them back.
    uint8_t* src = r.arena_b();
    for (int i = 0; i < 64; ++i) src[i] = static_cast<uint8_t>(rng());
    ASSERT_EQ(r.peer_op(true, 0, len - 64, 64, m.rkey), 0) << n << " pages";
    const uint64_t last = (off + len - 64) / 4096, in = (off + len - 64) % 4096;
    ASSERT_EQ(std::memcmp(r.arena_a() + (pages[last] - base) + in, src, 64), 0);
    ASSERT_EQ(r.peer_op(false, 4096, len - 64, 64, m.rkey), 0);
    ASSERT_EQ(std::memcmp(r.arena_b() + 4096, src, 64), 0);
    ASSERT_EQ(r.a.core().unmap(m.window), Errc::kOk);
    r.a.core().flush();
    ASSERT_TRUE(r.a.core().quiesce());
    if (n == kMaxPages) {
      // Stale key: refused, the page keeps its bytes.
      std::vector<uint8_t> before(r.arena_a() + (pages[0] - base),
                                  r.arena_a() + (pages[0] - base) + 4096);
      EXPECT_EQ(r.peer_op(true, 0, 0, 64, m.rkey), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
      EXPECT_EQ(std::memcmp(before.data(), r.arena_a() + (pages[0] - base), 4096), 0);
    }
  }
  EXPECT_EQ(r.a.emu()->checker().total(), 0u) << r.a.emu()->checker().dump();
  EXPECT_EQ(r.b.emu()->checker().total(), 0u) << r.b.emu()->checker().dump();
}

// Atomic access: refused up front where the device cannot grant it by UMR, granted elsewhere.
TEST_P(OnProfile, AtomicAccessFollowsTheCap) {
  Rig r(GetParam());
  const uint64_t page = r.a.arena().page_addr(3);
  MapResult m = r.a.core().map({&page, 1}, kRw | kAccessRemoteAtomic, 0, 4096);
  if (prof().umr_modify_atomic_disabled) {
    EXPECT_EQ(m.errc, Errc::kUnsupported);
    EXPECT_EQ(r.a.core().qp().sq().posted(), 0u) << "nothing posted";
    return;
  }
  ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
  r.a.core().flush();
  ASSERT_TRUE(r.a.core().quiesce());
  EXPECT_TRUE(r.a.emu()->inspect_mkey(m.rkey).access & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC);
  EXPECT_EQ(r.a.emu()->checker().total(), 0u) << r.a.emu()->checker().dump();
}

std::vector<std::string> all_profiles() {
  std::vector<std::string> v;
  for (const Profile& p : rdmx::emu::profiles()) v.push_back(p.name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Emu, OnProfile, ::testing::ValuesIn(all_profiles()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// ---- emu enforces the caps -----------------------------------------------------------------

// Posts one raw map UMR (the bytes the window layer wrote before it read the caps) for `n_pages`
// pages into a fresh window of A, and returns its completion.
Completion raw_map(Rig& r, uint32_t n_pages, bool atomic_bit) {
  const uint32_t mkey = take(r.a.emu()->create_window_mkey(kMaxPages, false));
  std::vector<uint64_t> pages(n_pages);
  for (uint32_t i = 0; i < n_pages; ++i) pages[i] = r.a.arena().page_addr(i);
  rdmx::mlx5::SqWriter& sq = r.a.core().qp().sq();
  prm::UmrMap m;
  m.qpn = sq.qpn();
  m.wqe_index = sq.wqe_index();
  m.fm_ce_se = sq.next_fm_ce_se(true, prm::kFenceInitiatorSmall);
  m.mkey = mkey | 1;
  m.access = rdmx::mlx5::mkc_access_bits(kRw);
  m.parent_lkey = r.a.arena().lkey();
  m.page_size = 4096;
  m.length = uint64_t{n_pages} * 4096;
  m.pages = pages;
  m.check = prm::kUmrFlagFailIfNotFree;
  m.no_atomic_mask = !atomic_bit;
  prm::RingCursor cur = sq.cursor();
  const uint32_t ds = prm::build_umr_map_inline(cur, m);
  sq.commit(ds, MLX5_OPCODE_UMR, 77);
  sq.ring_doorbell();
  Completion got;
  got.status = 0xee;
  for (int i = 0; i < 1000 && got.status == 0xee; ++i)
    r.a.core().poll(16, [&](const Completion& c) {
      if (c.cookie == 77) got = c;
    });
  return got;
}

TEST(Profiles, UnknownNameIsRefusedWithTheList) {
  rdmx::emu::Options o;
  o.profile = "cx9";
  auto p = rdmx::emu::make_pair(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("cx9"), std::string::npos);
  EXPECT_NE(p.error().message.find("atomic-umr-off"), std::string::npos) << p.error().message;
}

// The one device opener takes "emu:PROFILE" (any emu mode), refuses unknown names with the list
// and a profile on a real device.
TEST(Profiles, OpenerTakesEmuColonProfile) {
  auto d = rdmx::endpoint::open_device("emu-inline:wqe512");
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d.value().dev->caps().max_wqe_sz_sq, 512u);
  EXPECT_EQ(d.value().dev->caps().max_inline_klm, 20u);
  auto t = rdmx::endpoint::open_device("emu:atomic-umr-off");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE(t.value().dev->caps().umr_modify_atomic_disabled);
  auto bad = rdmx::endpoint::open_device("emu:cx9");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::kUnsupported);
  EXPECT_NE(bad.error().message.find("wqe512"), std::string::npos) << bad.error().message;
  auto real = rdmx::endpoint::parse_device_spec("mlx5_0:wqe512", nullptr);
  ASSERT_FALSE(real.ok());
  EXPECT_EQ(real.error().code, Errc::kInvalidArgument);
}

TEST(Profiles, DefaultIsTheFirstAndEveryNameResolves) {
  ASSERT_FALSE(rdmx::emu::profiles().empty());
  EXPECT_STREQ(rdmx::emu::profiles()[0].name, "default");
  for (const Profile& p : rdmx::emu::profiles()) EXPECT_EQ(rdmx::emu::profile_by_name(p.name), &p);
}

TEST(Profiles, AtomicMaskBitFailsWhereUmrModifyAtomicIsDisabled) {
  {
    Rig r("atomic-umr-off");
    const Completion c = raw_map(r, 4, /*atomic_bit=*/true);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    EXPECT_EQ(r.a.emu()->checker().count(rdmx::emu::Rule::kUmrMaskForbidden), 1u);
    EXPECT_TRUE(r.a.core().qp().in_error());
  }
  {
    Rig r("atomic-umr-off");
    EXPECT_EQ(raw_map(r, 4, /*atomic_bit=*/false).status, 0) << "without the bit it executes";
  }
  {
    Rig r("default");
    EXPECT_EQ(raw_map(r, 4, /*atomic_bit=*/true).status, 0) << "allowed by the default caps";
  }
}

TEST(Profiles, WqeAboveMaxWqeSzSqFails) {
  {
    Rig r("wqe512");
    // 28 inline KLMs: 128 + 16 * 28 = 576 bytes > 512.
    const Completion c = raw_map(r, 28, true);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    EXPECT_EQ(r.a.emu()->checker().count(rdmx::emu::Rule::kWqeTooLarge), 1u);
  }
  {
    Rig r("wqe512");
    EXPECT_EQ(raw_map(r, 24, true).status, 0) << "128 + 16 * 24 = 512 bytes fit";
  }
  {
    Rig r("default");
    EXPECT_EQ(raw_map(r, 28, true).status, 0) << "fits 1024 bytes";
  }
}

// A: WRITE of `len` bytes into a window B mapped; the completion status.
uint8_t write_to_b(Rig& r, uint32_t len) {
  const uint64_t page[2] = {r.b.arena().page_addr(1), r.b.arena().page_addr(2)};
  MapResult m = r.b.core().map(page, kRw, 0, 8192);
  EXPECT_TRUE(m.ok());
  r.b.core().flush();
  EXPECT_TRUE(r.b.core().quiesce());
  const Sge s{r.a.arena().base(), len, r.a.arena().lkey()};
  EXPECT_EQ(r.a.core().post_write({&s, 1}, 0, m.rkey, 5, true), Errc::kOk);
  r.a.core().flush();
  for (int i = 0; i < 1000; ++i) {
    uint8_t st = 0xff;
    r.a.core().poll(16, [&](const Completion& x) {
      if (x.cookie == 5) st = x.status;
    });
    if (st != 0xff) return st;
  }
  ADD_FAILURE() << "WRITE did not complete";
  return 0xff;
}

// Path MTU, negotiated: each side states its port's MTU in its connect info and both QPs use
// the smaller (connect_info.hpp negotiate), so a 4096-MTU port talking to a 1024-MTU port sends
// 1024-byte packets and nothing is dropped. Before the negotiation emu (and dv) used the local
// MTU and the 8 KiB WRITE below failed with TRANSPORT_RETRY_EXC_ERR.
TEST(Profiles, PathMtuIsNegotiatedToTheSmallerPort) {
  Rig r("default", "mtu1024");
  EXPECT_EQ(write_to_b(r, 8192), 0) << "8 packets of 1024 bytes";
  EXPECT_EQ(r.b.emu()->stats().mtu_drops, 0u);
  EXPECT_GE(r.a.emu()->stats().tx_packets, 8u);
}

// A peer that does not state its MTU (0 in the connect info): the requester keeps its own port's
// MTU; a responder whose port takes less drops the packets and the requester fails with
// TRANSPORT_RETRY_EXC_ERR once its retries are spent. A message that fits still works.
TEST(Profiles, PacketAboveThePeersPathMtuIsDropped) {
  auto unstated = [](Rig& r) {
    rdmx::mlx5::ConnectInfo ia = r.a.device().local_info(r.a.core().qp_handle());
    rdmx::mlx5::ConnectInfo ib = r.b.device().local_info(r.b.core().qp_handle());
    ib.path_mtu = 0;
    ASSERT_TRUE(r.a.device().connect(r.a.core().qp_handle(), ib).ok());
    ASSERT_TRUE(r.b.device().connect(r.b.core().qp_handle(), ia).ok());
  };
  {
    Rig r("default", "mtu1024");
    unstated(r);
    EXPECT_EQ(write_to_b(r, 8192), MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    EXPECT_GT(r.b.emu()->stats().mtu_drops, 0u);
  }
  {
    Rig r("default", "mtu1024");
    unstated(r);
    EXPECT_EQ(write_to_b(r, 1024), 0) << "one packet that fits the peer's MTU";
  }
}

// RDMA READ depth. B (rd-atom4) serves 4 READs at once. A states 16 but negotiates 4 and keeps
// at most 4 outstanding: 12 READs in one burst all complete, none NAKed. (Not covered yet: the
// NAK itself. In inline mode B answers each READ before the next arrives, so its queue never
// exceeds its resources; a test needs B stepped by hand.)
std::vector<Completion> reads_from_b(Rig& r, int n) {
  const uint64_t page[1] = {r.b.arena().page_addr(1)};
  MapResult m = r.b.core().map(page, kRw, 0, 4096);
  EXPECT_TRUE(m.ok());
  r.b.core().flush();
  EXPECT_TRUE(r.b.core().quiesce());
  for (int i = 0; i < n; ++i) {
    const Sge s{r.a.arena().base() + 64u * i, 64, r.a.arena().lkey()};
    EXPECT_EQ(r.a.core().post_read({&s, 1}, 64u * i, m.rkey, 100 + i, true), Errc::kOk);
  }
  r.a.core().flush();
  std::vector<Completion> got;
  for (int i = 0; i < 1000 && got.size() < size_t(n); ++i) {
    r.a.core().poll(64, [&](const Completion& x) {
      if (x.cookie >= 100) got.push_back(x);
    });
    r.b.core().poll(64, [](const Completion&) {});
  }
  return got;
}

TEST(Profiles, ReadDepthIsNegotiated) {
  {
    Rig r("default", "rd-atom4");
    const auto got = reads_from_b(r, 12);
    ASSERT_EQ(got.size(), 12u);
    for (const auto& c : got) EXPECT_EQ(c.status, 0) << c.cookie;
    EXPECT_EQ(r.b.emu()->stats().read_depth_naks, 0u);
  }
}

// A window whose length is shorter than its translation (KLMs cover 8 KiB, LEN says 4 KiB): the
// device checks the window's length before walking the KLMs, so a remote WRITE or READ past LEN
// is refused with nothing changed, although the translation would reach the bytes.
TEST(Profiles, AccessPastTheWindowLengthIsRefusedEvenWhereTheKlmsReach) {
  Rig r("default");
  const uint32_t mkey = take(r.a.emu()->create_window_mkey(4, false));
  const uint64_t pages[2] = {r.a.arena().page_addr(10), r.a.arena().page_addr(11)};
  rdmx::mlx5::SqWriter& sq = r.a.core().qp().sq();
  prm::UmrMap m;
  m.qpn = sq.qpn();
  m.wqe_index = sq.wqe_index();
  m.fm_ce_se = sq.next_fm_ce_se(true, prm::kFenceInitiatorSmall);
  m.mkey = mkey | 1;
  m.access = rdmx::mlx5::mkc_access_bits(kRw);
  m.parent_lkey = r.a.arena().lkey();
  m.page_size = 4096;
  m.length = 8192;
  m.pages = pages;
  m.check = prm::kUmrFlagFailIfNotFree;
  prm::RingCursor cur = sq.cursor();
  uint8_t* wqe = cur.here();
  const uint32_t ds = prm::build_umr_map_inline(cur, m);
  // mkey context len (bytes 24..31 of the segment at offset 64): 4 KiB, big-endian.
  for (int i = 0; i < 8; ++i) wqe[64 + 24 + i] = static_cast<uint8_t>((4096ull >> (56 - 8 * i)));
  sq.commit(ds, MLX5_OPCODE_UMR, 9);
  sq.ring_doorbell();
  uint8_t st = 0xff;
  for (int i = 0; i < 100 && st == 0xff; ++i)
    r.a.core().poll(16, [&](const Completion& c) {
      if (c.cookie == 9) st = c.status;
    });
  ASSERT_EQ(st, 0);
  const auto view = r.a.emu()->inspect_mkey(mkey | 1);
  ASSERT_EQ(view.len, 4096u);
  const uint64_t base = r.a.arena().base();
  std::vector<uint8_t> before(r.arena_a() + (pages[1] - base),
                              r.arena_a() + (pages[1] - base) + 4096);
  for (int i = 0; i < 64; ++i) r.arena_b()[i] = 0xa5;
  // Inside LEN: fine.
  EXPECT_EQ(r.peer_op(true, 0, 4096 - 64, 64, mkey | 1), 0);
  // Wholly past LEN (the second page, which the KLMs translate): refused, page unchanged.
  EXPECT_EQ(r.peer_op(true, 0, 4096, 64, mkey | 1), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(std::memcmp(before.data(), r.arena_a() + (pages[1] - base), 4096), 0);
  r.drain(r.b.core());
  r.drain(r.a.core());
  r.connect();
  ASSERT_TRUE(r.a.core().recover().ok());
  ASSERT_TRUE(r.b.core().recover().ok());
  // Crossing LEN (READ of 4000..4199): refused, nothing scattered into B.
  std::memset(r.arena_b() + 8192, 0x5a, 200);
  EXPECT_EQ(r.peer_op(false, 8192, 4000, 200, mkey | 1), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(r.arena_b()[8192 + i], 0x5a) << i;
}

}  // namespace
