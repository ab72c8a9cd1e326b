#include <cstring>

#include <rdmx/mlx5/qp.hpp>
#include <rdmx/mlx5/sq.hpp>

namespace rdmx::mlx5 {

static bool is_pow2(uint32_t v) {
  return v && !(v & (v - 1));
}

void SqWriter::init(const SqDesc& d, uint32_t qpn, uint32_t signal_every) {
  RDMX_ASSERT(d.buf && d.dbrec && d.reg && is_pow2(d.wqe_cnt) && d.wqe_cnt <= 65536);
  RDMX_ASSERT(signal_every >= 1);
  buf_ = d.buf;
  n_ = d.wqe_cnt;
  qpn_ = qpn;
  dbrec_ = d.dbrec;
  reg_ = d.reg;
  hook_ = d.hook;
  signal_every_ = signal_every;
  shadow_ = std::make_unique<SqShadow[]>(n_);
  reset();
}

void SqWriter::reset() noexcept {
  pi_ = ci_ = db_pi_ = loud_end_ = (pi_ + 0xffff) & ~uint64_t{0xffff};
  unsignaled_ = 0;
  fm_cache_ = 0;
  last_ctrl_ = static_cast<mlx5_wqe_ctrl_seg*>(buf_);
  std::memset(shadow_.get(), 0, sizeof(SqShadow) * n_);
}

void RqWriter::init(const RqDesc& d) {
  buf_ = d.buf;
  n_ = d.wqe_cnt;
  stride_ = d.stride;
  dbrec_ = d.dbrec;
  hook_ = d.hook;
  if (n_ == 0) return;  // no receive queue
  RDMX_ASSERT(d.buf && d.dbrec && is_pow2(d.wqe_cnt) && d.stride >= 16 && d.stride % 16 == 0);
  cookies_ = std::make_unique<uint64_t[]>(n_);
  reset();
}

void RqWriter::reset() noexcept {
  pi_ = ci_ = 0;
  if (cookies_) std::memset(cookies_.get(), 0, sizeof(uint64_t) * n_);
}

void CqPoller::init(const CqDesc& d) {
  RDMX_ASSERT(d.buf && d.dbrec && is_pow2(d.cqe_cnt));
  buf_ = d.buf;
  n_ = d.cqe_cnt;
  dbrec_ = d.dbrec;
  ci_ = 0;
  published_ = 0;
}

void CqPoller::reset() noexcept { /* the CQ survives a QP reset: keep ci */
}

void QueuePair::init(const QpDesc& d, uint32_t signal_every) {
  qpn_ = d.qpn;
  sq_.init(d.sq, d.qpn, signal_every);
  rq_.init(d.rq);
  cq_.init(d.cq);
  in_error_ = false;
}

void QueuePair::reset() noexcept {
  sq_.reset();
  rq_.reset();
  cq_.reset();
  in_error_ = false;
}

}  // namespace rdmx::mlx5

#include <rdmx/mlx5/device.hpp>

namespace rdmx::mlx5 {

uint8_t mkc_access_bits(uint32_t access) noexcept {
  // Local read is granted at mkey creation (lr=1) and is not in the map mask, so it is not
  // written here: the same access byte rdma-core's mlx5dv_wr_mr_list writes.
  uint8_t a = 0;
  if (access & kAccessLocalWrite) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE;
  if (access & kAccessRemoteWrite) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
  if (access & kAccessRemoteRead) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ;
  if (access & kAccessRemoteAtomic) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC;
  return a;
}

const char* qp_state_name(QpState s) noexcept {
  switch (s) {
    case QpState::kReset:
      return "reset";
    case QpState::kInit:
      return "init";
    case QpState::kRtr:
      return "rtr";
    case QpState::kRts:
      return "rts";
    case QpState::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace rdmx::mlx5
