// Memory ordering between the CPU and the NIC, per architecture, with the semantics of
// rdma-core's util/udma_barrier.h (the barriers providers/mlx5 uses around its doorbells and
// CQE reads). C++ fences are not enough: __atomic_thread_fence orders memory for other CPUs
// only (aarch64 "dmb ish", the inner-shareable domain); a PCIe device sits in the outer-shareable
// domain, and the write-combining UAR page needs a completion barrier (DSB), not an ordering one.
//
//                      rdma-core name             x86-64            aarch64
//   wmb_to_device()    udma_to_device_barrier     compiler only     dmb oshst
//   wc_flush()         mmio_flush_writes          sfence            dsb st
//   rmb_from_device()  udma_from_device_barrier   lfence            dmb oshld
//
// Doorbell (rdma-core providers/mlx5/qp.c post_send_db; PRM "Doorbell" sequence):
//   WQE stores; wmb_to_device(); doorbell record; wc_flush() (mmio_wc_start);
//   64-bit UAR store; wc_flush().
// Completion (rdma-core providers/mlx5/cq.c get_next_cqe): read op_own, check the owner bit;
//   rmb_from_device() before reading the rest of the CQE.
//
// x86-64 note (udma_barrier.h): udma_to_device_barrier is a compiler barrier because x86 does not
// reorder stores to write-back memory; callers that use non-temporal stores into WQEs must
// sfence themselves (rdmx never does).
#pragma once

#if !defined(__x86_64__) && !defined(__aarch64__)
// Add the barriers rdma-core's util/udma_barrier.h uses for the new architecture before porting.
#error "rdmx/mlx5/barrier.hpp: no NIC memory barriers for this architecture"
#endif

namespace rdmx::mlx5 {

// Orders every prior store (WQEs, receive WQEs) before the doorbell-record store that follows,
// as the device observes them (udma_to_device_barrier).
inline void wmb_to_device() noexcept {
#if defined(__aarch64__)
  asm volatile("dmb oshst" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

// Completes prior stores, including write-combining (UAR/BlueFlame) ones, before any later
// store: between the doorbell record and the register write, and after the register write
// (mmio_flush_writes; mmio_wc_start is the same barrier).
inline void wc_flush() noexcept {
#if defined(__aarch64__)
  asm volatile("dsb st" ::: "memory");
#else
  asm volatile("sfence" ::: "memory");
#endif
}

// After the owner bit of a CQE said the CQE is software's: later loads (the rest of the CQE) see
// everything the device wrote before it (udma_from_device_barrier).
inline void rmb_from_device() noexcept {
#if defined(__aarch64__)
  asm volatile("dmb oshld" ::: "memory");
#else
  asm volatile("lfence" ::: "memory");
#endif
}

}  // namespace rdmx::mlx5
