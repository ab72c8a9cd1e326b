// SQ writer / CQ poller on plain memory. A small "device" here plays the hardware's part: it
// reads the doorbell record, walks the posted WQEs with the decoder and writes a CQE64 for each
// signaled one (owner bit = pass parity). Runs ≥ 10 full wraps of rings of 8, 64 and 4096.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include <rdmx/mlx5/prm/decode.hpp>
#include <rdmx/mlx5/qp.hpp>

namespace prm = rdmx::mlx5::prm;
using rdmx::mlx5::Completion;
using rdmx::mlx5::QpDesc;
using rdmx::mlx5::QueuePair;

namespace {

struct PlainQueues {
  PlainQueues(uint32_t sq_n, uint32_t cq_n, uint32_t rq_n = 0)
      : sq(static_cast<uint8_t*>(std::aligned_alloc(64, size_t{sq_n} * 64))),
        cq(static_cast<mlx5_cqe64*>(std::aligned_alloc(64, size_t{cq_n} * 64))),
        rq(rq_n ? static_cast<uint8_t*>(std::aligned_alloc(64, size_t{rq_n} * 16)) : nullptr) {
    for (uint32_t i = 0; i < cq_n; ++i) {
      std::memset(&cq[i], 0, 64);
      cq[i].op_own = MLX5_CQE_INVALID << 4;
    }
    desc.qpn = 0x42;
    desc.sq = {sq, sq_n, &dbrec[MLX5_SND_DBR], &reg, 0, {}};
    desc.cq = {cq, cq_n, &cq_dbrec, 1};
    if (rq_n) desc.rq = {rq, rq_n, 16, &dbrec[MLX5_RCV_DBR], {}};
  }
  ~PlainQueues() {
    std::free(sq);
    std::free(cq);
    std::free(rq);
  }
  uint8_t* sq;
  mlx5_cqe64* cq;
  uint8_t* rq;
  volatile uint32_t dbrec[2] = {0, 0};
  volatile uint64_t reg = 0;
  volatile uint32_t cq_dbrec = 0;
  QpDesc desc;
};

// The hardware's side of the rings.
class PlainDevice {
 public:
  explicit PlainDevice(PlainQueues& q) : q_(q) {}

