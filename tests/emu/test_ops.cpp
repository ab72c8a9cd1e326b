// Functional tests of every operation over the emulated device, inline and threaded, with
// byte-exact checks on random buffers.
#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

class Ops : public EmuModeTest {};

TEST_P(Ops, RdmaWriteMultiSgeAcrossPackets) {
  open(GetParam());
  Buf src, dst;
  src.alloc(*a_.dev, 3 * 4096 + 100, 1);
  dst.alloc(*b_.dev, 4 * 4096, 2);
  const auto before = std::vector<uint8_t>(dst.p, dst.p + dst.len);
  // Two SGEs: [10, 10+5000) and [6000, 6000+3000) -> remote offset 77.
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 42, dst.addr(77), dst.mr.rkey,
       {{src.addr(10), 5000, src.mr.lkey}, {src.addr(6000), 3000, src.mr.lkey}});
  auto c = wait(a_, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].ok()) << int(c[0].status);
  EXPECT_EQ(c[0].cookie, 42u);
  EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
  std::vector<uint8_t> expect = before;
  std::memcpy(expect.data() + 77, src.p + 10, 5000);
  std::memcpy(expect.data() + 77 + 5000, src.p + 6000, 3000);
  EXPECT_EQ(0, std::memcmp(expect.data(), dst.p, dst.len));
}

TEST_P(Ops, RdmaReadByteExact) {
  open(GetParam());
  Buf local, remote;
  local.alloc(*a_.dev, 20000, 3);
  remote.alloc(*b_.dev, 20000, 4);
  rdma(a_, MLX5_OPCODE_RDMA_READ, 7, remote.addr(123), remote.mr.rkey,
       {{local.addr(0), 9000, local.mr.lkey}, {local.addr(10000), 4000, local.mr.lkey}});
  auto c = wait(a_, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].ok()) << int(c[0].status);
  EXPECT_EQ(c[0].byte_len, 13000u);
  EXPECT_EQ(0, std::memcmp(local.p, remote.p + 123, 9000));
  EXPECT_EQ(0, std::memcmp(local.p + 10000, remote.p + 123 + 9000, 4000));
}

TEST_P(Ops, SendRecvImmAndSolicited) {
  open(GetParam());
  Buf src, dst;
  src.alloc(*a_.dev, 10000, 5);
  dst.alloc(*b_.dev, 10000, 6);
  recv(b_, 100, {{dst.addr(0), 3000, dst.mr.lkey}, {dst.addr(5000), 5000, dst.mr.lkey}});
  recv(b_, 101, {{dst.addr(0), 64, dst.mr.lkey}});
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(1), 7000, src.mr.lkey}});
  auto ca = wait(a_, 1);
  auto cb = wait(b_, 1);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_TRUE(ca[0].ok());
  EXPECT_TRUE(cb[0].ok());
  EXPECT_TRUE(cb[0].recv);
  EXPECT_EQ(cb[0].cookie, 100u);
  EXPECT_EQ(cb[0].byte_len, 7000u);
  EXPECT_EQ(cb[0].cqe_opcode, MLX5_CQE_RESP_SEND);
  EXPECT_EQ(0, std::memcmp(dst.p, src.p + 1, 3000));
  EXPECT_EQ(0, std::memcmp(dst.p + 5000, src.p + 1 + 3000, 4000));

  send(a_, MLX5_OPCODE_SEND_IMM, 2, {{src.addr(0), 16, src.mr.lkey}}, 0xabcdef01, 0, true);
  ca = wait(a_, 1);
  cb = wait(b_, 1);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_EQ(cb[0].cookie, 101u);
  EXPECT_EQ(cb[0].cqe_opcode, MLX5_CQE_RESP_SEND_IMM);
  EXPECT_EQ(cb[0].imm, 0xabcdef01u);
  EXPECT_EQ(0, std::memcmp(dst.p, src.p, 16));
}

