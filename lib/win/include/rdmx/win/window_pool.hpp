// The window pool: every window of one device (created at setup through
// Device::create_window_mkey), their pointer-mode KLM arrays inside the arena, the shared depot,
// and the state checker. Shared by the poll cores of that device; only the depot is touched
// concurrently (an rte_ring, multi-producer/multi-consumer, used in bursts).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mlx5/device.hpp>
#include <rdmx/win/key_gen.hpp>
#include <rdmx/win/window.hpp>

namespace rdmx::win {

struct PoolConfig {
  uint32_t n_windows = 256;       // all windows of the pool (N per core x cores)
  uint32_t max_pages = 16;        // translation entries per window (chunk pages per map)
  bool remote_invalidate = true;  // windows may be freed by a peer's SEND_WITH_INV
  // Inline translation lists up to this many KLMs (0 = the device's max_inline_klm; never
  // above it nor above the PRM limit of 52); longer lists use pointer mode.
  uint32_t max_inline_klm = 0;
  uint32_t max_cores = 64;
  // The key each map gives a window (key_gen.hpp, doc/guides/security.md): kRandom draws it
  // from a per-core AES-CTR generator keyed from getrandom(2) at core creation; kIncrement
  // (previous + 1) is for debugging only. key_seed != 0 makes every core's stream deterministic
  // (seed and core id; tests only).
  KeyPolicy key_policy = KeyPolicy::kRandom;
  uint64_t key_seed = 0;
  // Isolation (doc/guides/security.md): the pool allocates its own protection domain, registers
  // the arena again in it (its own parent MR: parent_lkey()) and creates its windows and its
  // cores' QPs there. A remote access through another pool's QP naming one of these windows is
  // refused by the device (PD check), whatever the key. Give each peer its own pool (and core).
  // Local SGEs over arena memory on such a core use parent_lkey(), not the arena's lkey.
  bool own_pd = false;
};

// What check_windows() counted.
struct Census {
  uint32_t total = 0;
  uint32_t cache = 0;
  uint32_t unmapping = 0;
  uint32_t depot = 0;
  uint32_t mapped = 0;
  uint32_t dirty = 0;
};

class WindowPool {
 public:
  // Setup path. The arena must be the one registered on `dev` and not yet sealed when pointer
  // mode is needed (max_pages > inline limit): the KLM arrays are reserved at its tail.
  static Result<std::unique_ptr<WindowPool>> create(mlx5::Device& dev, mem::Arena& arena,
                                                    const PoolConfig& cfg);
  // The most arena bytes create() reserves at the arena's tail for `cfg` (the pointer-mode KLM
  // arrays, whole pages of `page_size`): size an arena as data pages + this. The bound holds for
  // every device (whether a device needs pointer mode depends on its inline-UMR limit).
  static size_t arena_tail_bytes(const PoolConfig& cfg, uint32_t page_size) noexcept;
  // The most KLMs a map on such a pool writes inline into its UMR WQE on `caps`' device: the
  // configured limit, never above the device's (caps.max_inline_klm, from max_wqe_sz_sq) nor
  // the PRM's 52. A pool whose max_pages exceeds it keeps pointer-mode KLM arrays in the arena.
  static uint32_t inline_limit(const mlx5::DeviceCaps& caps, const PoolConfig& cfg) noexcept;
  ~WindowPool();  // destroys the mkeys; every PollCore must be gone
  WindowPool(const WindowPool&) = delete;
  WindowPool& operator=(const WindowPool&) = delete;

  mlx5::Device& device() noexcept { return *dev_; }
  mem::Arena& arena() noexcept { return *arena_; }
  const PoolConfig& config() const noexcept { return cfg_; }
  uint32_t max_pages() const noexcept { return cfg_.max_pages; }
  uint32_t inline_klm_limit() const noexcept { return inline_limit_; }
  uint32_t n_windows() const noexcept { return cfg_.n_windows; }
  // The PD of the windows and of the cores' QPs (mlx5::kDefaultPd unless own_pd).
  uint32_t pd() const noexcept { return pd_; }
  // The lkey of the arena in pd(): the KLM entries' key, and the one local SGEs use.
  uint32_t parent_lkey() const noexcept { return parent_lkey_; }
  Window& window(uint32_t id) noexcept { return windows_[id]; }
  // The pointer-mode KLM array of window `id` in the arena (0 when the pool needs none).
  uint64_t klm_array(uint32_t id) const noexcept {
    return klm_base_ ? klm_base_ + uint64_t{klm_stride_} * id : 0;
  }
  const Window& window(uint32_t id) const noexcept { return windows_[id]; }
  // The pool's window with this mkey index, or nullptr. Hot-path safe (open addressing).
  Window* find(uint32_t mkey) noexcept;
  // True when `w` points at one of this pool's windows.
  bool owns(const Window* w) const noexcept {
    const auto p = reinterpret_cast<uintptr_t>(w);
    const auto b = reinterpret_cast<uintptr_t>(windows_.get());
    return p >= b && p < b + sizeof(Window) * cfg_.n_windows && (p - b) % sizeof(Window) == 0;
  }

  // Depot (hot-path safe, any core). Burst get: up to n windows. Put: all of them (the depot
  // holds every window of the pool, so it cannot be full).
  uint32_t depot_get(Window** out, uint32_t n) noexcept;
  void depot_put(Window* const* ws, uint32_t n) noexcept;
  uint32_t depot_count() const noexcept;

  // The state checker (debug command; O(windows)). Proves that every window is in exactly one
  // of {a core's cache (kCache/kUnmapping), depot, mapped}, that its recorded state and owner
  // agree with where it was found, and that none is lost. Call only while no core is running
  // (it briefly empties and refills the depot). Returns the counts, or kState with a message
  // naming the first inconsistency.
  Result<Census> check_windows();

  // Setup path, used by PollCore.
  Result<uint16_t> attach_core(PollCore* core);
  void detach_core(uint16_t id) noexcept;

 private:
  WindowPool() = default;

  // create()'s steps after the configuration check.
  Status open_own_pd();
  Status reserve_klm_arrays();
  Status create_depot();
  Status create_windows();
  Status index_window(uint32_t id);

  // check_windows()'s state and its three walks: the core caches, the depot, the rest.
  struct CheckState;
  void check_caches(CheckState& st) const;
  void check_depot(CheckState& st);
  void check_unowned(CheckState& st) const;

  mlx5::Device* dev_ = nullptr;
  mem::Arena* arena_ = nullptr;
  PoolConfig cfg_;
  uint32_t inline_limit_ = 0;
  uint32_t pd_ = mlx5::kDefaultPd;
  uint32_t parent_lkey_ = 0;
  uint64_t klm_base_ = 0;  // the windows' KLM arrays, klm_stride_ bytes apart (pointer mode)
  uint32_t klm_stride_ = 0;
  mlx5::MrInfo own_mr_{};  // own_pd: the arena registered in pd_
  bool own_pd_ = false;
  std::unique_ptr<Window[]> windows_;
  std::unique_ptr<uint32_t[]> hash_keys_;  // mkey index + 1 (0 = empty)
  std::unique_ptr<uint32_t[]> hash_ids_;
  uint32_t hash_mask_ = 0;
  void* depot_ = nullptr;  // rte_ring*
  std::vector<PollCore*> cores_;
};

}  // namespace rdmx::win
