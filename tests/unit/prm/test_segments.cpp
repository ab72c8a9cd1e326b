// Golden-byte tests of the PRM segment writers and WQE builders. Every expected byte below is
// written out by hand from the layouts in <infiniband/mlx5dv.h> and
// doc/guides/mlx5-facts.md §2 (and their primary sources) — never produced by the writer under
// test.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <rdmx/mlx5/prm/decode.hpp>
#include <rdmx/mlx5/prm/wqe.hpp>

namespace prm = rdmx::mlx5::prm;
using rdmx::Be32;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes bytes_of(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return Bytes(b, b + n);
}

struct Ring {
  explicit Ring(uint32_t n) : n_wqebb(n), mem(size_t{n} * 64, 0xee) {}
  uint32_t n_wqebb;
  Bytes mem;
  uint8_t* at(uint32_t off) { return mem.data() + off; }
};

// The 2-page inline map used by several tests (values chosen so every field is distinct):
// qpn 0x123, wqe index 5, CQ_UPDATE, mkey index 1 key 7, access RR|RW, parent lkey 0xa00,
// 4 KiB pages at 0x10000 and 0x20000, first byte at offset 0x100, 4096 bytes in all.
const uint64_t kPages[] = {0x10000, 0x20000};
prm::UmrMap two_page_map() {
  prm::UmrMap m;
  m.qpn = 0x123;
  m.wqe_index = 5;
  m.fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE;
  m.mkey = 0x107;
  m.access = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
             MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
  m.parent_lkey = 0xa00;
  m.page_size = 4096;
  m.first_offset = 0x100;
  m.length = 4096;
  m.pages = kPages;
  return m;
}

// 192 bytes = 3 WQEBBs, written from the layout by hand.
Bytes two_page_map_bytes() {
  Bytes e(192, 0);
  const uint8_t ctrl[16] = {0x00, 0x00, 0x05, 0x25,   // opmod 0 | wqe_index 5 | opcode UMR
                            0x00, 0x01, 0x23, 0x0c,   // qpn 0x123 | ds 12
                            0x00, 0x00, 0x00, 0x08,   // signature, rsvd, fm_ce_se CQ_UPDATE
                            0x00, 0x00, 0x01, 0x07};  // imm = mkey 0x107
  std::memcpy(&e[0], ctrl, 16);
  e[16] = 0x80;  // flags: INLINE
  e[20] = 0x00;
  e[21] = 0x04;  // klm_octowords 4 (2 entries padded)
  const uint8_t mask[8] = {0, 0, 0, 0, 0x20, 0x3c, 0x20, 0x01};  // FREE|LW|RR|RW|A|KEY|LEN
  std::memcpy(&e[24], mask, 8);
  e[64 + 2] = 0x30;  // access RR|RW, access_mode 0
  e[64 + 4] = 0xff;
  e[64 + 5] = 0xff;
  e[64 + 6] = 0xff;
  e[64 + 7] = 0x07;       // qpn none | key 7
  e[64 + 24 + 6] = 0x10;  // len = 0x1000
  const uint8_t klm0[16] = {0, 0, 0x0f, 0x00, 0, 0, 0x0a, 0x00, 0, 0, 0, 0, 0, 0x01, 0x01, 0x00};
  const uint8_t klm1[16] = {0, 0, 0x01, 0x00, 0, 0, 0x0a, 0x00, 0, 0, 0, 0, 0, 0x02, 0x00, 0x00};
  std::memcpy(&e[128], klm0, 16);
  std::memcpy(&e[144], klm1, 16);
  return e;  // 160..191: zero padding to 4 entries
}

}  // namespace

