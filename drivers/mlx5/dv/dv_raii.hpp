// Private to drivers/mlx5/dv: owning handles for verbs objects, so that a half-built device or
// queue pair releases what it got when a later step fails (no leak on partial failure).
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

namespace rdmx::dv::detail {

template <class T, auto Fn>
struct Release {
  void operator()(T* p) const noexcept {
    if (p) (void)Fn(p);
  }
};

inline int destroy_cq_ex(ibv_cq_ex* cq) {
  return ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}
inline int free_device_list(ibv_device** l) {
  ibv_free_device_list(l);
  return 0;
}
inline int destroy_event_channel(rdma_event_channel* ch) {
  rdma_destroy_event_channel(ch);
  return 0;
}
inline int free_addrinfo(rdma_addrinfo* ai) {
  rdma_freeaddrinfo(ai);
  return 0;
}

using DeviceListPtr = std::unique_ptr<ibv_device*, Release<ibv_device*, free_device_list>>;
using ContextPtr = std::unique_ptr<ibv_context, Release<ibv_context, ibv_close_device>>;
using PdPtr = std::unique_ptr<ibv_pd, Release<ibv_pd, ibv_dealloc_pd>>;  // PD or parent domain
using TdPtr = std::unique_ptr<ibv_td, Release<ibv_td, ibv_dealloc_td>>;
using MrPtr = std::unique_ptr<ibv_mr, Release<ibv_mr, ibv_dereg_mr>>;
using CqPtr = std::unique_ptr<ibv_cq_ex, Release<ibv_cq_ex, destroy_cq_ex>>;
using QpPtr = std::unique_ptr<ibv_qp, Release<ibv_qp, ibv_destroy_qp>>;
using MwPtr = std::unique_ptr<ibv_mw, Release<ibv_mw, ibv_dealloc_mw>>;
using MkeyPtr = std::unique_ptr<mlx5dv_mkey, Release<mlx5dv_mkey, mlx5dv_destroy_mkey>>;
using EventChannelPtr =
    std::unique_ptr<rdma_event_channel, Release<rdma_event_channel, destroy_event_channel>>;
using CmIdPtr = std::unique_ptr<rdma_cm_id, Release<rdma_cm_id, rdma_destroy_id>>;
using AddrInfoPtr = std::unique_ptr<rdma_addrinfo, Release<rdma_addrinfo, free_addrinfo>>;

}  // namespace rdmx::dv::detail