TEST_P(Ops, InlineSendAndWrite) {
  open(GetParam());
  Buf dst;
  dst.alloc(*b_.dev, 4096, 7);
  auto data = random_bytes(150, 8);
  recv(b_, 9, {{dst.addr(1000), 1000, dst.mr.lkey}});
  const uint8_t f = fm(a_);
  post(a_, MLX5_OPCODE_SEND, 1, [&](prm::RingCursor& c, uint16_t idx) {
    return prm::build_inline(c, MLX5_OPCODE_SEND, a_.desc.qpn, idx, f, 0, 0, data.data(), 150,
                             Be32{});
  });
  const uint8_t f2 = fm(a_);
  post(a_, MLX5_OPCODE_RDMA_WRITE, 2, [&](prm::RingCursor& c, uint16_t idx) {
    return prm::build_inline(c, MLX5_OPCODE_RDMA_WRITE, a_.desc.qpn, idx, f2, dst.addr(3),
                             dst.mr.rkey, data.data(), 100, Be32{});
  });
  auto ca = wait(a_, 2);
  auto cb = wait(b_, 1);
  EXPECT_TRUE(ca[0].ok() && ca[1].ok());
  EXPECT_EQ(cb[0].byte_len, 150u);
  EXPECT_EQ(0, std::memcmp(dst.p + 1000, data.data(), 150));
  EXPECT_EQ(0, std::memcmp(dst.p + 3, data.data(), 100));
}

TEST_P(Ops, WriteWithImmConsumesReceive) {
  open(GetParam());
  Buf src, dst, rbuf;
  src.alloc(*a_.dev, 8192, 9);
  dst.alloc(*b_.dev, 8192, 10);
  rbuf.alloc(*b_.dev, 64, 11);
  recv(b_, 55, {{rbuf.addr(), 64, rbuf.mr.lkey}});
  rdma(a_, MLX5_OPCODE_RDMA_WRITE_IMM, 3, dst.addr(0), dst.mr.rkey,
       {{src.addr(0), 8192, src.mr.lkey}}, 0x12345678);
  auto ca = wait(a_, 1);
  auto cb = wait(b_, 1);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_TRUE(ca[0].ok());
  EXPECT_EQ(cb[0].cqe_opcode, MLX5_CQE_RESP_WR_IMM);
  EXPECT_EQ(cb[0].imm, 0x12345678u);
  EXPECT_EQ(cb[0].byte_len, 8192u);
  EXPECT_EQ(cb[0].cookie, 55u);
  EXPECT_EQ(0, std::memcmp(dst.p, src.p, 8192));
}

// The windows fast path: map chunk pages into a window, RDMA through it (remote side), unmap,
// and the same access then fails.
TEST_P(Ops, UmrMapWriteReadThroughWindowThenUnmap) {
  open(GetParam());
  Buf arena, src, back;
  arena.alloc(*b_.dev, 16 * 4096, 12);
  src.alloc(*a_.dev, 3 * 4096, 13);
  back.alloc(*a_.dev, 3 * 4096, 14);
  auto w = b_.dev->create_window_mkey(8, true);
  ASSERT_TRUE(w.ok());
  const uint32_t win = w.value() | 0x05;  // new key byte on every map
  // Pages 3, 9, 1 of the arena, starting 100 bytes into page 3, 10000 bytes in all.
  umr_map(b_, 1, win, arena.mr.lkey, {arena.addr(3 * 4096), arena.addr(9 * 4096), arena.addr(4096)},
          4096, 10000, kAccRW, 100);
  auto cu = wait(b_, 1);
  ASSERT_TRUE(cu[0].ok()) << int(cu[0].status);
  auto v = b_.dev->inspect_mkey(win);
  EXPECT_FALSE(v.free);
  EXPECT_EQ(v.tag, 0x05);
  EXPECT_EQ(v.len, 10000u);
  EXPECT_EQ(v.n_entries, 3u);
  // The map is ordered once its CQE was polled: the peer may now use the rkey.
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, 0, win, {{src.addr(0), 10000, src.mr.lkey}});
  auto c = wait(a_, 1);
  ASSERT_TRUE(c[0].ok()) << int(c[0].status);
  EXPECT_EQ(0, std::memcmp(arena.p + 3 * 4096 + 100, src.p, 3996));
  EXPECT_EQ(0, std::memcmp(arena.p + 9 * 4096, src.p + 3996, 4096));
  EXPECT_EQ(0, std::memcmp(arena.p + 4096, src.p + 3996 + 4096, 10000 - 3996 - 4096));
  rdma(a_, MLX5_OPCODE_RDMA_READ, 3, 50, win, {{back.addr(0), 9000, back.mr.lkey}});
  c = wait(a_, 1);
  ASSERT_TRUE(c[0].ok());
  EXPECT_EQ(0, std::memcmp(back.p, src.p + 50, 9000));
  // Out of the window's length: remote access error.
  umr_inval(b_, 4, win);
  cu = wait(b_, 1);
  ASSERT_TRUE(cu[0].ok());
  EXPECT_TRUE(b_.dev->inspect_mkey(win).free);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 5, 0, win, {{src.addr(0), 16, src.mr.lkey}});
  c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kError);
  // The window can be destroyed once free; the arena MR once no window maps it.
  EXPECT_TRUE(b_.dev->destroy_mkey(win).ok());
  EXPECT_TRUE(b_.dev->dereg_mr(arena.mr).ok());
}