TEST(PrmSegments, ControlSegment) {
  alignas(16) uint8_t buf[16];
  prm::set_ctrl(reinterpret_cast<mlx5_wqe_ctrl_seg*>(buf), 0x1234, MLX5_OPCODE_UMR, 0, 0x123, 12,
                0x28, Be32::from_host(0x00abcd05));
  EXPECT_EQ(bytes_of(buf, 16), (Bytes{0x00, 0x12, 0x34, 0x25, 0x00, 0x01, 0x23, 0x0c, 0x00, 0x00,
                                      0x00, 0x28, 0x00, 0xab, 0xcd, 0x05}));
}

TEST(PrmSegments, ControlSegmentDsIsSixBits) {
  alignas(16) uint8_t buf[16];
  prm::set_ctrl(reinterpret_cast<mlx5_wqe_ctrl_seg*>(buf), 0, MLX5_OPCODE_NOP, 0, 0xffffff, 0x7f, 0,
                Be32{});
  EXPECT_EQ(buf[7], 0x3f);  // ds masked to 6 bits
  EXPECT_EQ(buf[4], 0xff);
}

TEST(PrmSegments, RemoteAddressSegment) {
  alignas(16) uint8_t buf[16];
  prm::set_raddr(reinterpret_cast<mlx5_wqe_raddr_seg*>(buf), 0x0102030405060708ull, 0x11223344);
  EXPECT_EQ(bytes_of(buf, 16), (Bytes{1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0}));
}

TEST(PrmSegments, DataSegment) {
  alignas(16) uint8_t buf[16];
  prm::set_data(reinterpret_cast<mlx5_wqe_data_seg*>(buf), 0x1000, 0xaabbccdd,
                0x00007f0000001000ull);
  EXPECT_EQ(bytes_of(buf, 16),
            (Bytes{0, 0, 0x10, 0, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0x7f, 0, 0, 0, 0x10, 0}));
}

TEST(PrmSegments, InlineUmrMapTwoPages) {
  Ring r(8);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 0);
  const uint32_t ds = prm::build_umr_map_inline(cur, two_page_map());
  EXPECT_EQ(ds, 12u);
  EXPECT_EQ(bytes_of(r.at(0), 192), two_page_map_bytes());
  EXPECT_EQ(r.mem[192], 0xee) << "the builder wrote past its 3 WQEBBs";
}

TEST(PrmSegments, InlineUmrMapWrapsAtRingEnd) {
  // Start in the last slot of an 8-WQEBB ring: ctrl + UMR ctrl at slot 7, mkey context at
  // slot 0, the KLMs at slot 1 (the ring wraps between WQEBBs, inside the WQE).
  Ring r(8);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 7);
  prm::build_umr_map_inline(cur, two_page_map());
  const Bytes e = two_page_map_bytes();
  EXPECT_EQ(bytes_of(r.at(7 * 64), 64), Bytes(e.begin(), e.begin() + 64));
  EXPECT_EQ(bytes_of(r.at(0), 64), Bytes(e.begin() + 64, e.begin() + 128));
  EXPECT_EQ(bytes_of(r.at(64), 64), Bytes(e.begin() + 128, e.begin() + 192));
  EXPECT_EQ(r.mem[128], 0xee);
}

TEST(PrmSegments, KlmListPadsToFourEntries) {
  // 5 full pages, offset 0: 5 KLMs + 3 zero entries, DS = 8 + 8 = 16.
  const uint64_t pages[] = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  prm::UmrMap m = two_page_map();
  m.pages = pages;
  m.first_offset = 0;
  m.length = 5 * 4096;
  Ring r(8);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 0);
  EXPECT_EQ(prm::build_umr_map_inline(cur, m), 16u);
  EXPECT_EQ(r.at(0)[7], 16);  // ds
  EXPECT_EQ(r.at(0)[21], 8);  // klm_octowords
  for (int i = 0; i < 5; ++i) {
    const uint8_t* k = r.at(128 + 16 * i);
    EXPECT_EQ(bytes_of(k, 16), (Bytes{0, 0, 0x10, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0, 0, 0,
                                      static_cast<uint8_t>(0x10 * (i + 1)), 0}))
        << "entry " << i;
  }
  EXPECT_EQ(bytes_of(r.at(128 + 80), 48), Bytes(48, 0));
  EXPECT_EQ(r.mem[256], 0xee);
}