  // Consumes every WQE the doorbell record announces; writes CQEs for the signaled ones, an
  // error CQE for the WQE at fail_at (and flush CQEs for all after it).
  void process() {
    const uint16_t db = static_cast<uint16_t>(__builtin_bswap32(q_.dbrec[MLX5_SND_DBR]));
    while (static_cast<uint16_t>(sq_ci_) != db) {
      prm::DecodedWqe d;
      ASSERT_EQ(prm::decode_wqe(q_.sq, q_.desc.sq.wqe_cnt, sq_ci_, d), prm::DecodeError::kOk);
      ASSERT_EQ(d.ctrl.wqe_index, static_cast<uint16_t>(sq_ci_)) << "WQE index != producer";
      ASSERT_EQ(d.ctrl.qpn, 0x42u);
      const bool fail = wqes_ == fail_at_;
      if (fail || error_) {
        write_cqe(MLX5_CQE_REQ_ERR, d,
                  fail ? MLX5_CQE_SYNDROME_LOCAL_PROT_ERR : MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        error_ = true;
      } else if (d.ctrl.signaled()) {
        write_cqe(MLX5_CQE_REQ, d, 0);
      }
      sq_ci_ += d.n_wqebb;
      ++wqes_;
    }
  }
  void fail_at(uint64_t n) { fail_at_ = n; }
  uint64_t cqes() const { return cq_pi_; }
  uint32_t sq_ci() const { return sq_ci_; }

 private:
  void write_cqe(uint8_t opcode, const prm::DecodedWqe& d, uint8_t syndrome) {
    const uint32_t n = q_.desc.cq.cqe_cnt;
    // Never overrun: the slot must have been consumed (CQ doorbell record).
    const uint32_t sw_ci = __builtin_bswap32(q_.cq_dbrec) & prm::kCqDbrCiMask;
    ASSERT_LT(cq_pi_ - sw_ci, n) << "CQ overrun";
    prm::CqeFields f;
    f.opcode = opcode;
    f.send_opcode = d.ctrl.opcode;
    f.qpn = d.ctrl.qpn;
    f.wqe_counter = d.ctrl.wqe_index;
    f.syndrome = syndrome;
    prm::write_cqe(&q_.cq[cq_pi_ & (n - 1)], f, (cq_pi_ / n) & 1);
    ++cq_pi_;
  }

  PlainQueues& q_;
  uint32_t sq_ci_ = 0;
  uint32_t cq_pi_ = 0;
  uint64_t wqes_ = 0;
  uint64_t fail_at_ = ~0ull;
  bool error_ = false;
};

// Posts a NOP of `ds` DS with `cookie`.
void post_nop(QueuePair& qp, uint32_t ds, uint64_t cookie, bool signal = false) {
  auto& sq = qp.sq();
  auto cur = sq.cursor();
  prm::build_nop(cur, sq.qpn(), sq.wqe_index(), sq.next_fm_ce_se(signal), ds);
  sq.commit(ds, MLX5_OPCODE_NOP, cookie);
}

// Posts a NOP of `ds` DS with `cookie` through a Burst (a quiet WQE); false (nothing posted) when
// it would wrap the ring or there is no room.
bool post_quiet_nop(QueuePair& qp, uint8_t* ring, uint32_t ds, uint64_t cookie) {
  auto& sq = qp.sq();
  rdmx::mlx5::SqWriter::Burst b = sq.begin_burst();
  rdmx::mlx5::SqWriter::Slot s;
  if (!sq.reserve(b, prm::ds_to_wqebbs(ds), 0, s)) return false;
  prm::RingCursor cur(ring, sq.wqe_cnt(), static_cast<uint32_t>(s.pi));
  prm::build_nop(cur, sq.qpn(), static_cast<uint16_t>(s.pi), s.fm_ce_se, ds);
  sq.commit(b, s, MLX5_OPCODE_NOP, cookie);
  sq.end_burst(b, 1);
  return true;
}

class RingWraps : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RingWraps, EveryWqeCompletesOnceInOrder) {
  const uint32_t n = GetParam();
  PlainQueues q(n, n);  // CQ as large as the SQ: never more signaled WQEs than slots
  QueuePair qp;
  qp.init(q.desc, 4);
  PlainDevice dev(q);
  std::mt19937 rng(n);
  uint64_t next_cookie = 1, expect_cookie = 1;
  uint64_t signaled_seen = 0, unsignaled_seen = 0;
  // Until both rings made at least 10 full passes (the CQ's owner bit flipped 10 times).
  const uint64_t target = uint64_t{n} * 10;
  uint64_t posted_wqebbs = 0;
  uint32_t last_db = 0;
  while (posted_wqebbs < target || qp.cq().ci() < target) {
    // A burst of 1..8 WQEs of 1..12 DS (up to 3 WQEBBs, so WQEs straddle the ring end).
    const uint32_t burst = 1 + rng() % 8;
    for (uint32_t i = 0; i < burst; ++i) {
      const uint32_t ds = 1 + rng() % std::min<uint32_t>(12, n * 4);
      if (!qp.sq().has_room(ds)) break;
      post_nop(qp, ds, next_cookie++);
      posted_wqebbs += prm::ds_to_wqebbs(ds);
    }
    qp.sq().ring_doorbell();
    // The doorbell record carries the producer counter (16 bits, big-endian) and the
    // register the first 8 bytes of the last WQE.
    ASSERT_EQ(__builtin_bswap32(q.dbrec[MLX5_SND_DBR]), qp.sq().pi() & 0xffff);
    ASSERT_NE(qp.sq().pi(), last_db);
    last_db = qp.sq().pi();
    dev.process();
    qp.poll(1u << 20, [&](const Completion& c) {
      EXPECT_EQ(c.cookie, expect_cookie) << "completion out of order or lost";
      EXPECT_TRUE(c.ok());
      EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_NOP);
      expect_cookie = c.cookie + 1;
      (c.signaled ? signaled_seen : unsignaled_seen)++;
    });
    ASSERT_EQ(__builtin_bswap32(q.cq_dbrec), qp.cq().ci() & prm::kCqDbrCiMask);
  }
  EXPECT_EQ(expect_cookie, next_cookie) << "every WQE completed exactly once";
  EXPECT_EQ(qp.sq().in_flight(), 0u) << "the last WQE of each burst is signaled";
  EXPECT_EQ(signaled_seen, dev.cqes());
  EXPECT_GT(unsignaled_seen, 0u) << "unsignaled batching was exercised";
  EXPECT_GE(qp.cq().ci(), 10 * n) << "the CQ wrapped 10 times";
  EXPECT_GE(posted_wqebbs, 10 * n) << "the SQ wrapped 10 times";
  EXPECT_EQ(qp.stats().bad_cqes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingWraps, ::testing::Values(8u, 64u, 4096u));

TEST(SqWriter, NoRoomWhenFull) {
  PlainQueues q(8, 8);
  QueuePair qp;
  qp.init(q.desc, 1);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(qp.sq().has_room(8));
    post_nop(qp, 8, i + 1);  // 2 WQEBBs each
  }
  EXPECT_FALSE(qp.sq().has_room(1)) << "8 WQEBBs in flight fill a ring of 8";
  EXPECT_EQ(qp.sq().free_wqebbs(), 0u);
}