// Rights are checked on the mkey a request names, and only there: a window granting remote
// read/write over a leaf MR registered with local write only works (the kernel's SG_GAPS MRs
// over the PD's local_dma_lkey, mlx5dv_wr_mr_list over LOCAL_WRITE MRs), while the leaf's own
// key opens nothing remotely.
TEST_P(Ops, RemoteWindowOverLocalOnlyLeafWorks) {
  open(GetParam());
  Buf arena, src, back;
  arena.alloc(*b_.dev, 4 * 4096, 40, mlx5::kAccessLocalWrite);
  src.alloc(*a_.dev, 2 * 4096, 41);
  back.alloc(*a_.dev, 2 * 4096, 42);
  EXPECT_EQ(b_.dev->inspect_mkey(arena.mr.lkey).access,
            MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ |
                MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE);
  auto w = b_.dev->create_window_mkey(4, false);
  ASSERT_TRUE(w.ok());
  const uint32_t win = w.value() | 0x07;
  umr_map(b_, 1, win, arena.mr.lkey, {arena.addr(2 * 4096), arena.addr(0)}, 4096, 8192, kAccRW);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, 100, win, {{src.addr(0), 8000, src.mr.lkey}});
  auto c = wait(a_, 1);
  ASSERT_TRUE(c[0].ok()) << int(c[0].status);
  EXPECT_EQ(0, std::memcmp(arena.p + 2 * 4096 + 100, src.p, 3996));
  EXPECT_EQ(0, std::memcmp(arena.p, src.p + 3996, 8000 - 3996));
  rdma(a_, MLX5_OPCODE_RDMA_READ, 3, 0, win, {{back.addr(0), 8192, back.mr.lkey}});
  c = wait(a_, 1);
  ASSERT_TRUE(c[0].ok()) << int(c[0].status);
  EXPECT_EQ(0, std::memcmp(back.p, arena.p + 2 * 4096, 4096));
  EXPECT_EQ(0, std::memcmp(back.p + 4096, arena.p, 4096));
  // The window is also usable locally (gather lkey) with its local rights.
  rdma(b_, MLX5_OPCODE_RDMA_WRITE, 4, src.addr(0), src.mr.rkey, {{8, 64, win}});
  auto cb = wait(b_, 1);
  ASSERT_TRUE(cb[0].ok()) << int(cb[0].status);
  EXPECT_EQ(0, std::memcmp(src.p, arena.p + 2 * 4096 + 8, 64));
  // The leaf's own key, used as an rkey, is refused and changes nothing.
  const std::vector<uint8_t> before(arena.p, arena.p + arena.len);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 5, arena.addr(0), arena.mr.rkey,
       {{src.addr(0), 64, src.mr.lkey}});
  c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(0, std::memcmp(before.data(), arena.p, arena.len));
}

