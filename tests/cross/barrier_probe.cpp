// Out-of-line copies of the queue code's device-ordering sequences, compiled on their own (also
// with a cross compiler) so that scripts/check-barriers.sh can read the instructions around the
// doorbell and the CQE ownership read in the object code. Not linked into anything.
#include <cstdint>

#include <rdmx/mlx5/qp.hpp>
#include <rdmx/mlx5/sq.hpp>

using rdmx::mlx5::CqPoller;
using rdmx::mlx5::RqWriter;
using rdmx::mlx5::SqWriter;

// Send doorbell: WQEs, barrier, doorbell record, WC barrier, 64-bit register store, WC barrier.
extern "C" void probe_sq_doorbell(SqWriter* sq) noexcept {
  sq->ring_doorbell();
}

// Receive doorbell: barrier, doorbell record.
extern "C" void probe_rq_doorbell(RqWriter* rq) noexcept {
  rq->ring_doorbell();
}

// CQE read: owner byte, device read barrier, then a field of the CQE (byte count).
extern "C" uint32_t probe_cqe_read(const CqPoller* cq) noexcept {
  const mlx5_cqe64* c = cq->peek();
  return c ? rdmx::mlx5::prm::cqe_byte_cnt(c) : 0xffffffffu;
}
