// A control-path stub for device-less unit tests: it hands out rings in plain memory and mkey
// numbers, and executes nothing. Tests read the WQE bytes the window layer wrote with the prm
// decoder, and play the device's part on the CQ by hand (complete_through). Tests that need an
// executing device use rdmx::emu.
#pragma once

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <rdmx/mlx5/device.hpp>
#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/mlx5/prm/decode.hpp>

namespace rdmx::test {

class PlainDevice final : public mlx5::Device {
 public:
  struct Qp {
    mlx5::QpDesc desc;
    std::unique_ptr<uint8_t[], void (*)(void*)> sq{nullptr, std::free};
    std::unique_ptr<uint8_t[], void (*)(void*)> rq{nullptr, std::free};
    std::unique_ptr<uint8_t[], void (*)(void*)> cq{nullptr, std::free};
    uint32_t dbrec[4] = {};
    uint64_t reg = 0;
    uint32_t cq_pi = 0;  // CQEs written
  };

  PlainDevice() {
    caps_.max_klm_list = 1024;
    caps_.max_inline_klm = 52;
    caps_.max_sq_wqebbs = 1 << 15;
    caps_.max_cq_cqes = 1 << 16;
    caps_.mkey_update_tag = true;
    caps_.remote_invalidate = true;
    caps_.umr_fence = default_umr_fence;
  }
  // HCA cap umr_fence of devices created from now on: 2 = NONE (UMRs carry only the fence the
  // SQ writer gives them).
  static inline uint8_t default_umr_fence = 2;
  mlx5::DeviceCaps& mutable_caps() { return caps_; }

  const std::string& name() const noexcept override { return name_; }
  const mlx5::DeviceCaps& caps() const noexcept override { return caps_; }
  Result<mlx5::MrInfo> reg_mr(void* addr, size_t len, uint32_t access) override {
    mlx5::MrInfo mr{reinterpret_cast<uint64_t>(addr), len, 0x100u | 0x11, 0x100u | 0x11, access};
    ++n_mrs;
    return mr;
  }
  Status dereg_mr(const mlx5::MrInfo&) override {
    --n_mrs;
    return {};
  }
  Result<uint32_t> create_window_mkey(uint32_t max_entries, bool) override {
    if (fail_mkeys > 0) {
      --fail_mkeys;
      return make_error(Errc::kDeviceError, "injected");
    }
    last_max_entries = max_entries;
    ++n_mkeys;
    // Non-contiguous indices, as a real device may hand out.
    return (0x200u + next_mkey_++ * 3u) << 8;
  }
  Status destroy_mkey(uint32_t) override {
    --n_mkeys;
    return {};
  }
  Result<mlx5::QpDesc> create_qp(const mlx5::QpConfig& cfg) override {
    auto q = std::make_unique<Qp>();
    auto alloc = [](size_t n) {
      n = (n + 4095) & ~size_t{4095};  // aligned_alloc wants a multiple of the alignment
      void* p = std::aligned_alloc(4096, n);
      std::memset(p, 0, n);
      return static_cast<uint8_t*>(p);
    };
    q->sq.reset(alloc(size_t{cfg.sq_wqebbs} * 64));
    q->cq.reset(alloc(size_t{cfg.cq_cqes} * 64));
    for (uint32_t i = 0; i < cfg.cq_cqes; ++i)
      reinterpret_cast<mlx5_cqe64*>(q->cq.get())[i].op_own = MLX5_CQE_INVALID << 4;
    mlx5::QpDesc& d = q->desc;
    d.qpn = 0x40 + static_cast<uint32_t>(qps.size());
    d.sq = {q->sq.get(), cfg.sq_wqebbs, &q->dbrec[0], &q->reg, 0, {}};
    if (cfg.rq_wqes) {
      const uint32_t stride = 16 * (cfg.rq_sges < 1 ? 1 : cfg.rq_sges);
      q->rq.reset(alloc(size_t{cfg.rq_wqes} * stride));
      d.rq = {q->rq.get(), cfg.rq_wqes, stride, &q->dbrec[1], {}};
    }
    d.cq = {q->cq.get(), cfg.cq_cqes, &q->dbrec[2], d.qpn};
    qps.push_back(std::move(q));
    return d;
  }
  Status destroy_qp(mlx5::QpHandle) override { return {}; }
  mlx5::ConnectInfo local_info(mlx5::QpHandle qp) override {
    mlx5::ConnectInfo c;
    c.qpn = qp;
    return c;
  }
  Status connect(mlx5::QpHandle, const mlx5::ConnectInfo&) override { return {}; }
  Status modify_qp(mlx5::QpHandle, mlx5::QpState) override { return {}; }
  Result<mlx5::QpState> query_qp(mlx5::QpHandle) override { return mlx5::QpState::kRts; }

  Qp& qp(size_t i = 0) { return *qps[i]; }

  // Plays the device: writes one CQE naming the WQE that starts at SQ counter `wqe_counter`
  // (status 0 = success, else an error CQE with that syndrome).
  static void write_send_cqe(Qp& q, uint16_t wqe_counter, uint8_t syndrome = 0,
                             uint8_t send_opcode = MLX5_OPCODE_UMR) {
    mlx5::prm::CqeFields f;
    f.opcode = syndrome ? MLX5_CQE_REQ_ERR : MLX5_CQE_REQ;
    f.send_opcode = send_opcode;
    f.qpn = q.desc.qpn;
    f.wqe_counter = wqe_counter;
    f.syndrome = syndrome;
    const uint32_t n = q.desc.cq.cqe_cnt;
    auto* c = reinterpret_cast<mlx5_cqe64*>(q.cq.get()) + (q.cq_pi & (n - 1));
    mlx5::prm::write_cqe(c, f, (q.cq_pi & n) ? 1 : 0);
    ++q.cq_pi;
  }

  int n_mrs = 0;
  int n_mkeys = 0;
  int fail_mkeys = 0;
  uint32_t last_max_entries = 0;
  std::vector<std::unique_ptr<Qp>> qps;

 private:
  std::string name_ = "plain";
  mlx5::DeviceCaps caps_;
  uint32_t next_mkey_ = 0;
};

}  // namespace rdmx::test
