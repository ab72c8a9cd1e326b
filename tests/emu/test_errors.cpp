// One test per CQE syndrome, provoked the way real traffic would, plus flush semantics and
// recovery through RESET.
#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

class Syndromes : public EmuModeTest {
 protected:
  // A request the responder drops (its QP gone) is found by the requester link's retransmission
  // timer, in threaded mode after timeout x (retry_cnt + 1) of wall time: 4.2 ms, not rdma_cm's
  // 1.07 s, so that the test takes 34 ms. Inline mode fires the timers of a stalled exchange at
  // once (RoceLink::fire_stalled).
  void SetUp() override {
    Options o;
    o.timers.timeout = 10;
    open(GetParam(), small_cfg(), 1, o);
  }
  mlx5::QpState state(Side& s) { return s.dev->query_qp(s.desc.qpn).value(); }
};

TEST_P(Syndromes, LocalLengthAtResponderRemoteInvalidRequestAtRequester) {
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 1);
  dst.alloc(*b_.dev, 4096, 2);
  recv(b_, 1, {{dst.addr(), 100, dst.mr.lkey}});
  send(a_, MLX5_OPCODE_SEND, 2, {{src.addr(), 101, src.mr.lkey}});
  auto ca = wait(a_, 1);
  auto cb = wait(b_, 1);
  EXPECT_EQ(cb[0].status, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
  EXPECT_EQ(cb[0].cookie, 1u);
  EXPECT_EQ(ca[0].status, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
  EXPECT_EQ(state(a_), mlx5::QpState::kError);
  EXPECT_EQ(state(b_), mlx5::QpState::kError);
}

TEST_P(Syndromes, LocalQpOperationOnGarbageWqe) {
  expected_reports_a_ = 1;  // malformed-wqe
  post(a_, 0x77, 5, [&](prm::RingCursor& c, uint16_t idx) {
    prm::set_ctrl(c.take<mlx5_wqe_ctrl_seg>(), idx, 0x77, 0, a_.desc.qpn, 1,
                  MLX5_WQE_CTRL_CQ_UPDATE, Be32{});
    return 1u;
  });
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(c[0].cookie, 5u);
  EXPECT_EQ(a_.dev->checker().count(Rule::kMalformedWqe), 1u);
  EXPECT_EQ(state(a_), mlx5::QpState::kError);
}

TEST_P(Syndromes, LocalProtectionOnWrongKeyVariant) {
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 3);
  dst.alloc(*b_.dev, 4096, 4);
  const uint32_t stale = src.mr.lkey ^ 0x01;  // same index, other variant
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{src.addr(), 64, stale}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  // RDMA READ into memory without local write.
  EXPECT_EQ(state(a_), mlx5::QpState::kError);
}

