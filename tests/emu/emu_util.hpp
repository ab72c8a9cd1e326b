// Test helpers for the emulated device: a connected pair of QPs driven by the real CPU-side
// QueuePair code, WQE posting through the prm builders, and completion waiting.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/mlx5/qp.hpp>

namespace rdmx::emu::test {

namespace prm = ::rdmx::mlx5::prm;
using mlx5::Completion;

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

constexpr uint8_t kAccRW = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE |
                           MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
                           MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;

// A buffer with an MR, page aligned.
struct Buf {
  std::vector<uint8_t> mem;
  uint8_t* p = nullptr;
  size_t len = 0;
  mlx5::MrInfo mr;
  void alloc(EmuDevice& dev, size_t n, uint32_t seed, uint32_t access = mlx5::kAccessAll) {
    mem.assign(n + 4096, 0);
    p = mem.data() + (4096 - reinterpret_cast<uintptr_t>(mem.data()) % 4096) % 4096;
    len = n;
    auto r = random_bytes(n, seed);
    std::memcpy(p, r.data(), n);
    auto m = dev.reg_mr(p, n, access);
    ASSERT_TRUE(m.ok()) << m.error().message;
    mr = m.value();
  }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(p) + off; }
};

struct Side {
  EmuDevice* dev = nullptr;
  mlx5::QpDesc desc;
  mlx5::QueuePair qp;
  std::vector<Completion> got;
};

class EmuTest : public ::testing::Test {
 protected:
  // Opens a pair in `mode` with QPs of the given config, connected.
  void open(Mode mode, mlx5::QpConfig cfg = small_cfg(), uint32_t signal_every = 1,
            Options base = Options{}) {
    base.mode = mode;
    base.checker_fatal = base.checker_fatal;
    auto p = make_pair(base, base);
    ASSERT_TRUE(p.ok()) << p.error().message;
    pair_ = std::move(p.value());
    a_.dev = pair_.a.get();
    b_.dev = pair_.b.get();
    for (Side* s : {&a_, &b_}) {
      auto d = s->dev->create_qp(cfg);
      ASSERT_TRUE(d.ok()) << d.error().message;
      s->desc = d.value();
      s->qp.init(s->desc, signal_every);
    }
    ASSERT_TRUE(mlx5::connect_qps(*a_.dev, a_.desc.qpn, *b_.dev, b_.desc.qpn).ok());
  }

 public:
  static mlx5::QpConfig small_cfg() {
    mlx5::QpConfig c;
    c.sq_wqebbs = 64;
    c.rq_wqes = 16;
    c.rq_sges = 2;
    c.cq_cqes = 128;
    return c;
  }

 protected:
  void TearDown() override {
    if (pair_.a) {
      EXPECT_EQ(pair_.a->checker().total(), expected_reports_a_) << pair_.a->checker().dump();
      EXPECT_EQ(pair_.b->checker().total(), expected_reports_b_) << pair_.b->checker().dump();
    }
  }

  // Posts one WQE built by `build(cursor, wqe_index) -> ds`.
  template <class B>
  void post(Side& s, uint8_t opcode, uint64_t cookie, B&& build, bool ring = true) {
    auto& sq = s.qp.sq();
    ASSERT_GE(sq.free_wqebbs(), std::min(4u, sq.wqe_cnt())) << "test SQ full";
    auto cur = sq.cursor();
    const uint32_t ds = build(cur, sq.wqe_index());
    sq.commit(ds, opcode, cookie);
    if (ring) sq.ring_doorbell();
  }
  uint8_t fm(Side& s, bool signal = true, uint8_t fence = 0, bool solicited = false) {
    return s.qp.sq().next_fm_ce_se(signal, fence, solicited);
  }

  void rdma(Side& s, uint8_t opcode, uint64_t cookie, uint64_t raddr, uint32_t rkey,
            std::vector<prm::Sge> sges, uint32_t imm = 0, uint8_t fence = 0, bool ring = true,
            bool signal = true) {
    const uint8_t f = fm(s, signal, fence);
    post(
        s, opcode, cookie,
        [&](prm::RingCursor& c, uint16_t idx) {
          return prm::build_rdma(c, opcode, s.desc.qpn, idx, f, raddr, rkey, sges,
                                 Be32::from_host(imm));
        },
        ring);
  }
  void send(Side& s, uint8_t opcode, uint64_t cookie, std::vector<prm::Sge> sges, uint32_t imm = 0,
            uint8_t fence = 0, bool solicited = false) {
    const uint8_t f = fm(s, true, fence, solicited);
    post(s, opcode, cookie, [&](prm::RingCursor& c, uint16_t idx) {
      return prm::build_send(c, opcode, s.desc.qpn, idx, f, sges, Be32::from_host(imm));
    });
  }
  void recv(Side& s, uint64_t cookie, std::vector<prm::Sge> sges) {
    ASSERT_TRUE(s.qp.rq().post(sges, cookie));
    s.qp.rq().ring_doorbell();
  }
  // A read-write map of whole 4 KiB `pages` of `arena` into window `win` from side `s`, to be
  // written inline or as a pointer-mode KLM array (prm::write_page_klms).
  prm::UmrMap page_map(Side& s, bool signal, uint32_t win, const Buf& arena,
                       std::span<const uint64_t> pages) {
    prm::UmrMap m;
    m.qpn = s.desc.qpn;
    m.fm_ce_se = fm(s, signal);
    m.mkey = win;
    m.access = kAccRW;
    m.parent_lkey = arena.mr.lkey;
    m.page_size = 4096;
    m.length = pages.size() * 4096;
    m.pages = pages;
    return m;
  }
  // Inline UMR map of `pages` (each `page` bytes of parent MR) into window `mkey`.
  void umr_map(Side& s, uint64_t cookie, uint32_t mkey, uint32_t parent_lkey,
               std::vector<uint64_t> pages, uint32_t page, uint64_t length, uint8_t access,
               uint32_t first_offset = 0, uint8_t check = 0, bool signal = true, bool ring = true,
               uint8_t fence = 0) {
    prm::UmrMap m;
    m.qpn = s.desc.qpn;
    m.fm_ce_se = fm(s, signal, fence);
    m.mkey = mkey;
    m.access = access;
    m.parent_lkey = parent_lkey;
    m.page_size = page;
    m.first_offset = first_offset;
    m.length = length;
    m.pages = pages;
    m.check = check;
    post(
        s, MLX5_OPCODE_UMR, cookie,
        [&](prm::RingCursor& c, uint16_t idx) {
          m.wqe_index = idx;
          return prm::build_umr_map_inline(c, m);
        },
        ring);
  }
  void umr_inval(Side& s, uint64_t cookie, uint32_t mkey, uint8_t check = 0, bool signal = true) {
    const uint8_t f = fm(s, signal);
    post(s, MLX5_OPCODE_UMR, cookie, [&](prm::RingCursor& c, uint16_t idx) {
      return prm::build_umr_invalidate(c, s.desc.qpn, idx, f, mkey, check);
    });
  }

