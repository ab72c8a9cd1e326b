// An emulated device with an arena, a window pool and one poll core (the umr and io tests), and
// a plain peer QP on the other side of the wire (io tests).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mlx5/qp.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

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
  size_t arena_bytes = 8u << 20;
  uint32_t cache_size = 64;
};

// Declared in destruction order (core first, device last).
struct Node {
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<win::WindowPool> pool;
  std::unique_ptr<win::PollCore> core;
  std::vector<uint64_t> pages;  // every chunk page of the arena's data part, in order

  ~Node() {
    if (core) core->quiesce();
    core.reset();
    pool.reset();
    arena.reset();
    dev.reset();
  }
  // Arena + pool + poll core on `dev` (already open).
  void build(const NodeConfig& nc) {
    mem::ArenaConfig ac;
    ac.bytes = nc.arena_bytes;
    ac.source = mem::Source::kHeap;
    arena = need(mem::Arena::create(*dev, ac), "arena");
    win::PoolConfig pc;
    pc.n_windows = nc.n_windows;
    pc.max_pages = nc.max_pages;
    pool = need(win::WindowPool::create(*dev, *arena, pc), "window pool");
    win::CoreConfig cc;
    cc.cache_size = nc.cache_size;
    core = need(win::PollCore::create(*pool, cc), "poll core");
    for (uint32_t i = 0; i < arena->n_pages(); ++i) pages.push_back(arena->page_addr(i));
  }
  void to_rts_unconnected() {
    const auto q = core->qp_handle();
    need(dev->modify_qp(q, mlx5::QpState::kInit), "modify_qp init");
    need(dev->modify_qp(q, mlx5::QpState::kRtr), "modify_qp rtr");
    need(dev->modify_qp(q, mlx5::QpState::kRts), "modify_qp rts");
  }
};

}  // namespace rdmx::perf
