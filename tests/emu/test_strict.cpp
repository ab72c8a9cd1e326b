// The PRM checker's rules on constrained fields: each planted violation fails the WQE the way the
// device does and names its rule, and the same WQE as rdmx's own builders write it passes.
// doc/guides/emu.md, "PRM rules".
#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

class Strict : public EmuModeTest {
 protected:
  void SetUp() override {}
  void setup(bool fatal = false) {
    Options o;
    o.checker_fatal = fatal;
    open(GetParam(), small_cfg(), 1, o);
    arena.alloc(*a_.dev, 4 * 4096, 1);
    dst.alloc(*b_.dev, 4 * 4096, 2);
    win = a_.dev->create_window_mkey(8, true).value();
  }
  // Byte `byte` of WQEBB `bb` of the WQE at `idx` in a's SQ.
  uint8_t& at(uint16_t idx, uint32_t bb, uint32_t byte) {
    auto* ring = static_cast<uint8_t*>(a_.desc.sq.buf);
    return ring[((idx + bb) & (a_.desc.sq.wqe_cnt - 1)) * 64 + byte];
  }
  uint16_t next_index() { return a_.qp.sq().wqe_index(); }
  void ring() { a_.qp.sq().ring_doorbell(); }
  // A one-page map of `mkey` over the arena, as the window layer builds it, posted unrung.
  uint16_t map(uint32_t mkey, bool signal = true) {
    const uint16_t idx = next_index();
    umr_map(a_, 1, mkey, arena.mr.lkey, {arena.addr(0)}, 4096, 4096, kAccRW, 0, 0, signal, false);
    return idx;
  }
  uint64_t count(Rule r) { return a_.dev->checker().count(r); }
  Buf arena, dst;
  uint32_t win = 0;
};

TEST_P(Strict, KlmListNotPaddedTo64BytesIsRefused) {
  setup();
  map(win);  // the window layer's map: one KLM padded to four
  ring();
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  expected_reports_a_ = 1;
  const uint16_t idx = map(win);
  at(idx, 0, 7) = 9;   // ds: ctrl + UMR ctrl + mkc + one KLM
  at(idx, 0, 21) = 1;  // klm_octowords 1
  ring();
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(count(Rule::kKlmListNotPadded), 1u);
}

TEST_P(Strict, ReservedFieldsAreRefused) {
  setup();
  struct Plant {
    bool umr;
    uint32_t byte;
    uint8_t value;
  } const plants[] = {
      {false, 0, 0x01},  // ctrl opmod
      {false, 9, 0x01},  // ctrl dci_stream_channel_id
      {true, 16, 0x81},  // UMR flags bit 0 (INLINE kept)
      {true, 18, 0x01},  // UMR ctrl byte 2
      {true, 33, 0x01},  // UMR ctrl byte 17 (offset 47:16) without TRANSLATION_OFFSET
      {true, 63, 0x01},  // UMR ctrl byte 47
  };
  expected_reports_a_ = std::size(plants);
  for (const Plant& p : plants) {
    uint16_t idx = next_index();
    if (p.umr)
      map(win);
    else
      rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, dst.addr(), dst.mr.rkey,
           {{arena.addr(), 64, arena.mr.lkey}}, 0, 0, false);
    at(idx, 0, p.byte) = p.value;
    ring();
    EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR) << "byte " << p.byte;
    reconnect();
    // The same WQE unplanted passes.
    idx = next_index();
    if (p.umr) {
      umr_inval(a_, 3, win);  // free it again first (the map above never ran)
      map(win);
    } else {
      rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, dst.addr(), dst.mr.rkey,
           {{arena.addr(), 64, arena.mr.lkey}});
    }
    ring();
    for (const auto& c : wait(a_, p.umr ? 2 : 1)) EXPECT_TRUE(c.ok()) << "byte " << p.byte;
  }
  EXPECT_EQ(count(Rule::kReservedField), std::size(plants));
}

TEST_P(Strict, TranslationOffsetMustBe64ByteAligned) {
  setup();
  expected_reports_a_ = 1;
  uint16_t idx = map(win);
  at(idx, 0, 16) |= MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET;
  at(idx, 0, 23) = 4;  // entries 4..7 of the 8-entry window: aligned
  ring();
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  const uint32_t w2 = a_.dev->create_window_mkey(8, true).value();
  idx = map(w2);
  at(idx, 0, 16) |= MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET;
  at(idx, 0, 23) = 2;
  ring();
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(count(Rule::kXltOffsetUnaligned), 1u);
}

