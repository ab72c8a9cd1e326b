// CQE64 reader: owner bit, opcode, WQE counter, byte count, immediate / invalidated key, and
// error CQEs (syndrome, vendor syndrome) with a name for every syndrome mlx5dv.h defines.
#pragma once

#include <cstdint>
#include <string_view>

#include <infiniband/mlx5dv.h>
#include <rdmx/core/be.hpp>
#include <rdmx/mlx5/prm/defs.hpp>

namespace rdmx::mlx5::prm {

static_assert(sizeof(mlx5_cqe64) == 64 && sizeof(mlx5_err_cqe) == 64);

inline uint8_t cqe_opcode(const mlx5_cqe64* c) noexcept {
  return c->op_own >> 4;
}
inline uint8_t cqe_owner(const mlx5_cqe64* c) noexcept {
  return c->op_own & MLX5_CQE_OWNER_MASK;
}
inline bool cqe_solicited(const mlx5_cqe64* c) noexcept {
  return (c->op_own >> 1) & 1;
}
inline uint16_t cqe_wqe_counter(const mlx5_cqe64* c) noexcept {
  return load_be(&c->wqe_counter);
}
inline uint32_t cqe_byte_cnt(const mlx5_cqe64* c) noexcept {
  return load_be(&c->byte_cnt);
}
inline uint32_t cqe_imm_inval(const mlx5_cqe64* c) noexcept {
  return load_be(&c->imm_inval_pkey);
}
inline uint32_t cqe_qpn(const mlx5_cqe64* c) noexcept {
  return load_be(&c->sop_drop_qpn) & kCqeQpnMask;
}
// Requester CQEs: the opcode of the send WQE that completed.
inline uint8_t cqe_send_opcode(const mlx5_cqe64* c) noexcept {
  return static_cast<uint8_t>(load_be(&c->sop_drop_qpn) >> 24);
}
inline bool cqe_is_error(const mlx5_cqe64* c) noexcept {
  const uint8_t op = cqe_opcode(c);
  return op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR;
}
inline uint8_t cqe_syndrome(const mlx5_cqe64* c) noexcept {
  return reinterpret_cast<const mlx5_err_cqe*>(c)->syndrome;
}
inline uint8_t cqe_vendor_syndrome(const mlx5_cqe64* c) noexcept {
  return reinterpret_cast<const mlx5_err_cqe*>(c)->vendor_err_synd;
}

// The CQE at ring index `ci` is the software's when its opcode is valid and its owner bit
// equals the wrap parity of ci (n_cqe a power of two). Hardware flips what it writes on every
// pass; initialised CQEs carry MLX5_CQE_INVALID so the first pass never reads garbage.
inline bool cqe_is_sw_owned(const mlx5_cqe64* c, uint32_t ci, uint32_t n_cqe) noexcept {
  const uint8_t op_own = __atomic_load_n(&c->op_own, __ATOMIC_ACQUIRE);
  return (op_own >> 4) != MLX5_CQE_INVALID &&
         (op_own & MLX5_CQE_OWNER_MASK) == ((ci & n_cqe) ? 1 : 0);
}

// Names ("local-length", "remote-access", ...). Unknown values give "unknown-0xNN" style
// names through syndrome_name_buf; syndrome_name returns "unknown" for them.
std::string_view syndrome_name(uint8_t syndrome) noexcept;
std::string_view cqe_opcode_name(uint8_t opcode) noexcept;
std::string_view wqe_opcode_name(uint8_t opcode) noexcept;
std::string_view fence_name(uint8_t fm_ce_se) noexcept;

// Writers, used by the emulated device (and by tests): build a CQE64 with the owner bit of the
// pass `owner`, then publish op_own last with release ordering.
struct CqeFields {
  uint8_t opcode = MLX5_CQE_REQ;
  uint8_t send_opcode = 0;  // requester: WQE opcode
  uint32_t qpn = 0;
  uint16_t wqe_counter = 0;
  uint32_t byte_cnt = 0;
  uint32_t imm_inval = 0;  // host order; written big-endian
  bool solicited = false;
  uint8_t syndrome = 0;  // error CQEs
  uint8_t vendor_syndrome = 0;
};
void write_cqe(mlx5_cqe64* c, const CqeFields& f, uint8_t owner) noexcept;

}  // namespace rdmx::mlx5::prm