// The window's rights still rule when the leaf grants more: a read-only window over a leaf
// registered with every right refuses a WRITE.
TEST_P(Ops, WindowRightsRuleOverAPermissiveLeaf) {
  open(GetParam());
  Buf arena, src;
  arena.alloc(*b_.dev, 4096, 43, mlx5::kAccessAll);
  src.alloc(*a_.dev, 4096, 44);
  auto w = b_.dev->create_window_mkey(4, false);
  ASSERT_TRUE(w.ok());
  const uint32_t win = w.value() | 0x09;
  umr_map(b_, 1, win, arena.mr.lkey, {arena.addr(0)}, 4096, 4096,
          MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  const std::vector<uint8_t> before(arena.p, arena.p + arena.len);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, 0, win, {{src.addr(0), 64, src.mr.lkey}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(0, std::memcmp(before.data(), arena.p, arena.len));
}

// KLM leaves are translation: they must still resolve, be in the window's PD and cover the
// translated range. A leaf of another PD fails remotely (0x13) and locally (0x04).
TEST_P(Ops, WindowLeafFromAnotherPdFails) {
  open(GetParam());
  Buf host, src;
  host.alloc(*b_.dev, 2 * 4096, 45, mlx5::kAccessLocalWrite);
  src.alloc(*a_.dev, 4096, 46);
  auto other = b_.dev->reg_mr_in_pd(host.p, host.len, mlx5::kAccessAll, 7);
  ASSERT_TRUE(other.ok()) << other.error().message;
  EXPECT_EQ(b_.dev->inspect_mkey(other.value().lkey).pd, 7u);
  EXPECT_EQ(b_.dev->inspect_mkey(host.mr.lkey).pd, 0u);
  auto w = b_.dev->create_window_mkey(4, false);
  ASSERT_TRUE(w.ok());
  const uint32_t win = w.value() | 0x0b;
  umr_map(b_, 1, win, other.value().lkey, {host.addr(0)}, 4096, 4096, kAccRW);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  const std::vector<uint8_t> before(host.p, host.p + host.len);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, 0, win, {{src.addr(0), 64, src.mr.lkey}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(0, std::memcmp(before.data(), host.p, host.len));
  expect_responder_error(b_, mlx5::AsyncEventKind::kQpAccessErr);  // class C: b_ to error
  reconnect();
  // Local use of the window (gather lkey) on b_: LOCAL_PROT_ERR, nothing sent.
  rdma(b_, MLX5_OPCODE_RDMA_WRITE, 3, src.addr(0), src.mr.rkey, {{0, 64, win}});
  auto cb = wait(b_, 1);
  EXPECT_EQ(cb[0].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

// A leaf that does not cover the translated range fails where it runs out: the entry inside the
// leaf's registration works, the one past its end is refused and nothing beyond it changes.
TEST_P(Ops, WindowLeafOutOfBoundsFails) {
  open(GetParam());
  Buf host, src;
  host.alloc(*b_.dev, 8 * 4096, 47, mlx5::kAccessLocalWrite);
  src.alloc(*a_.dev, 2 * 4096, 48);
  auto leaf = b_.dev->reg_mr(host.p, 4 * 4096, mlx5::kAccessLocalWrite);  // pages 0..3 only
  ASSERT_TRUE(leaf.ok());
  auto w = b_.dev->create_window_mkey(4, false);
  ASSERT_TRUE(w.ok());
  const uint32_t win = w.value() | 0x0d;
  umr_map(b_, 1, win, leaf.value().lkey, {host.addr(3 * 4096), host.addr(4 * 4096)}, 4096, 8192,
          kAccRW);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, 0, win, {{src.addr(0), 4096, src.mr.lkey}});
  auto c = wait(a_, 1);
  ASSERT_TRUE(c[0].ok()) << int(c[0].status);
  EXPECT_EQ(0, std::memcmp(host.p + 3 * 4096, src.p, 4096));
  const std::vector<uint8_t> before(host.p, host.p + host.len);
  // Straddling into the second entry (outside the leaf) and wholly inside it: both refused.
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 3, 4000, win, {{src.addr(0), 200, src.mr.lkey}});
  c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(0, std::memcmp(before.data(), host.p, host.len));
  expect_responder_error(b_, mlx5::AsyncEventKind::kQpAccessErr);
  reconnect();
  rdma(b_, MLX5_OPCODE_RDMA_WRITE, 4, src.addr(0), src.mr.rkey, {{4096, 64, win}});
  auto cb = wait(b_, 1);
  EXPECT_EQ(cb[0].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_P(Ops, UmrPointerModeAndLocalUseWithFence) {
  open(GetParam());
  Buf arena, klm, dst;
  arena.alloc(*a_.dev, 8 * 4096, 15);
  klm.alloc(*a_.dev, 4096, 0);  // page aligned: 2 KiB aligned
  dst.alloc(*b_.dev, 8 * 4096, 16);
  auto w = a_.dev->create_window_mkey(64, false);
  ASSERT_TRUE(w.ok());
  const uint32_t win = w.value();
  std::vector<uint64_t> pages;
  for (int i = 7; i >= 0; --i) pages.push_back(arena.addr(size_t(i) * 4096));
  prm::UmrMap m = page_map(a_, false, win, arena, pages);
  prm::write_page_klms(reinterpret_cast<mlx5_wqe_umr_klm_seg*>(klm.p), m);
  post(
      a_, MLX5_OPCODE_UMR, 1,
      [&](prm::RingCursor& c, uint16_t idx) {
        m.wqe_index = idx;
        return prm::build_umr_map_pointer(c, m, klm.addr(), klm.mr.lkey);
      },
      false);
  // Local use of the window as the gather lkey: the SqWriter puts INITIATOR_SMALL on it.
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, dst.addr(0), dst.mr.rkey, {{4096 * 2 + 8, 4096 * 5, win}});
  auto c = wait(a_, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(c[0].ok() && c[1].ok()) << int(c[0].status) << " " << int(c[1].status);
  // Window offset 8200 = page index 2 of the list = arena page 5, +8.
  for (int k = 0; k < 5; ++k) {
    const size_t woff = 4096 * 2 + 8 + size_t(k) * 4096;
    const size_t page = woff / 4096, in = woff % 4096;
    const uint8_t* srcp = arena.p + (7 - page) * 4096 + in;
    const size_t first = 4096 - in;
    EXPECT_EQ(0, std::memcmp(dst.p + size_t(k) * 4096, srcp, first)) << k;
    if (k < 4 || true) {
      const uint8_t* nextp = arena.p + (7 - (page + 1)) * 4096;
      EXPECT_EQ(0, std::memcmp(dst.p + size_t(k) * 4096 + first, nextp, in)) << k;
    }
  }
}

TEST_P(Ops, LocalInvalidateAndSendWithInvalidate) {
  open(GetParam());
  Buf arena, src, rb;
  arena.alloc(*b_.dev, 4 * 4096, 17);
  src.alloc(*a_.dev, 4096, 18);
  rb.alloc(*b_.dev, 256, 19);
  auto w = b_.dev->create_window_mkey(4, true);
  ASSERT_TRUE(w.ok());
  const uint32_t win = w.value() | 0x11;
  umr_map(b_, 1, win, arena.mr.lkey, {arena.addr(0)}, 4096, 4096, kAccRW);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  // SEND_WITH_INV frees the window at the receiver.
  recv(b_, 77, {{rb.addr(), 256, rb.mr.lkey}});
  send(a_, MLX5_OPCODE_SEND_INVAL, 2, {{src.addr(), 32, src.mr.lkey}}, win);
  auto ca = wait(a_, 1);
  auto cb = wait(b_, 1);
  EXPECT_TRUE(ca[0].ok());
  ASSERT_TRUE(cb[0].ok());
  EXPECT_EQ(cb[0].cqe_opcode, MLX5_CQE_RESP_SEND_INV);
  EXPECT_EQ(cb[0].imm, win);
  EXPECT_TRUE(b_.dev->inspect_mkey(win).free);
  // Map again with another key, then LOCAL_INV (imm = key).
  const uint32_t win2 = w.value() | 0x12;
  umr_map(b_, 3, win2, arena.mr.lkey, {arena.addr(0)}, 4096, 4096, kAccRW);
  ASSERT_TRUE(wait(b_, 1)[0].ok());
  EXPECT_FALSE(b_.dev->inspect_mkey(win2).free);
  const uint8_t f = fm(b_);
  post(b_, MLX5_OPCODE_LOCAL_INVAL, 4, [&](prm::RingCursor& c, uint16_t idx) {
    prm::set_ctrl(c.take<mlx5_wqe_ctrl_seg>(), idx, MLX5_OPCODE_LOCAL_INVAL, 0, b_.desc.qpn, 1, f,
                  Be32::from_host(win2));
    return 1u;
  });
  auto cl = wait(b_, 1);
  EXPECT_TRUE(cl[0].ok());
  EXPECT_TRUE(b_.dev->inspect_mkey(win2).free);
}

TEST_P(Ops, NopAndUnsignaledBatches) {
  open(GetParam(), small_cfg(), 8);
  Buf src, dst;
  src.alloc(*a_.dev, 64 * 100, 20);
  dst.alloc(*b_.dev, 64 * 100, 21);
  for (int i = 0; i < 20; ++i) {
    const uint8_t f = fm(a_, false);
    post(
        a_, MLX5_OPCODE_NOP, 1000 + i,
        [&](prm::RingCursor& c, uint16_t idx) { return prm::build_nop(c, a_.desc.qpn, idx, f, 1); },
        false);
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, uint64_t(i), dst.addr(size_t(i) * 64), dst.mr.rkey,
         {{src.addr(size_t(i) * 64), 64, src.mr.lkey}}, 0, 0, i % 5 == 4, false);
  }
  a_.qp.sq().ring_doorbell();
  auto c = wait(a_, 40);
  ASSERT_EQ(c.size(), 40u);
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_TRUE(c[i].ok());
    EXPECT_EQ(c[i].cookie, i % 2 == 0 ? 1000 + i / 2 : i / 2);
  }
  EXPECT_EQ(0, std::memcmp(src.p, dst.p, 64 * 20));
  EXPECT_LT(a_.qp.stats().cqes, 40u);  // unsignaled WQEs were covered by later CQEs
}

TEST_P(Ops, ManyWqesWrapTheSqAndWire) {
  mlx5::QpConfig cfg = small_cfg();
  cfg.sq_wqebbs = 8;
  cfg.cq_cqes = 8;
  open(GetParam(), cfg);
  Buf src, dst;
  src.alloc(*a_.dev, 1 << 16, 22);
  dst.alloc(*b_.dev, 1 << 16, 23);
  for (int i = 0; i < 300; ++i) {
    const size_t off = size_t(i * 211) % ((1 << 16) - 300);
    rdma(a_, (i % 3) ? MLX5_OPCODE_RDMA_WRITE : MLX5_OPCODE_RDMA_READ, uint64_t(i), dst.addr(off),
         dst.mr.rkey, {{src.addr(off), uint32_t(1 + i), src.mr.lkey}});
    auto c = wait(a_, 1);
    ASSERT_TRUE(c[0].ok()) << i;
    ASSERT_EQ(c[0].cookie, uint64_t(i));
    ASSERT_EQ(0, std::memcmp(src.p + off, dst.p + off, size_t(1 + i))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Emu, Ops, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);

TEST(EmuOpen, SinkModeCompletesWithoutEffect) {
  Options o;
  o.mode = Mode::kSink;
  auto p = make_pair(o, o);
  ASSERT_TRUE(p.ok());
  auto d = p.value().a->create_qp(mlx5::QpConfig{});
  ASSERT_TRUE(d.ok());
  mlx5::QueuePair qp;
  qp.init(d.value(), 4);
  std::vector<uint8_t> dst(64, 0);
  uint64_t n = 0;
  for (int i = 0; i < 100; ++i) {
    auto cur = qp.sq().cursor();
    prm::Sge s{reinterpret_cast<uint64_t>(dst.data()), 64, 0xdead00};  // bogus key: no effect
    const uint32_t ds = prm::build_rdma(cur, MLX5_OPCODE_RDMA_WRITE, qp.qpn(), qp.sq().wqe_index(),
                                        qp.sq().next_fm_ce_se(false), 0, 0x1234, {&s, 1}, Be32{});
    qp.sq().commit(ds, MLX5_OPCODE_RDMA_WRITE, uint64_t(i));
    if (i % 10 == 9) qp.sq().ring_doorbell();
    qp.poll(64, [&](const mlx5::Completion& c) {
      EXPECT_TRUE(c.ok());
      EXPECT_EQ(c.cookie, n);
      ++n;
    });
  }
  EXPECT_EQ(n, 100u);
  EXPECT_EQ(dst, std::vector<uint8_t>(64, 0));
}

TEST(EmuOpen, RejectsBadConfigs) {
  auto w = make_wire();
  Options o;
  auto a = EmuDevice::open(w, 0, o);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(EmuDevice::open(w, 0, o).ok());  // side taken
  Options t = o;
  t.mode = Mode::kThreaded;
  EXPECT_FALSE(EmuDevice::open(w, 1, t).ok());  // mixed modes on one in-process wire
  mlx5::QpConfig c;
  c.sq_wqebbs = 100;
  EXPECT_FALSE(a.value()->create_qp(c).ok());
  EXPECT_FALSE(a.value()->create_window_mkey(0, false).ok());
  EXPECT_FALSE(a.value()->create_window_mkey(o.max_klm_list + 1, false).ok());
  EXPECT_FALSE(a.value()->modify_qp(0x999, mlx5::QpState::kInit).ok());
  auto q = a.value()->create_qp(mlx5::QpConfig{});
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(a.value()->modify_qp(q.value().qpn, mlx5::QpState::kRts).ok());  // reset -> rts
  EXPECT_TRUE(a.value()->modify_qp(q.value().qpn, mlx5::QpState::kInit).ok());
  EXPECT_TRUE(a.value()->modify_qp(q.value().qpn, mlx5::QpState::kRtr).ok());
  EXPECT_TRUE(a.value()->modify_qp(q.value().qpn, mlx5::QpState::kRts).ok());
  EXPECT_EQ(a.value()->query_qp(q.value().qpn).value(), mlx5::QpState::kRts);
}

}  // namespace
}  // namespace rdmx::emu::test