class StrictRepeat : public Strict {
 protected:
  // rdmx's interleaved builder: two entries of 512 and 8 bytes, repeated 4 times.
  uint16_t interleaved(uint32_t mkey) {
    const uint16_t idx = next_index();
    const uint8_t f = fm(a_);
    const prm::RepeatEntry e[] = {{arena.addr(0), 512, 512, arena.mr.lkey},
                                  {arena.addr(4096), 8, 16, arena.mr.lkey}};
    post(
        a_, MLX5_OPCODE_UMR, 1,
        [&](prm::RingCursor& c, uint16_t i) {
          prm::UmrVerbsHead h;
          h.qpn = a_.desc.qpn;
          h.wqe_index = i;
          h.fm_ce_se = f;
          h.mkey = mkey;
          h.access = kAccRW;
          return prm::build_umr_interleaved(c, h, 4, e);
        },
        false);
    return idx;
  }
};

TEST_P(StrictRepeat, StrideBelowByteCountIsRefused) {
  setup();
  interleaved(win);
  ring();
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  expected_reports_a_ = 1;
  const uint32_t w2 = a_.dev->create_window_mkey(8, true).value();
  const uint16_t idx = interleaved(w2);
  at(idx, 2, 16) = 0x01;  // entry 0: stride 512 -> 256, below its 512 bytes
  at(idx, 2, 17) = 0x00;
  ring();
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(count(Rule::kRepeatStride), 1u);
}

TEST_P(StrictRepeat, HeaderUnderATranslationOffsetIsRefused) {
  setup();
  expected_reports_a_ = 1;
  const uint16_t idx = interleaved(win);
  at(idx, 0, 16) |= MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET;
  at(idx, 0, 23) = 4;
  ring();
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(count(Rule::kRepeatHeaderNotFirst), 1u);
}

TEST_P(Strict, WqeNamingAnotherQpIsRefused) {
  setup();
  expected_reports_a_ = 1;
  const uint16_t idx = next_index();
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{arena.addr(), 64, arena.mr.lkey}},
       0, 0, false);
  at(idx, 0, 6) ^= 1;  // qpn_ds: QPN low byte
  ring();
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(count(Rule::kWqeQpnMismatch), 1u);
  EXPECT_NE(0, std::memcmp(dst.p, arena.p, 64));  // nothing moved
}

TEST_P(Strict, MaskBit4AsDpdkRegexWritesItIsAccepted) {
  setup();
  const uint16_t idx = map(win);
  at(idx, 0, 31) |= 0x10;  // mkey_mask bit 4 (DPDK regex ORs the flag constant into it)
  ring();
  EXPECT_TRUE(wait(a_, 1)[0].ok());
}

TEST_P(Strict, KlmEntryNamingAWindowTranslatesThroughIt) {
  setup();
  // w0 maps arena pages 1..2; w1's one KLM names w0 (as the kernel's integrity MR names its KLM
  // pi_mr); a WRITE gathers through w1.
  umr_map(a_, 1, win, arena.mr.lkey, {arena.addr(4096), arena.addr(8192)}, 4096, 8192, kAccRW, 0, 0,
          false, false);
  const uint32_t w1 = a_.dev->create_window_mkey(4, true).value();
  umr_map(a_, 2, w1, win, {4096}, 4096, 4096, kAccRW, 0, 0, false, false);  // bytes 4096.. of w0
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 3, dst.addr(), dst.mr.rkey, {{0, 4096, w1}});
  for (const auto& c : wait(a_, 3)) ASSERT_TRUE(c.ok()) << c.cookie;  // two covered maps
  EXPECT_EQ(0, std::memcmp(dst.p, arena.p + 8192, 4096));
  // A window that names itself ends at the depth bound: the gather fails, nothing hangs.
  const uint32_t w2 = a_.dev->create_window_mkey(4, true).value();
  umr_map(a_, 4, w2, w2, {0}, 4096, 4096, kAccRW, 0, 0, false, false);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 5, dst.addr(), dst.mr.rkey, {{0, 64, w2}});
  const auto c = wait(a_, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

class StrictMw : public Strict {
 protected:
  void setup_mw() {
    setup();
    mr.alloc(*a_.dev, 2 * 4096, 7, mlx5::kAccessAll | mlx5::kAccessMwBind);
    mw = a_.dev->alloc_mw(0).value();
  }
  // A type-2 bind as rdmx's builder writes it (rdma-core's set_bind_wr form), posted unrung.
  uint16_t bind() {
    const uint16_t idx = next_index();
    post_bind_mw(a_, 1, mw, mw, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ, mr.addr(), 4096,
                 mr.mr.lkey, 0, false);
    return idx;
  }
  Buf mr;
  uint32_t mw = 0;
};

TEST_P(StrictMw, BindOfABoundWindowIsRefusedWithoutTheCheckFreeFlag) {
  setup_mw();
  bind();
  ring();
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  expected_reports_a_ = 1;
  const uint16_t idx = bind();
  at(idx, 0, 16) &= static_cast<uint8_t>(~prm::kUmrFlagFailIfNotFree);
  ring();
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_MW_BIND_ERR);
  EXPECT_EQ(count(Rule::kMwBindRefused), 1u);
}

