// Memory ordering for doorbells (PRM doorbell sequence; rdma-core post_send_db, DPDK
// mlx5_doorbell_ring). On x86 stores are ordered with each other except against write-combining
// memory, so the "WC barrier" is an sfence and the others are compiler barriers plus release.
#pragma once

namespace rdmx::mlx5 {

// Orders prior WQE stores before the doorbell-record store (udma_to_device_barrier).
inline void wmb_to_device() noexcept {
#if defined(__SANITIZE_THREAD__)
  // TSan does not model fences (gcc rejects them under -fsanitize=thread); the doorbell-record
  // stores that follow are release stores, which is what TSan checks.
  asm volatile("" ::: "memory");
#else
  __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

// Flushes write-combining stores (BlueFlame) before/after the register write (mmio_flush_writes).
inline void wc_flush() noexcept {
#if defined(__x86_64__)
  asm volatile("sfence" ::: "memory");
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

}  // namespace rdmx::mlx5