TEST(SqWriter, SignalEveryNthAndFenceAfterUmr) {
  PlainQueues q(64, 64);
  QueuePair qp;
  qp.init(q.desc, 3);
  auto& sq = qp.sq();
  EXPECT_FALSE(sq.next_fm_ce_se(false) & MLX5_WQE_CTRL_CQ_UPDATE);
  post_nop(qp, 1, 1);
  post_nop(qp, 1, 2);
  EXPECT_TRUE(sq.next_fm_ce_se(false) & MLX5_WQE_CTRL_CQ_UPDATE) << "third WQE is signaled";
  // After a UMR the next WQE inherits INITIATOR_SMALL (rdma-core fm_cache, kernel umr_fence).
  const uint64_t pages[] = {0x1000};
  prm::UmrMap m;
  m.qpn = sq.qpn();
  m.wqe_index = sq.wqe_index();
  m.fm_ce_se = sq.next_fm_ce_se(false);
  m.mkey = 0x100;
  m.page_size = 4096;
  m.length = 4096;
  m.pages = pages;
  auto cur = sq.cursor();
  sq.commit(prm::build_umr_map_inline(cur, m), MLX5_OPCODE_UMR, 3);
  EXPECT_EQ(sq.next_fm_ce_se(false) & prm::kFenceMask, prm::kFenceInitiatorSmall);
  EXPECT_EQ(sq.next_fm_ce_se(false, prm::kFenceSmallAndFence) & prm::kFenceMask,
            prm::kFenceSmallAndFence)
      << "an explicit fence overrides the inherited one";
  post_nop(qp, 1, 4);
  EXPECT_EQ(sq.next_fm_ce_se(false) & prm::kFenceMask, 0) << "only the WQE right after a UMR";
}