TEST(PrmSegments, SinglePartialPage) {
  // One page, 100 bytes at offset 3900: one KLM of 100 bytes at page+3900 (0x7000+0xf3c).
  const uint64_t pages[] = {0x7000};
  prm::UmrMap m = two_page_map();
  m.pages = pages;
  m.first_offset = 3900;
  m.length = 100;
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 0);
  prm::build_umr_map_inline(cur, m);
  EXPECT_EQ(bytes_of(r.at(128), 16),
            (Bytes{0, 0, 0, 100, 0, 0, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0x3c}));
  EXPECT_EQ(r.at(64 + 31)[0], 100);  // mkc len low byte
}

TEST(PrmSegments, PointerModeUmr) {
  const uint64_t pages[] = {0x1000, 0x2000, 0x3000};
  prm::UmrMap m = two_page_map();
  m.pages = pages;
  m.first_offset = 0;
  m.length = 3 * 4096;
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 0);
  EXPECT_EQ(prm::build_umr_map_pointer(cur, m, 0x40000800ull, 0xb00), 9u);
  EXPECT_EQ(r.at(0)[7], 9);      // ds 9
  EXPECT_EQ(r.at(0)[16], 0x00);  // flags: not inline
  EXPECT_EQ(r.at(0)[21], 4);     // klm_octowords = align4(3)
  // Pointer: byte_count = 4 entries * 16 = 64, lkey 0xb00, address 0x40000800.
  EXPECT_EQ(bytes_of(r.at(128), 16),
            (Bytes{0, 0, 0, 0x40, 0, 0, 0x0b, 0, 0, 0, 0, 0, 0x40, 0, 0x08, 0}));
  // The KLM array itself (plain memory): 3 entries + 1 zero entry.
  mlx5_wqe_umr_klm_seg arr[4];
  std::memset(arr, 0xee, sizeof(arr));
  EXPECT_EQ(prm::write_page_klms(arr, m), 3u);
  EXPECT_EQ(bytes_of(&arr[2], 16),
            (Bytes{0, 0, 0x10, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0x30, 0}));
  EXPECT_EQ(bytes_of(&arr[3], 16), Bytes(16, 0));
}

TEST(PrmSegments, InvalidateUmr) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 2);
  EXPECT_EQ(prm::build_umr_invalidate(cur, 0x123, 0xffff, MLX5_WQE_CTRL_CQ_UPDATE, 0x107,
                                      prm::kUmrFlagFailIfFree),
            8u);
  Bytes e(128, 0);
  const uint8_t ctrl[16] = {0x00, 0xff, 0xff, 0x25, 0x00, 0x01, 0x23, 0x08,
                            0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x01, 0x07};
  std::memcpy(&e[0], ctrl, 16);
  e[16] = 0x80 | 0x40;  // INLINE | fail-if-free
  e[24 + 4] = 0x20;     // mask FREE (bit 29)
  e[64] = 0x40;         // mkc free
  e[64 + 4] = 0xff;
  e[64 + 5] = 0xff;
  e[64 + 6] = 0xff;
  e[64 + 7] = 0x07;
  EXPECT_EQ(bytes_of(r.at(128), 128), e);
}

TEST(PrmSegments, RdmaReadTwoSges) {
  Ring r(4);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 3);  // wraps after the first WQEBB
  const prm::Sge sges[] = {{0x5000, 0x200, 0x11}, {0x6000, 0x300, 0x22}};
  EXPECT_EQ(prm::build_rdma(cur, MLX5_OPCODE_RDMA_READ, 7, 3, prm::kFenceInitiatorSmall, 0x40,
                            0x201, sges, Be32{}),
            4u);
  EXPECT_EQ(bytes_of(r.at(192), 16), (Bytes{0, 0, 3, 0x10, 0, 0, 7, 4, 0, 0, 0, 0x20, 0, 0, 0, 0}));
  EXPECT_EQ(bytes_of(r.at(192 + 16), 16),
            (Bytes{0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 2, 1, 0, 0, 0, 0}));
  EXPECT_EQ(bytes_of(r.at(192 + 48), 16),
            (Bytes{0, 0, 3, 0, 0, 0, 0, 0x22, 0, 0, 0, 0, 0, 0, 0x60, 0}));
}

