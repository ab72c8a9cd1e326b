#include <cstdio>
#include <cstdlib>
#include <string>

#include <rdmx/core/log.hpp>
#include <rdmx/mlx5/prm/defs.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

#include "dpdk_ring.hpp"

namespace rdmx::win {

const char* window_state_name(WindowState s) noexcept {
  switch (s) {
    case WindowState::kCache:
      return "cache";
    case WindowState::kUnmapping:
      return "unmapping";
    case WindowState::kDepot:
      return "depot";
    case WindowState::kMapped:
      return "mapped";
  }
  return "unknown";
}

namespace {

// "window 3 (mkey 0x1234, state mapped, owner 0)": how check_windows names a window.
std::string describe(const Window& w) {
  char b[16];
  std::snprintf(b, sizeof b, "%x", w.rkey());
  return "window " + std::to_string(w.id()) + " (mkey 0x" + b + ", state " +
         window_state_name(w.state()) + ", owner " + std::to_string(w.owner()) + ")";
}

// One window's pointer-mode KLM array: its translation entries (a multiple of 4, PRM), 2 KiB
// aligned (PRM, mlx5-facts.md).
uint32_t klm_array_stride(uint32_t max_pages) noexcept {
  return (mlx5::prm::align4(max_pages) * mlx5::prm::kKlmBytes + mlx5::prm::kKlmPtrAlign - 1) &
         ~(mlx5::prm::kKlmPtrAlign - 1);
}
uint32_t pow2_at_least(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}
uint32_t hash_index(uint32_t idx) {
  return idx * 0x9e3779b1u;
}
rte_ring* ring(void* p) {
  return static_cast<rte_ring*>(p);
}
}  // namespace

size_t WindowPool::arena_tail_bytes(const PoolConfig& cfg, uint32_t page_size) noexcept {
  const size_t bytes = size_t{klm_array_stride(cfg.max_pages)} * cfg.n_windows;
  return (bytes + page_size - 1) / page_size * page_size;
}

uint32_t WindowPool::inline_limit(const mlx5::DeviceCaps& caps, const PoolConfig& cfg) noexcept {
  // Never above what the device's QPs take (caps.max_inline_klm, from HCA cap max_wqe_sz_sq:
  // prm::max_inline_klm_for): a longer inline UMR is an oversized WQE and puts the QP in error.
  // A smaller configured limit is honoured (maps above it use pointer mode).
  uint32_t lim = caps.max_inline_klm;
  if (cfg.max_inline_klm && cfg.max_inline_klm < lim) lim = cfg.max_inline_klm;
  if (lim > mlx5::prm::kMaxInlineKlm) lim = mlx5::prm::kMaxInlineKlm;
  return lim;
}

namespace {

Status check_config(const mlx5::DeviceCaps& caps, const PoolConfig& cfg) {
  if (cfg.n_windows == 0 || cfg.n_windows > (1u << 24))
    return make_error(Errc::kInvalidArgument, "window pool: n_windows must be 1..2^24");
  if (cfg.max_pages == 0) return make_error(Errc::kInvalidArgument, "window pool: max_pages 0");
  if (caps.max_klm_list && cfg.max_pages > caps.max_klm_list)
    return make_error(Errc::kUnsupported, "window pool: max_pages " +
                                              std::to_string(cfg.max_pages) +
                                              " exceeds the device's max_klm_list " +
                                              std::to_string(caps.max_klm_list));
  if (cfg.max_cores == 0 || cfg.max_cores >= kNoCore)
    return make_error(Errc::kInvalidArgument, "window pool: max_cores");
  return {};
}

}  // namespace

Result<std::unique_ptr<WindowPool>> WindowPool::create(mlx5::Device& dev, mem::Arena& arena,
                                                       const PoolConfig& cfg) {
  RDMX_TRY(check_config(dev.caps(), cfg));
  std::unique_ptr<WindowPool> p(new WindowPool());
  p->dev_ = &dev;
  p->arena_ = &arena;
  p->cfg_ = cfg;
  p->inline_limit_ = inline_limit(dev.caps(), cfg);
  p->parent_lkey_ = arena.lkey();
  if (cfg.own_pd) RDMX_TRY(p->open_own_pd());
  RDMX_TRY(p->reserve_klm_arrays());
  p->windows_ = std::make_unique<Window[]>(cfg.n_windows);
  const uint32_t hcap = pow2_at_least(cfg.n_windows * 2);
  p->hash_mask_ = hcap - 1;
  p->hash_keys_ = std::make_unique<uint32_t[]>(hcap);
  p->hash_ids_ = std::make_unique<uint32_t[]>(hcap);
  RDMX_TRY(p->create_depot());
  RDMX_TRY(p->create_windows());
  RDMX_LOG_DEBUG("window pool: %u windows x %u pages, inline up to %u KLMs%s", cfg.n_windows,
                 cfg.max_pages, p->inline_limit_, p->klm_base_ ? ", pointer mode above" : "");
  return p;
}

// A PD of the pool's own, and the arena registered in it (the windows' parent lkey).
Status WindowPool::open_own_pd() {
  RDMX_TRY_ASSIGN(pd_, dev_->alloc_pd(), "window pool: own PD");
  own_pd_ = true;
  const mlx5::MrInfo& am = arena_->mr();
  RDMX_TRY_ASSIGN(own_mr_,
                  dev_->reg_mr_in_pd(reinterpret_cast<void*>(am.addr), am.length, am.access, pd_),
                  "window pool: the arena in its own PD");
  parent_lkey_ = own_mr_.lkey;
  return {};
}

// Pointer-mode KLM arrays: one per window, 2 KiB aligned (PRM; doc/guides/mlx5-facts.md §2.6), in
// the registered arena's reserved tail (never a mappable chunk page). None when every map fits
// inline.
Status WindowPool::reserve_klm_arrays() {
  klm_stride_ = klm_array_stride(cfg_.max_pages);
  if (cfg_.max_pages <= inline_limit_) return {};
  auto r = arena_->reserve_tail(size_t{klm_stride_} * cfg_.n_windows, mlx5::prm::kKlmPtrAlign);
  if (!r) return make_error(r.error().code, "window pool: KLM arrays: " + r.error().message);
  klm_base_ = r.value();
  return {};
}

// Depot: an rte_ring over our own memory (rte_ring_init needs no EAL, so EAL-less tests and
// tools use the same code as DPDK apps). MP/MC: any core may refill or flush. Exact size n
// (>= every window) so a put never fails.
Status WindowPool::create_depot() {
  const uint32_t ring_cap = pow2_at_least(cfg_.n_windows + 1);
  const ssize_t ring_bytes = rte_ring_get_memsize(ring_cap);
  if (ring_bytes < 0) return make_error(Errc::kInvalidArgument, "window pool: depot size");
  void* mem =
      std::aligned_alloc(kCacheLine, (size_t(ring_bytes) + kCacheLine - 1) & ~(kCacheLine - 1));
  if (!mem) return make_error(Errc::kNoMemory, "window pool: depot allocation");
  if (rte_ring_init(ring(mem), "rdmx_win_depot", ring_cap, 0) != 0) {
    std::free(mem);
    return make_error(Errc::kDeviceError, "window pool: rte_ring_init failed");
  }
  depot_ = mem;
  return {};
}

// One indirect mkey per window, each indexed and put in the depot.
Status WindowPool::create_windows() {
  for (uint32_t i = 0; i < cfg_.n_windows; ++i) {
    auto mk = dev_->create_window_mkey_in_pd(cfg_.max_pages, cfg_.remote_invalidate, pd_);
    if (!mk) {
      // Windows made so far are destroyed by ~WindowPool (n_windows is shrunk to i).
      cfg_.n_windows = i;
      return make_error(mk.error().code, "window pool: create_window_mkey #" + std::to_string(i) +
                                             ": " + mk.error().message);
    }
    Window& w = windows_[i];
    w.mkey_base_ = mk.value() & ~0xffu;
    w.key_ = static_cast<uint8_t>(mk.value() & 0xff);
    w.id_ = i;
    w.state_ = WindowState::kDepot;
    w.owner_ = kNoCore;
    RDMX_TRY(index_window(i));
    Window* wp = &w;
    depot_put(&wp, 1);
  }
  return {};
}

// Hash insert (mkey index -> window id), for find().
Status WindowPool::index_window(uint32_t id) {
  const uint32_t idx = windows_[id].mkey_base_ >> 8;
  uint32_t h = hash_index(idx) & hash_mask_;
  while (hash_keys_[h] != 0) {
    if (hash_keys_[h] == idx + 1)
      return make_error(Errc::kDeviceError, "window pool: device returned mkey index twice");
    h = (h + 1) & hash_mask_;
  }
  hash_keys_[h] = idx + 1;
  hash_ids_[h] = id;
  return {};
}

WindowPool::~WindowPool() {
  RDMX_ASSERT(cores_.empty() || [&] {
    for (auto* c : cores_)
      if (c) return false;
    return true;
  }());
  // One line for all the windows that could not be destroyed (a peer that died leaves many
  // mapped; a line each said the same thing dozens of times).
  uint32_t failed = 0;
  std::string first;
  for (uint32_t i = 0; windows_ && i < cfg_.n_windows; ++i) {
    Status s = dev_->destroy_mkey(windows_[i].mkey_base_ | windows_[i].key_);
    if (!s && !failed++) first = s.error().message;
  }
  if (failed)
    RDMX_LOG_WARN("window pool: %u of %u windows not destroyed cleanly (the first: %s)", failed,
                  cfg_.n_windows, first.c_str());
  if (own_mr_.lkey) {
    Status s = dev_->dereg_mr(own_mr_);
    if (!s) RDMX_LOG_WARN("window pool: dereg_mr: %s", s.error().message.c_str());
  }
  if (own_pd_) {
    Status s = dev_->dealloc_pd(pd_);
    if (!s) RDMX_LOG_WARN("window pool: dealloc_pd: %s", s.error().message.c_str());
  }
  std::free(depot_);
}

Window* WindowPool::find(uint32_t mkey) noexcept {
  const uint32_t idx = mkey >> 8;
  uint32_t h = hash_index(idx) & hash_mask_;
  for (;;) {
    const uint32_t k = hash_keys_[h];
    if (k == 0) return nullptr;
    if (k == idx + 1) return &windows_[hash_ids_[h]];
    h = (h + 1) & hash_mask_;
  }
}

uint32_t WindowPool::depot_get(Window** out, uint32_t n) noexcept {
  return rte_ring_mc_dequeue_burst(ring(depot_), reinterpret_cast<void**>(out), n, nullptr);
}

void WindowPool::depot_put(Window* const* ws, uint32_t n) noexcept {
  const uint32_t put =
      rte_ring_mp_enqueue_bulk(ring(depot_), reinterpret_cast<void* const*>(ws), n, nullptr);
  RDMX_ASSERT(put == n);  // the depot holds every window: it cannot be full
}

uint32_t WindowPool::depot_count() const noexcept {
  return rte_ring_count(ring(depot_));
}

Result<uint16_t> WindowPool::attach_core(PollCore* core) {
  for (size_t i = 0; i < cores_.size(); ++i) {
    if (!cores_[i]) {
      cores_[i] = core;
      return static_cast<uint16_t>(i);
    }
  }
  if (cores_.size() >= cfg_.max_cores)
    return make_error(Errc::kNoMemory, "window pool: more than max_cores poll cores");
  cores_.push_back(core);
  return static_cast<uint16_t>(cores_.size() - 1);
}

void WindowPool::detach_core(uint16_t id) noexcept {
  if (id < cores_.size()) cores_[id] = nullptr;
}

// What check_windows() found so far: the windows seen, the counts, the first fault.
struct WindowPool::CheckState {
  const WindowPool& pool;
  std::vector<uint8_t> seen;
  Census c;
  std::string err;