TEST(SqWriter, RingMarksLastWqeSignaledAndWritesRegister) {
  PlainQueues q(8, 8);
  QueuePair qp;
  qp.init(q.desc, 100);
  post_nop(qp, 1, 1);
  post_nop(qp, 2, 2);
  const uint8_t before = reinterpret_cast<mlx5_wqe_ctrl_seg*>(q.sq + 64)->fm_ce_se;
  EXPECT_FALSE(before & MLX5_WQE_CTRL_CQ_UPDATE);
  qp.sq().ring_doorbell();
  const auto* last = reinterpret_cast<mlx5_wqe_ctrl_seg*>(q.sq + 64);
  EXPECT_TRUE(last->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE);
  uint64_t first8;
  std::memcpy(&first8, last, 8);
  EXPECT_EQ(q.reg, first8) << "register gets the last WQE's first 8 bytes";
  EXPECT_EQ(__builtin_bswap32(q.dbrec[MLX5_SND_DBR]), 2u);
  const uint64_t db = qp.sq().doorbells();
  qp.sq().ring_doorbell();
  EXPECT_EQ(qp.sq().doorbells(), db) << "no doorbell when nothing new was posted";
}

TEST(QueuePair, ErrorCqeCoversEarlierWqesAndFlushesLater) {
  PlainQueues q(64, 64);
  QueuePair qp;
  qp.init(q.desc, 8);
  PlainDevice dev(q);
  dev.fail_at(3);  // the 4th WQE fails
  for (int i = 1; i <= 6; ++i) post_nop(qp, 1, i);
  qp.sq().ring_doorbell();
  dev.process();
  std::vector<Completion> got;
  qp.poll(64, [&](const Completion& c) { got.push_back(c); });
  ASSERT_EQ(got.size(), 6u) << "every posted WQE is reported exactly once";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].cookie, uint64_t(i + 1));
    EXPECT_TRUE(got[i].ok()) << "unsignaled WQEs before the error completed";
  }
  EXPECT_EQ(got[3].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  EXPECT_EQ(got[4].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  EXPECT_EQ(got[5].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  EXPECT_TRUE(qp.in_error());
  EXPECT_EQ(qp.sq().in_flight(), 0u);
  const uint64_t before = qp.sq().pi();
  qp.reset();
  EXPECT_FALSE(qp.in_error());
  // The device starts its counters over: the ring slot and the 16-bit WQE counter are 0 again,
  // while the 64-bit counters move on (positions recorded before stay behind the consumer).
  EXPECT_EQ(qp.sq().wqe_index(), 0u);
  EXPECT_EQ(qp.sq().pi() % 65536, 0u);
  EXPECT_GT(qp.sq().pi(), before);
  EXPECT_EQ(qp.sq().ci(), qp.sq().pi());
}

TEST(QueuePair, ReceiveCompletionsCarryCookieLengthAndImmediate) {
  PlainQueues q(8, 8, 4);
  QueuePair qp;
  qp.init(q.desc, 1);
  const prm::Sge s{0x9000, 256, 0x77};
  ASSERT_TRUE(qp.rq().post({&s, 1}, 1001));
  ASSERT_TRUE(qp.rq().post({&s, 1}, 1002));
  qp.rq().ring_doorbell();
  EXPECT_EQ(__builtin_bswap32(q.dbrec[MLX5_RCV_DBR]), 2u);
  // The receive WQE bytes: one data segment.
  EXPECT_EQ(q.rq[2], 0x01);  // byte_count 256 -> 00 00 01 00
  EXPECT_EQ(q.rq[7], 0x77);
  prm::CqeFields f;
  f.opcode = MLX5_CQE_RESP_SEND_IMM;
  f.qpn = 0x42;
  f.byte_cnt = 100;
  f.imm_inval = 0xdeadbeef;
  prm::write_cqe(&q.cq[0], f, 0);
  f.opcode = MLX5_CQE_RESP_SEND_INV;
  f.imm_inval = 0x305;
  f.wqe_counter = 1;
  prm::write_cqe(&q.cq[1], f, 0);
  std::vector<Completion> got;
  EXPECT_EQ(qp.poll(8, [&](const Completion& c) { got.push_back(c); }), 2u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].recv);
  EXPECT_EQ(got[0].cookie, 1001u);
  EXPECT_EQ(got[0].byte_len, 100u);
  EXPECT_EQ(got[0].imm, 0xdeadbeefu);
  EXPECT_EQ(got[1].cookie, 1002u);
  EXPECT_EQ(got[1].cqe_opcode, MLX5_CQE_RESP_SEND_INV);
  EXPECT_EQ(got[1].imm, 0x305u) << "invalidated rkey";
}

}  // namespace

