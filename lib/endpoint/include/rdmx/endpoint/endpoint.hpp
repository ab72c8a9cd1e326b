// The endpoint builder: an opened device with its arena, window pool and poll cores, created in
// that order and destroyed in the reverse order (cores, pool, arena, device, wire). What the C
// API's rdmx_port, rdmx-perf and the test rigs would otherwise each assemble by hand.
//
// The arena is sized by the pool: EndpointConfig::arena.bytes is the data part the caller
// wants (chunk pages a window may map), and create() adds what WindowPool::create reserves at
// the arena's tail for its pointer-mode KLM arrays (WindowPool::arena_tail_bytes), so the data
// part keeps every page asked for. With a caller's buffer (mem::Source::kUser) the buffer is
// the arena: the tail comes out of it.
//
// Setup path only; an Endpoint is not thread-safe (its cores are: one thread each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

namespace rdmx::endpoint {

struct EndpointConfig {
  mem::ArenaConfig arena;  // .bytes: the data part wanted (kUser: the buffer's size)
  win::PoolConfig pool;
  win::CoreConfig core;  // every core create() makes
  uint32_t n_cores = 1;  // may be 0: add_core() later
};

// The bytes create() registers for `cfg`: the data part rounded up to whole chunk pages plus
// the pool's tail (kUser: the buffer's size).
size_t arena_bytes_needed(const EndpointConfig& cfg) noexcept;

class Endpoint {
 public:
  // Takes the device (open_device / open_device_pair) and builds arena, pool and n_cores
  // cores on it. Errors carry what failed ("arena: ...", "window pool: ...", "core 2: ...").
  static Result<Endpoint> create(OpenedDevice dev, const EndpointConfig& cfg);

  Endpoint() = default;
  Endpoint(Endpoint&&) noexcept = default;
  Endpoint& operator=(Endpoint&& o) noexcept;
  ~Endpoint();  // destroy_cores(), then pool, arena, device, wire

  mlx5::Device& device() noexcept { return *dev_.dev; }
  emu::EmuDevice* emu() const noexcept { return dev_.emu; }  // nullptr on mlx5
  const std::string& backend() const noexcept { return dev_.backend; }
  mem::Arena& arena() noexcept { return *arena_; }
  const mem::Arena& arena() const noexcept { return *arena_; }
  win::WindowPool& pool() noexcept { return *pool_; }

  uint32_t n_cores() const noexcept { return static_cast<uint32_t>(cores_.size()); }
  win::PollCore& core(uint32_t i = 0) noexcept { return *cores_[i]; }
  // One more core on the pool (its QP in reset state: connect_cores / connect_core).
  Result<win::PollCore*> add_core(const win::CoreConfig& cc);
  // One more core for one peer, isolated from every other core's peer: it gets a window pool
  // of its own (`n_windows` windows, the endpoint pool's other settings) in a protection domain
  // of its own (PoolConfig::own_pd: the arena registered again there), and its QP is made in
  // that PD. A remote access arriving on this core's QP through a window of any other pool is
  // refused by the device (PD check), and the other cores' QPs cannot use this core's windows.
  // Local SGEs over the arena on this core use core_lkey(). The pool is destroyed with the core.
  // Its windows must hold their translation inline (max_pages <= the device's inline KLM
  // limit): pointer-mode tables come out of the arena's tail, which is fixed once the arena
  // has been carved; kUnsupported otherwise.
  Result<win::PollCore*> add_isolated_core(const win::CoreConfig& cc, uint32_t n_windows);
  // The lkey of the arena for local SGEs on `c`: the endpoint pool's, or an isolated core's own.
  uint32_t core_lkey(const win::PollCore& c) const noexcept;
  // The window pool `c` maps from (the endpoint's, or an isolated core's own), or nullptr.
  win::WindowPool* core_pool(const win::PollCore& c) noexcept;
  // Destroys one core of this endpoint (quiesced by ~PollCore); false when it is not one.
  bool remove_core(win::PollCore* c) noexcept;
  // Destroys every core, last made first (the pool and arena stay).
  void destroy_cores() noexcept;

 private:
  void destroy() noexcept;

  OpenedDevice dev_;  // declared first: destroyed last
  std::unique_ptr<mem::Arena> arena_;
  std::unique_ptr<win::WindowPool> pool_;
  std::vector<std::unique_ptr<win::PollCore>> cores_;
  // Isolated cores' own pools (destroyed after their core).
  struct OwnPool {
    const win::PollCore* core;
    std::unique_ptr<win::WindowPool> pool;
  };
  std::vector<OwnPool> own_pools_;
};

// Connects core i of `a` to core i of `b` for every i both have (connect_cores).
Status connect_endpoints(Endpoint& a, Endpoint& b);

}  // namespace rdmx::endpoint
