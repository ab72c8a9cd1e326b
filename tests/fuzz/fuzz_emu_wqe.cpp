// libFuzzer target: arbitrary bytes as SQ contents + a doorbell -> the emulated device must
// never crash, hang or read out of bounds; it answers with CQEs (errors for bad bytes).
//
// Input layout: byte 0 = how many WQEBBs the doorbell record claims (mod 17), the rest is
// copied into a 16-WQEBB send queue. A registered MR and a window exist, so some keys resolve.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <rdmx/emu/emu.hpp>
#include <rdmx/mlx5/prm/cqe.hpp>

namespace {

using namespace rdmx;

struct Harness {
  emu::DevicePair pair;
  alignas(4096) uint8_t mem[4 * 4096] = {};
  Harness() {
    emu::Options o;
    o.prm_checker = false;  // counters only: reports would grow without bound
    auto p = emu::make_pair(o, o);
    if (!p.ok()) __builtin_trap();
    pair = std::move(p.value());
    // Keys 0x200.. are then valid-looking: MR at index 2 (MW_BIND allowed), window at index 3,
    // a type-2 memory window at index 5 (4 is never used), both sides: random UMRs reach the
    // bind rules too.
    for (emu::EmuDevice* d : {pair.a.get(), pair.b.get()}) {
      if (!d->reg_mr(mem, sizeof(mem), mlx5::kAccessAll | mlx5::kAccessMwBind).ok())
        __builtin_trap();
      if (!d->create_window_mkey(8, true).ok()) __builtin_trap();
      if (!d->alloc_mw(0).ok()) __builtin_trap();
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = new Harness();
  if (size < 1) return 0;
  mlx5::QpConfig cfg;
  cfg.sq_wqebbs = 16;
  cfg.rq_wqes = 4;
  cfg.cq_cqes = 64;
  auto qa = h->pair.a->create_qp(cfg);
  auto qb = h->pair.b->create_qp(cfg);
  if (!qa.ok() || !qb.ok()) __builtin_trap();
  if (!mlx5::connect_qps(*h->pair.a, qa.value().qpn, *h->pair.b, qb.value().qpn).ok())
    __builtin_trap();
  const mlx5::QpDesc& d = qa.value();
  const size_t n = std::min(size - 1, size_t{16 * 64});
  std::memcpy(d.sq.buf, data + 1, n);
  // The seed corpus is built for QPN 0x100 (gen_corpus.cpp) and every input runs on a fresh QP:
  // a ctrl segment naming 0x100 is given this QP's number, so seeds reach past emu's
  // wqe-qpn-mismatch rule (other QPNs still exercise it).
  auto* sq = static_cast<uint8_t*>(d.sq.buf);
  for (size_t off = 0; off + 8 <= n; off += 64)
    if (sq[off + 4] == 0 && sq[off + 5] == 1 && sq[off + 6] == 0) {
      sq[off + 4] = static_cast<uint8_t>(d.qpn >> 16);
      sq[off + 5] = static_cast<uint8_t>(d.qpn >> 8);
      sq[off + 6] = static_cast<uint8_t>(d.qpn);
    }
  const uint32_t pi = data[0] % 17;
  __atomic_store_n(d.sq.dbrec, __builtin_bswap32(pi), __ATOMIC_RELEASE);
  d.sq.hook();
  for (int i = 0; i < 4; ++i) {
    h->pair.a->progress();
    h->pair.b->progress();
  }
  // Every CQE the device wrote must be well formed.
  const auto* cqes = static_cast<const mlx5_cqe64*>(d.cq.buf);
  for (uint32_t i = 0; i < cfg.cq_cqes; ++i) {
    const uint8_t op = mlx5::prm::cqe_opcode(&cqes[i]);
    if (op != MLX5_CQE_INVALID && op != MLX5_CQE_REQ && op != MLX5_CQE_REQ_ERR &&
        op != MLX5_CQE_RESP_ERR)
      __builtin_trap();
  }
  (void)h->pair.a->destroy_qp(qa.value().qpn);
  (void)h->pair.b->destroy_qp(qb.value().qpn);
  return 0;
}