TEST(PrmSegments, InlineWriteCrossesRingEnd) {
  // 40 inline bytes starting 32 bytes before the ring end: header + 12 bytes there, rest at 0.
  Ring r(2);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 1);
  cur.advance(0);
  uint8_t data[40];
  for (int i = 0; i < 40; ++i) data[i] = static_cast<uint8_t>(i + 1);
  const uint32_t ds =
      prm::build_inline(cur, MLX5_OPCODE_RDMA_WRITE, 1, 1, 0, 0x10, 0x20, data, 40, Be32{});
  EXPECT_EQ(ds, 5u);  // ctrl + raddr + ceil((4 + 40) / 16) = 3
  EXPECT_EQ(bytes_of(r.at(64 + 32), 4), (Bytes{0x80, 0, 0, 40}));
  EXPECT_EQ(r.at(64 + 36)[0], 1);
  EXPECT_EQ(r.at(127)[0], 28);  // data[27] is the last byte before the wrap
  EXPECT_EQ(r.at(0)[0], 29);    // then the ring's start
  EXPECT_EQ(r.at(11)[0], 40);
  EXPECT_EQ(bytes_of(r.at(12), 4), Bytes(4, 0));  // pad to 16
}

TEST(PrmDecode, RoundTripsUmrMap) {
  Ring r(8);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 6);
  prm::build_umr_map_inline(cur, two_page_map());
  prm::DecodedWqe d;
  ASSERT_EQ(prm::decode_wqe(r.mem.data(), r.n_wqebb, 6, d), prm::DecodeError::kOk);
  EXPECT_EQ(d.ctrl.opcode, MLX5_OPCODE_UMR);
  EXPECT_EQ(d.ctrl.wqe_index, 5);
  EXPECT_EQ(d.ctrl.qpn, 0x123u);
  EXPECT_EQ(d.ctrl.ds, 12);
  EXPECT_TRUE(d.ctrl.signaled());
  EXPECT_EQ(d.ctrl.imm, 0x107u);
  EXPECT_EQ(d.n_wqebb, 3u);
  ASSERT_TRUE(d.has_umr);
  EXPECT_TRUE(d.umr.inline_list());
  EXPECT_EQ(d.umr.mkey_mask, 0x203C2001ull);
  EXPECT_FALSE(d.mkc.free);
  EXPECT_EQ(d.mkc.key, 7);
  EXPECT_EQ(d.mkc.qpn, 0xffffffu);
  EXPECT_EQ(d.mkc.len, 4096u);
  ASSERT_EQ(d.n_klm, 4u);
  EXPECT_EQ(d.klm[0].byte_count, 0xf00u);
  EXPECT_EQ(d.klm[0].address, 0x10100u);
  EXPECT_EQ(d.klm[1].byte_count, 0x100u);
  EXPECT_EQ(d.klm[1].mkey, 0xa00u);
  EXPECT_EQ(d.klm[2].byte_count, 0u);
}