namespace {

// The two-callback poll: fast(cookie) may consume successful send WQEs (the window layer's own
// UMRs); everything it declines, every error and every receive still reaches on() — each WQE
// exactly once, in order — across wraps of a small ring.
TEST(QueuePair, FastPathConsumesAcceptedCookiesAndForwardsTheRest) {
  PlainQueues q(8, 8);
  QueuePair qp;
  qp.init(q.desc, 3);
  PlainDevice dev(q);
  uint64_t next = 1, expect = 1, fast_taken = 0, slow_seen = 0;
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3 && qp.sq().has_room(4); ++i) post_nop(qp, 1 + (round + i) % 4, next++);
    qp.sq().ring_doorbell();
    dev.process();
    qp.poll(
        64,
        [&](uint64_t cookie) noexcept {
          EXPECT_EQ(cookie, expect) << "fast path out of order";
          if (cookie % 2 == 0) return false;  // decline even cookies: on() must get them
          ++expect;
          ++fast_taken;
          return true;
        },
        [&](const Completion& c) {
          EXPECT_EQ(c.cookie, expect) << "slow path out of order or duplicated";
          EXPECT_EQ(c.cookie % 2, 0u) << "an accepted cookie reached on()";
          EXPECT_TRUE(c.ok());
          ++expect;
          ++slow_seen;
        });
  }
  EXPECT_EQ(expect, next) << "every WQE reported exactly once";
  EXPECT_EQ(fast_taken + slow_seen, next - 1);
  EXPECT_GT(fast_taken, 0u);
  EXPECT_GT(slow_seen, 0u);
  EXPECT_EQ(qp.sq().in_flight(), 0u);
}

TEST(QueuePair, FastPathNeverSeesErrors) {
  PlainQueues q(64, 64);
  QueuePair qp;
  qp.init(q.desc, 8);
  PlainDevice dev(q);
  dev.fail_at(2);
  for (int i = 1; i <= 5; ++i) post_nop(qp, 1, i);
  qp.sq().ring_doorbell();
  dev.process();
  std::vector<uint64_t> order, fast;
  std::vector<uint8_t> status;
  qp.poll(
      64,
      [&](uint64_t cookie) noexcept {
        fast.push_back(cookie);
        order.push_back(cookie);
        status.push_back(0);
        return true;
      },
      [&](const Completion& c) {
        order.push_back(c.cookie);
        status.push_back(c.status);
      });
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 4, 5})) << "each WQE once, in order";
  EXPECT_EQ(status,
            (std::vector<uint8_t>{0, 0, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
                                  MLX5_CQE_SYNDROME_WR_FLUSH_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR}));
  for (uint64_t c : fast) EXPECT_LT(c, 3u) << "the fast path saw a failed WQE";
}

