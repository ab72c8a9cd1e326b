// Writes the seed corpus for fuzz_emu_wqe: real WQEs produced by the prm builders.
// Usage: gen_corpus <dir>. Input layout: byte 0 = doorbell WQEBB count, then SQ bytes.
#include <cstdio>
#include <string>
#include <vector>

#include <rdmx/mlx5/prm/wqe.hpp>

using namespace rdmx;
using namespace rdmx::mlx5::prm;

static void emit(const std::string& dir, const char* name, const std::vector<uint8_t>& sq,
                 uint32_t wqebbs) {
  std::vector<uint8_t> v;
  v.push_back(static_cast<uint8_t>(wqebbs));
  v.insert(v.end(), sq.begin(), sq.begin() + wqebbs * 64);
  FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
  if (!f) return;
  std::fwrite(v.data(), 1, v.size(), f);
  std::fclose(f);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string dir = argv[1];
  const uint32_t mr = (2u << 8) | 1;  // first reg_mr of the fuzz harness (index 2, variant 1)
  const uint32_t win = 3u << 8;       // its window
  std::vector<uint8_t> sq(16 * 64);
  {
    RingCursor c(sq.data(), 16, 0);
    uint64_t pages[3] = {0x1000, 0x2000, 0x3000};
    UmrMap m;
    m.qpn = 0x100;
    m.fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE;
    m.mkey = win | 7;
    m.access = 0x38;
    m.parent_lkey = mr;
    m.page_size = 4096;
    m.length = 3 * 4096;
    m.pages = pages;
    const uint32_t ds = build_umr_map_inline(c, m);
    emit(dir, "umr_map_inline", sq, ds_to_wqebbs(ds));
  }
  {
    RingCursor c(sq.data(), 16, 0);
    const uint32_t ds = build_umr_invalidate(c, 0x100, 0, MLX5_WQE_CTRL_CQ_UPDATE, win, 0x40);
    emit(dir, "umr_invalidate", sq, ds_to_wqebbs(ds));
  }
  {
    RingCursor c(sq.data(), 16, 0);
    Sge s[2] = {{0x1000, 100, mr}, {0x2000, 50, win | 7}};
    const uint32_t ds = build_rdma(c, MLX5_OPCODE_RDMA_WRITE, 0x100, 0, MLX5_WQE_CTRL_CQ_UPDATE,
                                   0x1000, mr, s, Be32{});
    emit(dir, "rdma_write", sq, ds_to_wqebbs(ds));
  }
  {
    RingCursor c(sq.data(), 16, 0);
    Sge s[1] = {{0x1000, 64, mr}};
    const uint32_t ds = build_rdma(c, MLX5_OPCODE_RDMA_READ, 0x100, 0, MLX5_WQE_CTRL_CQ_UPDATE,
                                   0x2000, mr, s, Be32{});
    emit(dir, "rdma_read", sq, ds_to_wqebbs(ds));
  }
  {
    RingCursor c(sq.data(), 16, 0);
    const char msg[] = "hello, emulated mlx5";
    const uint32_t ds = build_inline(c, MLX5_OPCODE_SEND, 0x100, 0, MLX5_WQE_CTRL_CQ_UPDATE, 0, 0,
                                     msg, sizeof(msg), Be32{});
    uint32_t n = ds_to_wqebbs(ds);
    RingCursor c2(sq.data(), 16, n);
    n += ds_to_wqebbs(build_nop(c2, 0x100, static_cast<uint16_t>(n), MLX5_WQE_CTRL_CQ_UPDATE, 4));
    emit(dir, "send_inline_nop", sq, n);
  }
  return 0;
}
