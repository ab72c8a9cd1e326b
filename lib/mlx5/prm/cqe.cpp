#include <cstring>

#include <rdmx/mlx5/prm/cqe.hpp>

namespace rdmx::mlx5::prm {

std::string_view syndrome_name(uint8_t s) noexcept {
  switch (s) {
    case 0:
      return "success";
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
      return "local-length";
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
      return "local-qp-operation";
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
      return "local-protection";
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
      return "flushed";
    case MLX5_CQE_SYNDROME_MW_BIND_ERR:
      return "memory-window-bind";
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
      return "bad-response";
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
      return "local-access";
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
      return "remote-invalid-request";
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
      return "remote-access";
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
      return "remote-operation";
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
      return "transport-retry-exceeded";
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
      return "rnr-retry-exceeded";
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
      return "remote-aborted";
    default:
      return "unknown";
  }
}

std::string_view cqe_opcode_name(uint8_t op) noexcept {
  switch (op) {
    case MLX5_CQE_REQ:
      return "REQ";
    case MLX5_CQE_RESP_WR_IMM:
      return "RESP_WR_IMM";
    case MLX5_CQE_RESP_SEND:
      return "RESP_SEND";
    case MLX5_CQE_RESP_SEND_IMM:
      return "RESP_SEND_IMM";
    case MLX5_CQE_RESP_SEND_INV:
      return "RESP_SEND_INV";
    case MLX5_CQE_RESIZE_CQ:
      return "RESIZE_CQ";
    case MLX5_CQE_NO_PACKET:
      return "NO_PACKET";
    case MLX5_CQE_SIG_ERR:
      return "SIG_ERR";
    case MLX5_CQE_REQ_ERR:
      return "REQ_ERR";
    case MLX5_CQE_RESP_ERR:
      return "RESP_ERR";
    case MLX5_CQE_INVALID:
      return "INVALID";
    default:
      return "unknown";
  }
}

std::string_view wqe_opcode_name(uint8_t op) noexcept {
  switch (op) {
    case MLX5_OPCODE_NOP:
      return "NOP";
    case MLX5_OPCODE_SEND_INVAL:
      return "SEND_INVAL";
    case MLX5_OPCODE_RDMA_WRITE:
      return "RDMA_WRITE";
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      return "RDMA_WRITE_IMM";
    case MLX5_OPCODE_SEND:
      return "SEND";
    case MLX5_OPCODE_SEND_IMM:
      return "SEND_IMM";
    case MLX5_OPCODE_TSO:
      return "TSO";
    case MLX5_OPCODE_RDMA_READ:
      return "RDMA_READ";
    case MLX5_OPCODE_ATOMIC_CS:
      return "ATOMIC_CS";
    case MLX5_OPCODE_ATOMIC_FA:
      return "ATOMIC_FA";
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
      return "ATOMIC_MASKED_CS";
    case MLX5_OPCODE_ATOMIC_MASKED_FA:
      return "ATOMIC_MASKED_FA";
    case MLX5_OPCODE_FMR:
      return "FMR";
    case MLX5_OPCODE_LOCAL_INVAL:
      return "LOCAL_INVAL";
    case MLX5_OPCODE_CONFIG_CMD:
      return "CONFIG_CMD";
    case MLX5_OPCODE_SET_PSV:
      return "SET_PSV";
    case MLX5_OPCODE_UMR:
      return "UMR";
    case MLX5_OPCODE_TAG_MATCHING:
      return "TAG_MATCHING";
    case MLX5_OPCODE_FLOW_TBL_ACCESS:
      return "FLOW_TBL_ACCESS";
    case MLX5_OPCODE_MMO:
      return "MMO";
    default:
      return "unknown";
  }
}

std::string_view fence_name(uint8_t fm_ce_se) noexcept {
  switch (fm_ce_se & kFenceMask) {
    case kFenceNone:
      return "none";
    case kFenceInitiatorSmall:
      return "initiator-small";
    case kFenceFence:
      return "fence";
    case kFenceStrongOrdering:
      return "strong-ordering";
    case kFenceSmallAndFence:
      return "small-and-fence";
    default:
      return "reserved";
  }
}

void write_cqe(mlx5_cqe64* c, const CqeFields& f, uint8_t owner) noexcept {
  // Everything but op_own first; op_own (opcode + owner) is the publish step.
  uint8_t* raw = reinterpret_cast<uint8_t*>(c);
  std::memset(raw, 0, 63);
  if (f.opcode == MLX5_CQE_REQ_ERR || f.opcode == MLX5_CQE_RESP_ERR) {
    auto* e = reinterpret_cast<mlx5_err_cqe*>(c);
    e->syndrome = f.syndrome;
    e->vendor_err_synd = f.vendor_syndrome;
    store_be(&e->s_wqe_opcode_qpn, (uint32_t{f.send_opcode} << 24) | (f.qpn & kCqeQpnMask));
    store_be(&e->wqe_counter, f.wqe_counter);
  } else {
    store_be(&c->byte_cnt, f.byte_cnt);
    store_be(&c->imm_inval_pkey, f.imm_inval);
    store_be(&c->sop_drop_qpn, (uint32_t{f.send_opcode} << 24) | (f.qpn & kCqeQpnMask));
    store_be(&c->wqe_counter, f.wqe_counter);
  }
  const uint8_t op_own =
      static_cast<uint8_t>((f.opcode << 4) | (f.solicited ? 2 : 0) | (owner & MLX5_CQE_OWNER_MASK));
  __atomic_store_n(&c->op_own, op_own, __ATOMIC_RELEASE);
}

}  // namespace rdmx::mlx5::prm