TEST_P(Syndromes, LocalProtectionOnReadIntoReadOnlyMr) {
  Buf ro, remote;
  ro.alloc(*a_.dev, 4096, 5, mlx5::kAccessRemoteRead);  // no local write
  remote.alloc(*b_.dev, 4096, 6);
  rdma(a_, MLX5_OPCODE_RDMA_READ, 1, remote.addr(), remote.mr.rkey, {{ro.addr(), 64, ro.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_P(Syndromes, FlushEveryOutstandingAndNewWqeOneCqeEach) {
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 7);
  dst.alloc(*b_.dev, 4096, 8);
  recv(a_, 50, {{src.addr(), 64, src.mr.lkey}});
  recv(a_, 51, {{src.addr(), 64, src.mr.lkey}});
  // An error, then four WQEs (two unsignaled) behind it in the same doorbell.
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey ^ 0x80,
       {{src.addr(), 8, src.mr.lkey}}, 0, 0, false);
  for (int i = 2; i <= 5; ++i)
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, uint64_t(i), dst.addr(), dst.mr.rkey,
         {{src.addr(), 8, src.mr.lkey}}, 0, 0, i == 5, i % 2 == 0);
  auto c = wait(a_, 7);
  ASSERT_EQ(c.size(), 7u);
  size_t sends = 0, recvs = 0;
  for (const auto& x : c) {
    if (x.recv) {
      EXPECT_EQ(x.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
      EXPECT_EQ(x.cookie, 50 + recvs++);
    } else {
      ++sends;
      EXPECT_EQ(x.cookie, sends);
      EXPECT_EQ(x.status,
                sends == 1 ? MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR : MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
      EXPECT_TRUE(x.signaled) << "every flushed WQE gets its own CQE";
    }
  }
  EXPECT_EQ(a_.qp.stats().bad_cqes, 0u);
  // Newly posted WQEs and receives flush too.
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 9, dst.addr(), dst.mr.rkey, {{src.addr(), 8, src.mr.lkey}});
  recv(a_, 52, {{src.addr(), 64, src.mr.lkey}});
  c = wait(a_, 2);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  // Recovery: RESET on both sides (the CPU side resets its rings), reconnect, traffic works.
  ASSERT_TRUE(a_.dev->modify_qp(a_.desc.qpn, mlx5::QpState::kReset).ok());
  ASSERT_TRUE(b_.dev->modify_qp(b_.desc.qpn, mlx5::QpState::kReset).ok());
  a_.qp.reset();
  b_.qp.reset();
  ASSERT_TRUE(mlx5::connect_qps(*a_.dev, a_.desc.qpn, *b_.dev, b_.desc.qpn).ok());
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 10, dst.addr(100), dst.mr.rkey, {{src.addr(), 8, src.mr.lkey}});
  c = wait(a_, 1);
  EXPECT_TRUE(c[0].ok());
  EXPECT_EQ(c[0].cookie, 10u);
  EXPECT_EQ(0, std::memcmp(dst.p + 100, src.p, 8));
}

TEST_P(Syndromes, MwBindOnCheckFreeOfValidWindow) {
  expected_reports_b_ = 1;  // umr-on-non-free-mkey
  Buf arena;
  arena.alloc(*b_.dev, 4096, 9);
  const uint32_t win = b_.dev->create_window_mkey(4, false).value();
  umr_map(b_, 1, win, arena.mr.lkey, {arena.addr()}, 4096, 4096, kAccRW, 0,
          prm::kUmrFlagFailIfNotFree);
  EXPECT_TRUE(wait(b_, 1)[0].ok());  // free at first: passes
  umr_map(b_, 2, win, arena.mr.lkey, {arena.addr()}, 4096, 4096, kAccRW, 0,
          prm::kUmrFlagFailIfNotFree);
  auto c = wait(b_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_MW_BIND_ERR);
  EXPECT_EQ(b_.dev->checker().count(Rule::kUmrNotFree), 1u);
}

// A repeat block (interleaved layout) whose entries do not add up to its block size, or that
// claims more entries than the UMR carries, is refused as malformed (LOCAL_QP_OP) and leaves
// the mkey free; a well-formed one maps.
TEST_P(Syndromes, MalformedRepeatBlockIsLocalQpOp) {
  expected_reports_b_ = 2;  // malformed-wqe, twice
  Buf arena;
  arena.alloc(*b_.dev, 8192, 10);
  const uint32_t win = b_.dev->create_window_mkey(8, false).value();
  const prm::RepeatEntry e[2] = {{arena.addr(), 512, 512, arena.mr.lkey},
                                 {arena.addr() + 4096, 8, 8, arena.mr.lkey}};
  // corrupt: 0 = none, 1 = block size off by one, 2 = num_ent 4 (the UMR carries 3 slots)
  auto umr = [&](uint64_t cookie, uint32_t key, int corrupt) {
    post(b_, MLX5_OPCODE_UMR, cookie, [&](prm::RingCursor& c, uint16_t idx) {
      uint8_t* start = c.here();
      const uint32_t ds = prm::build_umr_interleaved(
          c, prm::UmrVerbsHead{b_.desc.qpn, idx, fm(b_), win | key, 0x0c}, 4, e);
      uint8_t* rb = start + 128;  // ctrl 16 + UMR ctrl 48 + mkey context 64
      if (corrupt == 1) rb[3] = static_cast<uint8_t>(rb[3] + 1);
      if (corrupt == 2) rb[15] = 4;
      return ds;
    });
  };
  auto recover_b = [&] {
    if (!a_.dev->modify_qp(a_.desc.qpn, mlx5::QpState::kReset).ok() ||
        !b_.dev->modify_qp(b_.desc.qpn, mlx5::QpState::kReset).ok())
      return false;
    a_.qp.reset();
    b_.qp.reset();
    return mlx5::connect_qps(*a_.dev, a_.desc.qpn, *b_.dev, b_.desc.qpn).ok();
  };
  umr(1, 1, 1);
  EXPECT_EQ(wait(b_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_TRUE(b_.dev->inspect_mkey(win | 1).free);
  ASSERT_TRUE(recover_b());
  umr(2, 2, 2);
  EXPECT_EQ(wait(b_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(b_.dev->checker().count(Rule::kMalformedWqe), 2u);
  ASSERT_TRUE(recover_b());
  umr(3, 3, 0);
  EXPECT_TRUE(wait(b_, 1)[0].ok());
  const auto v = b_.dev->inspect_mkey(win | 3);
  EXPECT_FALSE(v.free);
  EXPECT_EQ(v.len, 4u * 520);
}

// A type-2 memory window (an indirect mkey bound by rdma-core's bind_mw UMR): usable only by
// requests arriving on the QP it was bound to; another QP of the same PD gets a remote access
// error and no byte moves. LOCAL_INV from another QP (CHECK_QPN) is refused; from the bound QP
// it frees the window; a new bind (CHECK_FREE) with the next key works and the old rkey is dead.
TEST_P(Syndromes, Type2WindowIsBoundToItsQp) {
  expected_reports_b_ = 0;
  Buf mem, src;
  mem.alloc(*b_.dev, 8192, 11, mlx5::kAccessAll | mlx5::kAccessMwBind);
  src.alloc(*a_.dev, 8192, 12);
  const std::vector<uint8_t> before(mem.p, mem.p + 8192);
  const uint32_t mw = b_.dev->alloc_mw(0).value();  // ibv_alloc_mw(TYPE_2)
  // A second connected pair between the same devices (same PDs).
  Side a2, b2;
  for (Side* s : {&a2, &b2}) {
    s->dev = s == &a2 ? a_.dev : b_.dev;
    auto d = s->dev->create_qp(small_cfg());
    ASSERT_TRUE(d.ok());
    s->desc = d.value();
    s->qp.init(s->desc, 1);
  }
  ASSERT_TRUE(mlx5::connect_qps(*a2.dev, a2.desc.qpn, *b2.dev, b2.desc.qpn).ok());
  post_bind_mw(b_, 1, mw, mw | 1,
               MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
                   MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE,
               mem.addr(4096), 4096, mem.mr.lkey);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  const uint32_t rkey = mw | 1;
  // Through the bound QP (b_, reached from a_): the WRITE lands at the bound address.
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, mem.addr(4096 + 8), rkey, {{src.addr(), 64, src.mr.lkey}});
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  EXPECT_EQ(std::memcmp(mem.p + 4096 + 8, src.p, 64), 0);
  std::memcpy(const_cast<uint8_t*>(before.data()) + 4096 + 8, src.p, 64);
  // Through the other QP (b2, reached from a2): refused, nothing written or read.
  rdma(a2, MLX5_OPCODE_RDMA_WRITE, 3, mem.addr(4096), rkey, {{src.addr(100), 64, src.mr.lkey}});
  EXPECT_EQ(wait(a2, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(std::memcmp(mem.p, before.data(), 8192), 0);
  EXPECT_GE(b_.dev->stats().qp_binding_refusals, 1u);
  // Class C at b2's responder: b2 is in error; back through RESET to RTS with a2.
  expect_responder_error(b2, mlx5::AsyncEventKind::kQpAccessErr);
  for (Side* s : {&a2, &b2}) {
    ASSERT_TRUE(s->dev->modify_qp(s->desc.qpn, mlx5::QpState::kReset).ok());
    s->qp.reset();
  }
  ASSERT_TRUE(mlx5::connect_qps(*a2.dev, a2.desc.qpn, *b2.dev, b2.desc.qpn).ok());
  // LOCAL_INV from the other QP: CHECK_QPN refuses it (MW_BIND_ERR), the window stays bound.
  post(b2, MLX5_OPCODE_UMR, 4, [&](prm::RingCursor& c, uint16_t idx) {
    return prm::build_local_inv(c, b2.desc.qpn, idx, fm(b2), rkey);
  });
  EXPECT_EQ(wait(b2, 1)[0].status, MLX5_CQE_SYNDROME_MW_BIND_ERR);
  EXPECT_FALSE(b_.dev->inspect_mkey(rkey).free);
  // From the bound QP: freed; the rkey is dead even on the bound QP.
  post(b_, MLX5_OPCODE_UMR, 5, [&](prm::RingCursor& c, uint16_t idx) {
    return prm::build_local_inv(c, b_.desc.qpn, idx, fm(b_), rkey);
  });
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  EXPECT_TRUE(b_.dev->inspect_mkey(mw).free);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 6, mem.addr(4096), rkey, {{src.addr(200), 64, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(std::memcmp(mem.p, before.data(), 8192), 0);
}

// The rules a type-2 window bind is held to (emu's umr_check_bind): each broken rule completes
// the bind with MW_BIND_ERR, reports mw-bind-refused, and leaves the window free and unusable.
TEST_P(Syndromes, MemoryWindowBindRules) {
  Buf plain, ro, mem, src;
  plain.alloc(*b_.dev, 8192, 21);                                              // no MW_BIND
  ro.alloc(*b_.dev, 8192, 22, mlx5::kAccessRemoteRead | mlx5::kAccessMwBind);  // no local write
  mem.alloc(*b_.dev, 8192, 23, mlx5::kAccessLocalWrite | mlx5::kAccessMwBind);
  src.alloc(*a_.dev, 64, 24);
  const uint32_t mw = b_.dev->alloc_mw(0).value();
  const uint8_t rw = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
                     MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
  struct Case {
    const char* what;
    const Buf* mr;
    uint64_t off, len;
    uint8_t access;
    uint32_t qpn_delta;
  } const cases[] = {
      {"MR without MW_BIND", &plain, 0, 4096, rw, 0},
      {"remote write over an MR without local write", &ro, 0, 4096, rw, 0},
      {"range past the MR", &mem, 4096, 8192, rw, 0},
      {"bound to another QP", &mem, 0, 4096, rw, 1},
  };
  uint64_t cookie = 1;
  for (const Case& k : cases) {
    b_.dev->checker().clear();
    post_bind_mw(b_, cookie++, mw, mw | 5, k.access, k.mr->addr(k.off), k.len, k.mr->mr.lkey,
                 k.qpn_delta);
    EXPECT_EQ(wait(b_, 1)[0].status, MLX5_CQE_SYNDROME_MW_BIND_ERR) << k.what;
    EXPECT_EQ(b_.dev->checker().count(emu::Rule::kMwBindRefused), 1u) << k.what;
    EXPECT_TRUE(b_.dev->inspect_mkey(mw).free) << k.what;
    reconnect();
  }
  b_.dev->checker().clear();
  // The same bind over the MR with MW_BIND and local write is accepted, and works.
  post_bind_mw(b_, cookie++, mw, mw | 6, rw, mem.addr(), 4096, mem.mr.lkey);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, cookie++, mem.addr(64), mw | 6, {{src.addr(), 64, src.mr.lkey}});
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  EXPECT_EQ(std::memcmp(mem.p + 64, src.p, 64), 0);
  expected_reports_b_ = 0;
}

TEST_P(Syndromes, BadResponse) {
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 10);
  dst.alloc(*b_.dev, 4096, 11);
  ASSERT_TRUE(a_.dev->faults().corrupt_next_response(a_.desc.qpn).ok());
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{src.addr(), 8, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_BAD_RESP_ERR);
}

TEST_P(Syndromes, LocalAccessAtResponderOfWriteImmWithBadRkey) {
  Buf src, dst, rb;
  src.alloc(*a_.dev, 4096, 12);
  dst.alloc(*b_.dev, 4096, 13);
  rb.alloc(*b_.dev, 64, 14);
  recv(b_, 3, {{rb.addr(), 64, rb.mr.lkey}});
  rdma(a_, MLX5_OPCODE_RDMA_WRITE_IMM, 1, dst.addr(4000), dst.mr.rkey,
       {{src.addr(), 200, src.mr.lkey}}, 7);
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  auto cb = wait(b_, 1);
  EXPECT_EQ(cb[0].status, MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
  EXPECT_EQ(cb[0].cookie, 3u);
}

TEST_P(Syndromes, RemoteAccessPastMrEndAndWithoutRight) {
  Buf src, dst, ro;
  src.alloc(*a_.dev, 4096, 15);
  dst.alloc(*b_.dev, 4096, 16);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(4090), dst.mr.rkey, {{src.addr(), 7, src.mr.lkey}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(0, std::memcmp(dst.p, random_bytes(4096, 16).data(), 4096)) << "no byte written";
}

TEST_P(Syndromes, RemoteOperationWhenReceiveBufferKeyIsBad) {
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 17);
  dst.alloc(*b_.dev, 4096, 18);
  recv(b_, 4, {{dst.addr(), 100, dst.mr.lkey + 0x100}});  // an index that is not registered
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(), 10, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
  EXPECT_EQ(wait(b_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_P(Syndromes, TransportRetryExceededWhenPeerQpIsGone) {
  Buf src;
  src.alloc(*a_.dev, 4096, 19);
  ASSERT_TRUE(b_.dev->destroy_qp(b_.desc.qpn).ok());
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, 0x1000, 0x1234, {{src.addr(), 10, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  EXPECT_GE(a_.dev->stats().retries, 7u);
  // The link's own account, reported on this wire as on RoCE: the first send and retry_cnt (7)
  // resends of the one packet, each followed by a timeout.
  const EmuStats::Roce r = a_.dev->stats().roce;
  EXPECT_EQ(r.timeouts, 8u);
  EXPECT_EQ(r.retransmits, 7u);
  EXPECT_EQ(r.tx_packets, 8u);
}

TEST_P(Syndromes, RnrRetryExceededWithoutReceive) {
  Buf src;
  src.alloc(*a_.dev, 4096, 20);
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(), 10, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
  EXPECT_GE(b_.dev->stats().rnr_naks, 8u);
}

TEST_P(Syndromes, SendWithInvalidateOfNonInvalidatableKey) {
  Buf src, dst, arena;
  src.alloc(*a_.dev, 4096, 21);
  dst.alloc(*b_.dev, 4096, 22);
  arena.alloc(*b_.dev, 4096, 23);
  const uint32_t win = b_.dev->create_window_mkey(4, false).value();  // no remote invalidate
  umr_map(b_, 1, win, arena.mr.lkey, {arena.addr()}, 4096, 4096, kAccRW);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  recv(b_, 2, {{dst.addr(), 100, dst.mr.lkey}});
  send(a_, MLX5_OPCODE_SEND_INVAL, 1, {{src.addr(), 10, src.mr.lkey}}, win);
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
  EXPECT_EQ(wait(b_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  EXPECT_FALSE(b_.dev->inspect_mkey(win).free);
}

INSTANTIATE_TEST_SUITE_P(Emu, Syndromes, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);

// In threaded mode a receive posted shortly after the SEND is found by an RNR retry.
TEST_F(EmuTest, RnrRetrySucceedsWhenReceiveArrivesInTime) {
  Options o;
  o.rnr_timer_us = 2000;
  open(Mode::kThreaded, small_cfg(), 1, o);
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 24);
  dst.alloc(*b_.dev, 4096, 25);
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(), 100, src.mr.lkey}});
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  recv(b_, 2, {{dst.addr(), 100, dst.mr.lkey}});
  EXPECT_TRUE(wait(a_, 1)[0].ok());
  EXPECT_TRUE(wait(b_, 1)[0].ok());
  EXPECT_EQ(0, std::memcmp(dst.p, src.p, 100));
}

// The link keeps no copy of what it sent: a retransmission gathers the payload from memory
// again, as an mlx5 requester re-reads the WQE of the PSN it goes back to (IBTA vol. 1 9.7.5;
// rxe_req.c req_retry). A two-packet SEND refused with an RNR NAK is sent again after its
// source buffer changed: the receiver gets the new bytes. The devices run only when the test
// calls progress().
TEST_F(EmuTest, ARetransmissionGathersTheSourceAgain) {
  Options o;
  o.start_thread = false;
  o.rnr_timer_us = 1000;
  open(Mode::kThreaded, small_cfg(), 1, o);
  constexpr uint32_t kLen = 6000;
  Buf src, dst;
  src.alloc(*a_.dev, 8192, 41);
  dst.alloc(*b_.dev, 8192, 42);
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(), kLen, src.mr.lkey}});
  for (int i = 0; i < 4; ++i) {
    a_.dev->progress();
    b_.dev->progress();
  }
  ASSERT_GE(b_.dev->stats().rnr_naks, 1u);  // sent once, refused: no receive posted
  ASSERT_EQ(a_.dev->stats().roce.retransmits, 0u);
  for (uint32_t i = 0; i < kLen; ++i) src.p[i] ^= 0x5A;
  recv(b_, 2, {{dst.addr(), 8192, dst.mr.lkey}});
  std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the RNR timer
  for (int i = 0; i < 8; ++i) {
    a_.dev->progress();
    b_.dev->progress();
  }
  auto ca = wait(a_, 1, 100);
  ASSERT_EQ(ca.size(), 1u);
  EXPECT_TRUE(ca[0].ok()) << int(ca[0].status);
  auto cb = wait(b_, 1, 100);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_EQ(cb[0].byte_len, kLen);
  EXPECT_EQ(a_.dev->stats().roce.retransmits, 2u);
  EXPECT_EQ(a_.dev->stats().roce.regather_fails, 0u);
  EXPECT_EQ(0, std::memcmp(dst.p, src.p, kLen)) << "the retransmission carried the old bytes";
}

// A QP moved to error and connected again without RESET (endpoint::recover_cores: drained,
// then connected) before its device ran again: the messages its engine had queued for the link
// when the old connection's window was full belong to that connection. Its WQEs were flushed,
// so none of them may execute on the peer under the new connection; a WRITE posted after the
// reconnect lands, and only it. The devices run only when the test calls progress().
TEST_F(EmuTest, AReconnectDiscardsWhatTheOldConnectionQueued) {
  Options o;
  o.start_thread = false;
  open(Mode::kThreaded, small_cfg(), 1, o);
  constexpr size_t kMsg = 64 * 1024, kStale = 8;  // 8 x 16 packets: twice the link's window
  Buf src, dst;
  src.alloc(*a_.dev, (kStale + 1) * kMsg, 31);
  dst.alloc(*b_.dev, (kStale + 1) * kMsg, 32);
  const std::vector<uint8_t> before(dst.p, dst.p + dst.len);
  for (size_t i = 0; i < kStale; ++i)
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, i, dst.addr(i * kMsg), dst.mr.rkey,
         {{src.addr(i * kMsg), static_cast<uint32_t>(kMsg), src.mr.lkey}});
  // A sends what its window takes and queues the rest for its link; B does not run.
  for (int i = 0; i < 4; ++i) a_.dev->progress();
  ASSERT_TRUE(a_.dev->modify_qp(a_.desc.qpn, mlx5::QpState::kError).ok());
  for (const Completion& c : wait(a_, kStale)) EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  ASSERT_TRUE(mlx5::connect_qps(*a_.dev, a_.desc.qpn, *b_.dev, b_.desc.qpn).ok());
  a_.qp.reset();
  b_.qp.reset();
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 99, dst.addr(kStale * kMsg), dst.mr.rkey,
       {{src.addr(kStale * kMsg), static_cast<uint32_t>(kMsg), src.mr.lkey}});
  std::vector<Completion> done;
  for (int i = 0; i < 10000 && done.empty(); ++i) {
    a_.dev->progress();
    b_.dev->progress();
    a_.qp.poll(16, [&](const Completion& c) { done.push_back(c); });
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].cookie, 99u);
  EXPECT_TRUE(done[0].ok()) << int(done[0].status);
  EXPECT_EQ(0, std::memcmp(dst.p + kStale * kMsg, src.p + kStale * kMsg, kMsg));
  for (size_t i = 0; i < kStale; ++i)
    EXPECT_EQ(0, std::memcmp(dst.p + i * kMsg, before.data() + i * kMsg, kMsg))
        << "flushed WRITE " << i << " executed on the new connection";
}

}  // namespace
}  // namespace rdmx::emu::test