TEST_P(StrictMw, BindWithoutTranslationIsRefused) {
  setup_mw();
  expected_reports_a_ = 1;
  const uint16_t idx = bind();
  at(idx, 0, 7) = 8;   // ds: no KLM
  at(idx, 0, 21) = 0;  // klm_octowords 0; the window would keep whatever translation it had
  ring();
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_MW_BIND_ERR);
  EXPECT_EQ(count(Rule::kMwBindRefused), 1u);
  EXPECT_TRUE(a_.dev->inspect_mkey(mw).free);
}

class StrictFence : public Strict {
 protected:
  // map(win) | WRITE gathering 64 bytes through win | invalidate of win with `fence`, one doorbell.
  void write_then_invalidate(uint8_t fence, uint16_t* inv_idx) {
    map(win, false);
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, dst.addr(), dst.mr.rkey, {{0, 64, win}}, 0, 0, false);
    *inv_idx = next_index();
    const uint8_t f = fm(a_, true, fence);
    post(
        a_, MLX5_OPCODE_UMR, 3,
        [&](prm::RingCursor& c, uint16_t i) {
          return prm::build_umr_invalidate(c, a_.desc.qpn, i, f, win, 0);
        },
        false);
    ring();
  }
};

TEST_P(StrictFence, InvalidateWithoutStrongFenceBehindAGatherIsNamed) {
  setup();
  expected_reports_a_ = 1;
  uint16_t inv = 0;
  write_then_invalidate(0, &inv);
  auto c = wait(a_, 3);  // the map (covered), the WRITE, the invalidate
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);  // the gather found the window free
  EXPECT_EQ(c[2].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  ASSERT_EQ(count(Rule::kMissingFenceBeforeInvalidate), 1u);
  const auto r = a_.dev->checker().reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wqe_index, inv);  // the invalidate is named, not the WRITE
}

TEST_P(StrictFence, FatalFailsTheInvalidateAndTheWriteCompletes) {
  setup(true);
  expected_reports_a_ = 1;
  uint16_t inv = 0;
  write_then_invalidate(prm::kFenceSmallAndFence, &inv);  // waits for READs only
  auto c = wait(a_, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_TRUE(c[1].ok());
  EXPECT_EQ(c[2].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  EXPECT_EQ(c[2].cookie, 3u);  // the invalidate
  const auto r = a_.dev->checker().reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wqe_index, inv);
  EXPECT_EQ(0, std::memcmp(dst.p, arena.p, 64));
}

TEST_P(StrictFence, StrongOrderingIsNotFlagged) {
  setup();
  uint16_t inv = 0;
  write_then_invalidate(prm::kFenceStrongOrdering, &inv);  // what the window layer posts
  for (const auto& x : wait(a_, 3)) EXPECT_TRUE(x.ok()) << x.cookie;
  EXPECT_EQ(0, std::memcmp(dst.p, arena.p, 64));
}

INSTANTIATE_TEST_SUITE_P(Emu, Strict, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);
INSTANTIATE_TEST_SUITE_P(Emu, StrictRepeat, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);
INSTANTIATE_TEST_SUITE_P(Emu, StrictMw, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);
INSTANTIATE_TEST_SUITE_P(Emu, StrictFence, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);

}  // namespace
}  // namespace rdmx::emu::test
