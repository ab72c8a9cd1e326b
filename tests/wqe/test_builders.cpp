// Golden bytes of the verbs-shaped UMR builders added to lib/mlx5/prm for rdmx-wqe:
// build_umr_klm_list, build_umr_interleaved, build_local_inv. Expected bytes are written by
// hand from the layouts in doc/guides/mlx5-facts.md §2 and rdma-core qp.c.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include <rdmx/mlx5/prm/wqe.hpp>

#include "wqe_test_util.hpp"

namespace prm = rdmx::mlx5::prm;
using rdmx::wqetest::bb;
using rdmx::wqetest::hex_of;
using rdmx::wqetest::kZeroDs;

namespace {

struct Ring {
  explicit Ring(uint32_t n) : n_wqebb(n), mem(size_t{n} * 64, 0xee) {}  // 0xee: catch gaps
  std::string slot(uint32_t s) const { return hex_of(mem.data() + size_t{s} * 64, 64); }
  uint32_t n_wqebb;
  std::vector<uint8_t> mem;
};

// BIND_MW of a type-2 window (rdma-core qp.c set_bind_wr): 12 DS; CHECK_FREE, the QPN bit and
// the posting QP's number in the mkey context; one KLM padded to 64 bytes.
TEST(WqeBuilders, BindMwType2AsRdmaCore) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), 4, 3);
  prm::BindMw b;
  b.qpn = 0x123;
  b.wqe_index = 3;
  b.fm_ce_se = 0x08;
  b.mw_rkey = 0x00abcd07;
  b.new_rkey = 0x00abcd08;
  b.access = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
             MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;  // 0x10 | 0x20
  b.addr = 0x7f0000001000;
  b.length = 0x2000;
  b.mr_lkey = 0x5500;
  EXPECT_EQ(prm::build_bind_mw(cur, b), 12u);
  EXPECT_EQ(r.slot(3), bb({"00000325 0001230c 00000008 00abcd07",  // UMR, 12 DS, imm = old rkey
                           "b0000000 00040000 00000000 203c6041", kZeroDs, kZeroDs}));
  // free 0, access 0x30 | qpn 0x123, key 0x08 | start_addr = addr | len
  EXPECT_EQ(r.slot(0), bb({"00003000 00012308 00000000 00000000",
                           "00007f00 00001000 00000000 00002000", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(1), bb({"00002000 00005500 00007f00 00001000", kZeroDs, kZeroDs, kZeroDs}));
}

// Type 1, zero based: no CHECK_FREE, no QPN bit, qpn 0xffffff, start_addr 0.
TEST(WqeBuilders, BindMwType1ZeroBased) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), 4, 0);
  prm::BindMw b;
  b.qpn = 0x42;
  b.fm_ce_se = 0x20;
  b.mw_rkey = 0x300;
  b.new_rkey = 0x3ff;
  b.type2 = false;
  b.zero_based = true;
  b.access = 0x58;  // LW | RR | A
  b.addr = 0xa000;
  b.length = 0x80000000;  // the 2 GiB limit itself
  b.mr_lkey = 0x77;
  EXPECT_EQ(prm::build_bind_mw(cur, b), 12u);
  EXPECT_EQ(r.slot(0), bb({"00000025 0000420c 00000020 00000300",
                           "90000000 00040000 00000000 203c2041", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(1), bb({"00005800 ffffffff 00000000 00000000",
                           "00000000 00000000 00000000 80000000", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(2), bb({"80000000 00000077 00000000 0000a000", kZeroDs, kZeroDs, kZeroDs}));
}

// On a device with umr_modify_atomic_disabled the mask leaves bit 21 (atomic) clear: 0x201c6041.
TEST(WqeBuilders, BindMwWithoutAtomicMaskBit) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), 4, 0);
  prm::BindMw b;
  b.qpn = 0x123;
  b.mw_rkey = 0x700;
  b.new_rkey = 0x701;
  b.access = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ;
  b.addr = 0x1000;
  b.length = 0x100;
  b.mr_lkey = 0x5500;
  b.no_atomic_mask = true;
  EXPECT_EQ(prm::build_bind_mw(cur, b), 12u);
  EXPECT_EQ(r.slot(0), bb({"00000025 0001230c 00000000 00000700",
                           "b0000000 00040000 00000000 201c6041", kZeroDs, kZeroDs}));
}