TEST(PrmDecode, RejectsMalformedWqes) {
  Ring r(2);
  prm::DecodedWqe d;
  std::fill(r.mem.begin(), r.mem.end(), 0);
  // ds == 0
  EXPECT_EQ(prm::decode_wqe(r.mem.data(), 2, 0, d), prm::DecodeError::kDsZero);
  // ds 12 (3 WQEBBs) in a 2-WQEBB ring
  prm::set_ctrl(reinterpret_cast<mlx5_wqe_ctrl_seg*>(r.at(0)), 0, MLX5_OPCODE_UMR, 0, 1, 12, 0,
                Be32{});
  EXPECT_EQ(prm::decode_wqe(r.mem.data(), 2, 0, d), prm::DecodeError::kDsBeyondRing);
  // unknown opcode
  prm::set_ctrl(reinterpret_cast<mlx5_wqe_ctrl_seg*>(r.at(0)), 0, 0x3e, 0, 1, 1, 0, Be32{});
  EXPECT_EQ(prm::decode_wqe(r.mem.data(), 2, 0, d), prm::DecodeError::kUnknownOpcode);
  // UMR whose inline octowords (4) disagree with ds (8)
  prm::set_ctrl(reinterpret_cast<mlx5_wqe_ctrl_seg*>(r.at(0)), 0, MLX5_OPCODE_UMR, 0, 1, 8, 0,
                Be32{});
  prm::set_umr_ctrl(reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(r.at(16)),
                    MLX5_WQE_UMR_CTRL_FLAG_INLINE, 4, 0);
  EXPECT_EQ(prm::decode_wqe(r.mem.data(), 2, 0, d), prm::DecodeError::kUmrOctowords);
  // UMR shorter than its header
  prm::set_ctrl(reinterpret_cast<mlx5_wqe_ctrl_seg*>(r.at(0)), 0, MLX5_OPCODE_UMR, 0, 1, 5, 0,
                Be32{});
  EXPECT_EQ(prm::decode_wqe(r.mem.data(), 2, 0, d), prm::DecodeError::kTruncated);
  // SEND whose inline length runs past ds
  prm::set_ctrl(reinterpret_cast<mlx5_wqe_ctrl_seg*>(r.at(0)), 0, MLX5_OPCODE_SEND, 0, 1, 2, 0,
                Be32{});
  prm::set_inline_hdr(reinterpret_cast<mlx5_wqe_inl_data_seg*>(r.at(16)), 100);
  EXPECT_EQ(prm::decode_wqe(r.mem.data(), 2, 0, d), prm::DecodeError::kInlineLength);
}

TEST(PrmDecode, InlineDataIsCopiedAcrossTheWrap) {
  Ring r(2);
  prm::RingCursor cur(r.mem.data(), r.n_wqebb, 1);
  const char msg[] = "the quick brown fox jumps over the lazy dog";
  prm::build_inline(cur, MLX5_OPCODE_SEND, 1, 9, 0, 0, 0, msg, sizeof(msg), Be32{});
  prm::DecodedWqe d;
  ASSERT_EQ(prm::decode_wqe(r.mem.data(), 2, 1, d), prm::DecodeError::kOk);
  ASSERT_TRUE(d.has_inline);
  ASSERT_EQ(d.inline_len, sizeof(msg));
  char out[sizeof(msg)];
  prm::copy_from_ring(r.mem.data(), 2, d.inline_ring_offset, out, d.inline_len);
  EXPECT_STREQ(out, msg);
}

