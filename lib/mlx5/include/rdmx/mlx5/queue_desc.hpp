// What a device hands a poll core for one queue pair: the memory the rings live in, as
// mlx5dv_init_obj exposes it for a real QP and as the emulated device lays it out.
#pragma once

#include <cstdint>

namespace rdmx::mlx5 {

// Called after the doorbell register write. Real devices leave it empty; the emulated device in
// inline mode processes the queue synchronously here. At most one indirect call per burst.
struct DoorbellHook {
  void (*fn)(void* ctx) noexcept = nullptr;
  void* ctx = nullptr;
  void operator()() const noexcept {
    if (fn) fn(ctx);
  }
};

struct SqDesc {
  void* buf = nullptr;                 // wqe_cnt * 64 bytes
  uint32_t wqe_cnt = 0;                // ring size in WQEBBs, power of two
  volatile uint32_t* dbrec = nullptr;  // send doorbell record (BE32 producer counter & 0xffff)
  volatile uint64_t* reg = nullptr;    // doorbell / BlueFlame register (8-byte writes)
  uint32_t bf_size = 0;                // BlueFlame buffer size; 0 = plain doorbell
  DoorbellHook hook;
};

struct RqDesc {
  void* buf = nullptr;                 // wqe_cnt * stride bytes
  uint32_t wqe_cnt = 0;                // power of two
  uint32_t stride = 0;                 // bytes per receive WQE (n * 16)
  volatile uint32_t* dbrec = nullptr;  // receive doorbell record (BE32 counter & 0xffff)
  DoorbellHook hook;
};

struct CqDesc {
  void* buf = nullptr;                 // cqe_cnt * 64 bytes
  uint32_t cqe_cnt = 0;                // power of two
  volatile uint32_t* dbrec = nullptr;  // CQ doorbell record (BE32 consumer index & 0xffffff)
  uint32_t cqn = 0;
};

struct QpDesc {
  uint32_t qpn = 0;
  SqDesc sq;
  RqDesc rq;
  CqDesc cq;  // one CQ for send and receive completions
};

}  // namespace rdmx::mlx5