  void fail(const Window* w, const std::string& what) {
    if (err.empty()) err = describe(*w) + ": " + what;
  }
  // A window's recorded UMR position is one of its owner's SQ: never past its producer.
  void position_ok(const Window* w, const PollCore* core) {
    if (w->umr_end_ > core->qp().sq().pi()) fail(w, "its last UMR is past its SQ's producer");
  }
  // Marks w seen; false (and a fault) if it is foreign or was seen already.
  bool visit(const Window* w, const char* where) {
    if (!pool.owns(w)) {
      if (err.empty()) err = std::string("a foreign pointer in ") + where;
      return false;
    }
    if (seen[w->id_]) {
      fail(w, std::string("found twice (again in ") + where + ")");
      return false;
    }
    seen[w->id_] = 1;
    return true;
  }
};

Result<Census> WindowPool::check_windows() {
  const uint32_t n = cfg_.n_windows;
  CheckState st{*this, std::vector<uint8_t>(n, 0), {}, {}};
  st.c.total = n;
  check_caches(st);
  check_depot(st);
  check_unowned(st);
  const Census& c = st.c;
  if (c.cache + c.unmapping + c.depot + c.mapped != n && st.err.empty())
    st.err = "counts do not add up to the pool size";
  if (!st.err.empty()) return make_error(Errc::kState, "check_windows: " + st.err);
  return c;
}

// Core caches: each window owned by its core, kCache or kUnmapping.
void WindowPool::check_caches(CheckState& st) const {
  for (size_t ci = 0; ci < cores_.size(); ++ci) {
    const PollCore* core = cores_[ci];
    if (!core) continue;
    const WindowCache& cache = core->cache();
    for (uint32_t i = 0; i < cache.len(); ++i) {
      const Window* w = cache.at(i);
      if (!st.visit(w, "a core cache")) continue;
      if (w->owner_ != ci) st.fail(w, "in core " + std::to_string(ci) + "'s cache");
      // A window recorded kUnmapping whose invalidate completed is counted as kCache
      // (PollCore::state_of); one recorded kCache has nothing in flight.
      st.position_ok(w, core);
      if (w->state_ == WindowState::kCache) {
        ++st.c.cache;
        if (!core->umrs_done(w)) st.fail(w, "kCache with UMRs in flight");
      } else if (w->state_ == WindowState::kUnmapping) {
        if (core->state_of(w) == WindowState::kCache)
          ++st.c.cache;
        else
          ++st.c.unmapping;
      } else {
        st.fail(w, "in a cache but not kCache/kUnmapping");
      }
      if (w->dirty_) ++st.c.dirty;
    }
  }
}

// Depot: drain, inspect, put back in the same order.
void WindowPool::check_depot(CheckState& st) {
  const uint32_t n = cfg_.n_windows;
  std::vector<Window*> dep(n + 1);
  const uint32_t nd = depot_get(dep.data(), n + 1);
  for (uint32_t i = 0; i < nd; ++i) {
    const Window* w = dep[i];
    if (!st.visit(w, "the depot")) continue;
    ++st.c.depot;
    if (w->state_ != WindowState::kDepot) st.fail(w, "in the depot but not kDepot");
    if (w->owner_ != kNoCore) st.fail(w, "in the depot with an owner");
    if (w->umr_end_ != 0 || w->klm_end_ != 0) st.fail(w, "in the depot with a core's SQ position");
    if (w->dirty_) st.fail(w, "in the depot with unknown device state");
  }
  if (nd) depot_put(dep.data(), nd);
}

// Everything else must be mapped by a live core.
void WindowPool::check_unowned(CheckState& st) const {
  for (uint32_t i = 0; i < cfg_.n_windows; ++i) {
    const Window* w = &windows_[i];
    if (st.seen[i]) continue;
    if (w->state_ != WindowState::kMapped) {
      st.fail(w, "in no cache and not in the depot, but not mapped (lost)");
      continue;
    }
    ++st.c.mapped;
    if (w->dirty_) ++st.c.dirty;
    if (w->owner_ >= cores_.size() || !cores_[w->owner_])
      st.fail(w, "mapped by no live core");
    else
      st.position_ok(w, cores_[w->owner_]);
  }
}

}  // namespace rdmx::win