// Length 0 unbinds: 8 DS, free, CHECK_QPN for type 2 — LOCAL_INV's layout but for the key byte,
// which is the new rkey's rather than 0.
TEST(WqeBuilders, BindMwLengthZeroUnbinds) {
  Ring r(2);
  prm::RingCursor cur(r.mem.data(), 2, 0);
  prm::BindMw b;
  b.qpn = 0x123;
  b.wqe_index = 7;
  b.fm_ce_se = 0x08;
  b.mw_rkey = 0x00012345;
  b.new_rkey = 0x00012346;
  EXPECT_EQ(prm::build_bind_mw(cur, b), 8u);
  EXPECT_EQ(r.slot(0), bb({"00000725 00012308 00000008 00012345",
                           "98000000 00000000 00000000 20006000", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(1), bb({"40000000 ffffff46 00000000 00000000", kZeroDs, kZeroDs, kZeroDs}));
}

}  // namespace

// N = 5 KLMs starting in the last WQEBB of a 4-WQEBB ring: ctrl + UMR ctrl in slot 3, the mkey
// context wraps to slot 0, KLMs 0-3 in slot 1, KLM 4 and three zero pads in slot 2.
TEST(WqeBuilders, KlmListWrapsAtRingEnd) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), 4, 3);
  const prm::Klm klms[] = {{0x1000, 0x100, 0x11},
                           {0x2000, 0x200, 0x22},
                           {0x3000, 0x300, 0x33},
                           {0x4000, 0x400, 0x44},
                           {0x5000, 0x500, 0x55}};
  const uint32_t ds =
      prm::build_umr_klm_list(cur, prm::UmrVerbsHead{0x123, 0xfffe, 0x08, 0x00abcd07, 0x38}, klms);
  EXPECT_EQ(ds, 16u);                // 8 + align4(5)
  EXPECT_EQ(cur.offset(), 3u * 64);  // 4 WQEBBs: 3, 0, 1, 2 -> next is slot 3
  EXPECT_EQ(r.slot(3), bb({"00fffe25 00012310 00000008 00abcd07",  // idx 0xfffe, UMR, ds 16
                           "80000000 00080000 00000000 203c2001",  // INLINE, 8 octowords
                           kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(0), bb({"00003800 ffffff07 00000000 00000000",  // access 0x38, key 07
                           "00000000 00000000 00000000 00000f00",  // start 0, len 0xf00
                           kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(1),
            bb({"00000100 00000011 00000000 00001000", "00000200 00000022 00000000 00002000",
                "00000300 00000033 00000000 00003000", "00000400 00000044 00000000 00004000"}));
  EXPECT_EQ(r.slot(2), bb({"00000500 00000055 00000000 00005000", kZeroDs, kZeroDs, kZeroDs}));
}

TEST(WqeBuilders, KlmListEmpty) {
  Ring r(2);
  prm::RingCursor cur(r.mem.data(), 2, 0);
  const uint32_t ds = prm::build_umr_klm_list(cur, prm::UmrVerbsHead{1, 0, 0, 0x500, 0},
                                              std::span<const prm::Klm>{});
  EXPECT_EQ(ds, 8u);
  EXPECT_EQ(r.slot(0), bb({"00000025 00000108 00000000 00000500",
                           "80000000 00000000 00000000 203c2001", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(1), bb({"00000000 ffffff00 00000000 00000000", kZeroDs, kZeroDs, kZeroDs}));
}

// Three entries + the repeat-block header = 4 octowords exactly: no padding.
TEST(WqeBuilders, InterleavedThreeEntries) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), 4, 1);
  const prm::RepeatEntry e[] = {
      {0xa000, 0x100, 0x180, 0x77}, {0xb000, 0x10, 0x10, 0x88}, {0xc000, 0x8, 0x40, 0x99}};
  const uint32_t ds =
      prm::build_umr_interleaved(cur, prm::UmrVerbsHead{0x42, 1, 0x20, 0x300, 0x70}, 2, e);
  EXPECT_EQ(ds, 12u);  // 8 + align4(3 + 1)
  EXPECT_EQ(r.slot(1), bb({"00000125 0000420c 00000020 00000300",
                           "80000000 00040000 00000000 203c2001", kZeroDs, kZeroDs}));
  // len = (0x100 + 0x10 + 0x8) * 2 = 0x230
  EXPECT_EQ(r.slot(2), bb({"00007000 ffffff00 00000000 00000000",
                           "00000000 00000000 00000000 00000230", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(3),
            bb({"00000118 00000400 00000002 00000003",  // 0x118 per repetition
                "01800100 00000077 00000000 0000a000",  // stride 0x180, 0x100 bytes
                "00100010 00000088 00000000 0000b000", "00400008 00000099 00000000 0000c000"}));
}

TEST(WqeBuilders, InterleavedPadsTo64Bytes) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), 4, 0);
  const prm::RepeatEntry e[] = {{0x1000, 0x200, 0x400, 0x1234}};
  EXPECT_EQ(prm::build_umr_interleaved(cur, prm::UmrVerbsHead{1, 0, 0, 0x100, 0}, 1, e), 12u);
  EXPECT_EQ(r.slot(2), bb({"00000200 00000400 00000001 00000001",
                           "04000200 00001234 00000000 00001000", kZeroDs, kZeroDs}));
}

// rdma-core's LOCAL_INV with the window's own key byte (0x45) instead of 0.
TEST(WqeBuilders, MwInvalidateKeepsTheKey) {
  Ring r(2);
  prm::RingCursor cur(r.mem.data(), 2, 0);
  EXPECT_EQ(prm::build_mw_invalidate(cur, 0x123, 7, 0x08, 0x00012345), 8u);
  EXPECT_EQ(r.slot(0), bb({"00000725 00012308 00000008 00012345",
                           "98000000 00000000 00000000 20006000", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(1), bb({"40000000 ffffff45 00000000 00000000", kZeroDs, kZeroDs, kZeroDs}));
}

TEST(WqeBuilders, LocalInvAsRdmaCore) {
  Ring r(2);
  prm::RingCursor cur(r.mem.data(), 2, 0);
  EXPECT_EQ(prm::build_local_inv(cur, 0x123, 7, 0x08, 0x00012345), 8u);
  EXPECT_EQ(r.slot(0), bb({"00000725 00012308 00000008 00012345",
                           "98000000 00000000 00000000 20006000", kZeroDs, kZeroDs}));
  EXPECT_EQ(r.slot(1), bb({"40000000 ffffff00 00000000 00000000", kZeroDs, kZeroDs, kZeroDs}));
}