  // Posts on `s` a bind of memory window `mw_rkey` (new key `new_rkey`) to len bytes at addr of
  // the MR `lkey`; qpn_delta != 0 names another QP than `s` in the mkey context.
  void post_bind_mw(Side& s, uint64_t cookie, uint32_t mw_rkey, uint32_t new_rkey, uint8_t access,
                    uint64_t addr, uint64_t len, uint32_t lkey, uint32_t qpn_delta = 0,
                    bool ring = true) {
    prm::BindMw b;
    b.qpn = s.desc.qpn;
    b.fm_ce_se = fm(s);
    b.mw_rkey = mw_rkey;
    b.new_rkey = new_rkey;
    b.access = access;
    b.addr = addr;
    b.length = len;
    b.mr_lkey = lkey;
    post(
        s, MLX5_OPCODE_UMR, cookie,
        [&](prm::RingCursor& c, uint16_t idx) {
          b.wqe_index = idx;
          uint8_t* start = c.here();
          const uint32_t ds = prm::build_bind_mw(c, b);
          // The mkey context's qpn: bytes 4..6 of the context at 64 (BE32 qpn << 8 | key).
          if (qpn_delta) start[64 + 6] = static_cast<uint8_t>(start[64 + 6] + qpn_delta);
          return ds;
        },
        ring);
  }
  // After an error: both QPs through RESET (rings too) back to RTS, connected again.
  void reconnect() {
    ASSERT_TRUE(a_.dev->modify_qp(a_.desc.qpn, mlx5::QpState::kReset).ok());
    ASSERT_TRUE(b_.dev->modify_qp(b_.desc.qpn, mlx5::QpState::kReset).ok());
    a_.qp.reset();
    b_.qp.reset();
    ASSERT_TRUE(mlx5::connect_qps(*a_.dev, a_.desc.qpn, *b_.dev, b_.desc.qpn).ok());
  }

  // A class C error at s's responder: its QP is in error and exactly one async event of kind
  // `k` names it (and nothing else was raised).
  void expect_responder_error(Side& s, mlx5::AsyncEventKind k) {
    EXPECT_EQ(s.dev->query_qp(s.desc.qpn).value(), mlx5::QpState::kError);
    mlx5::AsyncEvent ev[4];
    const size_t n = s.dev->poll_async_events(ev);
    ASSERT_EQ(n, 1u) << "async events on " << s.dev->name();
    EXPECT_EQ(ev[0].qpn, s.desc.qpn);
    EXPECT_EQ(ev[0].kind, k) << mlx5::async_event_name(ev[0].kind);
  }

  // Polls s until `n` completions arrived (or the time runs out); returns them.
  std::vector<Completion> wait(Side& s, size_t n, int timeout_ms = 5000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (s.got.size() < n) {
      const uint32_t k = s.qp.poll(16, [&](const Completion& c) { s.got.push_back(c); });
      if (k) continue;
      if (std::chrono::steady_clock::now() > end) break;
      if (s.dev->mode() == Mode::kThreaded) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        a_.dev->progress();
        b_.dev->progress();
      }
    }
    std::vector<Completion> out(s.got.begin(), s.got.begin() + std::min(n, s.got.size()));
    s.got.erase(s.got.begin(), s.got.begin() + static_cast<long>(out.size()));
    EXPECT_EQ(out.size(), n) << "timed out waiting for completions";
    return out;
  }
  // Asserts nothing more completes within a short time.
  void expect_quiet(Side& s, int ms = 20) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      s.qp.poll(16, [&](const Completion& c) { s.got.push_back(c); });
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EXPECT_TRUE(s.got.empty()) << s.got.size() << " unexpected completions";
  }

  DevicePair pair_;
  Side a_, b_;
  uint64_t expected_reports_a_ = 0, expected_reports_b_ = 0;
};

// Parameterised over inline and threaded modes.
class EmuModeTest : public EmuTest, public ::testing::WithParamInterface<Mode> {};

inline std::string mode_param_name(const ::testing::TestParamInfo<Mode>& i) {
  return mode_name(i.param);
}

}  // namespace rdmx::emu::test