// poll<true>: a CQE whose WQEs since the consumer were all posted through a Burst retires them
// without offering them to fast(); with a WQE committed otherwise among them, every WQE is
// walked and offered in order. Either way the completion count and the consumer end right.
TEST(QueuePair, QuietWqesRetireInOneStepUnlessALoudOneIsInFlight) {
  PlainQueues q(64, 64);
  QueuePair qp;
  qp.init(q.desc, 4);
  PlainDevice dev(q);
  std::mt19937 rng(7);
  uint64_t next = 1, posted = 0, loud_posted = 0, offered = 0, loud_offered = 0, last = 0;
  uint64_t quiet_only_rounds = 0;
  for (int round = 0; round < 400; ++round) {
    const bool all_quiet = round % 3 != 0;
    bool any_loud = false;
    for (int i = 0; i < 6; ++i) {
      const uint32_t ds = 1 + rng() % 8;
      if (!qp.sq().has_room(ds)) break;
      const uint64_t cookie = next;
      if ((all_quiet || rng() % 2) && post_quiet_nop(qp, q.sq, ds, cookie)) {
        ++next;
      } else {
        post_nop(qp, ds, cookie | (uint64_t{1} << 62));  // loud: marked in the cookie
        ++next;
        ++loud_posted;
        any_loud = true;
      }
      ++posted;
    }
    qp.sq().ring_doorbell();
    dev.process();
    const uint64_t offered_before = offered;
    qp.poll<true>(
        64,
        [&](uint64_t cookie) noexcept {
          const uint64_t n = cookie & ~(uint64_t{1} << 62);
          EXPECT_GT(n, last) << "offered out of order or twice";
          last = n;
          ++offered;
          loud_offered += cookie >> 62;
          return true;
        },
        [&](const Completion&) { ADD_FAILURE() << "a successful WQE reached on()"; });
    if (!any_loud && qp.sq().loud_end() <= qp.sq().ci()) {
      ++quiet_only_rounds;
      EXPECT_EQ(offered, offered_before) << "quiet WQEs offered one by one (round " << round << ")";
    }
    ASSERT_EQ(qp.sq().in_flight(), 0u) << "round " << round;
    ASSERT_EQ(qp.stats().completions, posted) << "round " << round;
  }
  EXPECT_EQ(loud_offered, loud_posted) << "every loud WQE offered exactly once";
  EXPECT_GT(quiet_only_rounds, 100u);
  EXPECT_GT(offered, loud_offered) << "quiet WQEs behind a loud one are walked too";
  EXPECT_EQ(qp.stats().bad_cqes, 0u);
}

// A CQE naming a slot inside a quiet WQE (device bug) is not taken for a WQE: the stale entry's
// number is behind the first WQE in flight, so the walk judges it (everything in flight
// completes, one bad CQE counted).
TEST(QueuePair, QuietRetireRefusesACqeNamingNoWqe) {
  PlainQueues q(8, 8);
  QueuePair qp;
  qp.init(q.desc, 8);
  PlainDevice dev(q);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(post_quiet_nop(qp, q.sq, 1, i + 1));  // a lap of 1s
  qp.sq().ring_doorbell();
  dev.process();
  uint64_t walked = 0;
  auto fast = [&](uint64_t) noexcept {
    ++walked;
    return true;
  };
  auto on = [](const Completion&) {};
  qp.poll<true>(8, fast, on);
  ASSERT_EQ(qp.sq().in_flight(), 0u);
  ASSERT_EQ(qp.stats().completions, 8u);
  ASSERT_EQ(walked, 0u) << "a lap of quiet WQEs retires without a walk";
  // Two WQEs of 2 WQEBBs (slots 0-1 and 2-3), and a CQE naming slot 1.
  ASSERT_TRUE(post_quiet_nop(qp, q.sq, 5, 9));
  ASSERT_TRUE(post_quiet_nop(qp, q.sq, 5, 10));
  prm::CqeFields f;
  f.opcode = MLX5_CQE_REQ;
  f.send_opcode = MLX5_OPCODE_NOP;
  f.qpn = 0x42;
  f.wqe_counter = static_cast<uint16_t>(qp.sq().ci() + 1);
  prm::write_cqe(&q.cq[dev.cqes() % 8], f, (dev.cqes() / 8) & 1);
  EXPECT_EQ(qp.poll<true>(8, fast, on), 1u);
  EXPECT_EQ(qp.stats().bad_cqes, 1u);
  EXPECT_EQ(walked, 2u) << "the walk offered both";
  EXPECT_EQ(qp.sq().in_flight(), 0u);
  EXPECT_EQ(qp.stats().completions, 10u);
}

}  // namespace
