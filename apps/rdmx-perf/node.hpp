// An emulated device with an arena, a window pool and one poll core (the umr and io tests).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mlx5/qp.hpp>
#include <rdmx/win/poll_core.hpp>

namespace rdmx::perf {

template <class T>
T need(Result<T> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message);
  return std::move(r).value();
}
inline void need(const Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.error().message);
}

struct NodeConfig {
  uint32_t max_pages = 256;
  uint32_t n_windows = 256;
  size_t data_bytes = 8u << 20;  // the arena's mappable part (the builder adds the pool's tail)
  uint32_t cache_size = 64;
  win::KeyPolicy key_policy = win::KeyPolicy::kRandom;
  uint32_t memory_windows = 0;  // type-2 memory windows of the core (arena gets MW_BIND)
  // The arena MR's rights: remote bits only when a peer is given the arena's own rkey (the
  // register-once peers).
  uint32_t arena_access = mlx5::kAccessLocalWrite;
};

// One endpoint (lib/endpoint's builder: device, arena, pool, one core) on an emulated device,
// and every chunk page of its arena in order.
struct Node {
  endpoint::Endpoint ep;
  emu::EmuDevice* emu = nullptr;
  std::vector<uint64_t> pages;

  Node(endpoint::OpenedDevice d, const NodeConfig& nc) {
    if (!d.emu)
      throw std::runtime_error("device " + d.dev->name() + " (" + d.backend +
                               ") is not an emulated device");
    endpoint::EndpointConfig ec;
    ec.arena.bytes = nc.data_bytes;
    ec.arena.source = mem::Source::kHeap;
    ec.arena.access = nc.arena_access;
    ec.pool.n_windows = nc.n_windows;
    ec.pool.max_pages = nc.max_pages;
    ec.pool.key_policy = nc.key_policy;
    ec.core.cache_size = nc.cache_size;
    if (nc.memory_windows) {
      ec.arena.access |= mlx5::kAccessMwBind;
      ec.core.memory_windows = nc.memory_windows;
    }
    ep = need(endpoint::Endpoint::create(std::move(d), ec), "endpoint");
    emu = ep.emu();
    for (uint32_t i = 0; i < ep.arena().n_pages(); ++i) pages.push_back(ep.arena().page_addr(i));
  }
  win::PollCore& core() { return ep.core(); }
  // RTS without a peer (emu-sink completes everything it is given).
  void to_rts_unconnected() {
    const auto q = core().qp_handle();
    need(ep.device().modify_qp(q, mlx5::QpState::kInit), "modify_qp init");
    need(ep.device().modify_qp(q, mlx5::QpState::kRtr), "modify_qp rtr");
    need(ep.device().modify_qp(q, mlx5::QpState::kRts), "modify_qp rts");
  }
};

}  // namespace rdmx::perf