namespace {

// Every KLM writer variant this CPU runs writes the bytes of the baseline (the unchecked
// writer) and finds the same bad pages, for lists of 1..300 pages, in plain memory and in a
// ring that wraps inside the list.
TEST(PrmKlmVariants, SameBytesAndSameVerdictAsBaseline) {
  std::mt19937_64 g(20261202);
  const uint64_t ps = 4096, base = 0x7f0000100000ull, span = 512 * ps;
  int ran = 0;
  for (prm::KlmVariant v : prm::kKlmVariants) {
    if (!prm::klm_variant_supported(v)) {
      std::printf("KLM variant %s: not supported by this CPU, skipped\n", prm::klm_variant_name(v));
      continue;
    }
    ++ran;
    const prm::KlmMidFn mid = prm::klm_mid_variant(v);
    EXPECT_EQ(mid == nullptr, v == prm::KlmVariant::kBaseline);
    for (int iter = 0; iter < 3000; ++iter) {
      const uint32_t n = 1 + static_cast<uint32_t>(g() % 300);
      std::vector<uint64_t> pages(n);
      for (auto& p : pages) p = base + (g() % 512) * ps;
      // A third of the lists get one bad page: misaligned, below the base, at or past the end,
      // or far away (sign bit set after the subtraction).
      bool good = true;
      if (iter % 3 == 0) {
        uint64_t& p = pages[g() % n];
        switch (g() % 5) {
          case 0:
            p += 8;
            break;
          case 1:
            p = base - ps;
            break;
          case 2:
            p = base + span;
            break;
          case 3:
            p = base + span + 7 * ps;
            break;
          default:
            p = 0xffff800000000000ull;
            break;
        }
        good = false;
      }
      prm::UmrMap m;
      m.parent_lkey = 0x1234500 | (iter & 0xff);
      m.page_size = ps;
      m.first_offset = static_cast<uint32_t>(g() % ps);
      const uint64_t room = n * ps - m.first_offset;
      const uint64_t min_len = n == 1 ? 1 : (n - 1) * ps - m.first_offset + 1;
      m.length = min_len + g() % (room - min_len + 1);
      m.pages = pages;
      const uint32_t entries = prm::align4(n);
      // Plain memory (pointer mode).
      std::vector<mlx5_wqe_umr_klm_seg> want(entries), got(entries);
      std::memset(want.data(), 0xee, entries * 16);
      std::memset(got.data(), 0x5a, entries * 16);
      prm::write_page_klms(want.data(), m);
      prm::PageCheck pc;
      pc.base = base;
      pc.span = span;
      pc.mid = mid;
      prm::write_page_klms(got.data(), m, pc);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), entries * 16))
          << prm::klm_variant_name(v) << " n " << n << " iter " << iter;
      ASSERT_EQ(pc.ok(ps), good) << prm::klm_variant_name(v) << " n " << n << " iter " << iter;
      // The whole-list writer of the inline map's fast path: same bytes, same verdict.
      const prm::KlmListFn list = prm::klm_list_variant(v);
      ASSERT_NE(list, nullptr);
      const prm::KlmListConsts k = prm::KlmListConsts::of(ps, m.parent_lkey, base, span);
      std::vector<mlx5_wqe_umr_klm_seg> listed(entries + 1);
      std::memset(listed.data(), 0x77, (entries + 1) * 16);
      const uint64_t bad = list(reinterpret_cast<uint8_t*>(listed.data()), pages.data(), n,
                                m.first_offset, m.first_offset + m.length, k);
      ASSERT_EQ(0, std::memcmp(want.data(), listed.data(), entries * 16))
          << prm::klm_variant_name(v) << " list, n " << n << " iter " << iter;
      const uint8_t* after = reinterpret_cast<const uint8_t*>(&listed[entries]);
      for (int b = 0; b < 16; ++b) ASSERT_EQ(after[b], 0x77) << "written past the list";
      ASSERT_EQ(bad == 0, good) << prm::klm_variant_name(v) << " list, n " << n;
      // A ring of 128 WQEBBs; the list starts at a random 16-byte slot, so it often wraps.
      if (entries * 16 > 128 * 64 - 64) continue;
      Ring ra(128), rb(128);
      const uint32_t slot = static_cast<uint32_t>(g() % 128);
      prm::RingCursor ca(ra.mem.data(), 128, slot), cb(rb.mem.data(), 128, slot);
      prm::write_page_klms(ca, m);
      prm::PageCheck pr;
      pr.base = base;
      pr.span = span;
      pr.mid = mid;
      prm::write_page_klms(cb, m, pr);
      ASSERT_EQ(ra.mem, rb.mem) << prm::klm_variant_name(v) << " n " << n << " iter " << iter;
      ASSERT_EQ(pr.ok(ps), good);
    }
  }
  EXPECT_GE(ran, 1);
}

}  // namespace
