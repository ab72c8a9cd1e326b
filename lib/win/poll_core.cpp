// PollCore setup, shutdown and QP-error recovery (cold paths). The hot path is in
// poll_core_datapath.cpp.
#define ALLOW_EXPERIMENTAL_API  // rte_vect_get_max_simd_bitwidth (experimental in DPDK 22.11)
#if defined(__x86_64__)
#include <immintrin.h>  // before the extern "C" block below (its guards then skip it there)
#endif
extern "C" {  // DPDK 22.11's rte_vect.h declares its functions without C linkage for C++
#include <rte_vect.h>
}

#include <algorithm>
#include <bit>
#include <chrono>
#include <string>

#include <rdmx/core/log.hpp>
#include <rdmx/mlx5/prm/defs.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/stats_registry.hpp>

namespace rdmx::win {

PollCore::PollCore(WindowPool& pool, const CoreConfig& cfg)
    : pool_(pool),
      arena_(pool.arena()),
      cfg_(cfg),
      windows_(pool.n_windows() ? &pool.window(0) : nullptr) {}

Result<std::unique_ptr<PollCore>> PollCore::create(WindowPool& pool, const CoreConfig& cfg) {
  if (cfg.cache_size < 2)
    return make_error(Errc::kInvalidArgument, "poll core: cache_size must be >= 2");
  if (cfg.signal_every == 0)
    return make_error(Errc::kInvalidArgument, "poll core: signal_every must be >= 1");
  std::unique_ptr<PollCore> c(new PollCore(pool, cfg));
  auto id = pool.attach_core(c.get());
  if (!id) return std::move(id).error();
  c->id_ = id.value();
  c->attached_ = true;
  c->stats_index_ = stats_register(&c->stats_);

  mlx5::QpDesc d;
  RDMX_TRY(c->create_qp(&d));
  c->parent_lkey_ = pool.parent_lkey();
  c->max_pages_ = pool.max_pages();
  c->inline_limit_ = pool.inline_klm_limit();
  // DeviceCaps::umr_fence is the HCA cap (0 strong, 1 small, 2 none); the UMR WQE itself carries
  // the matching fence, as the kernel's REG_MR does (doc/guides/mlx5-facts.md §5.1, §5.3).
  const mlx5::DeviceCaps& caps = pool.device().caps();
  c->umr_fence_ = mlx5::prm::umr_fence_bits(caps.umr_fence);
  c->no_atomic_mask_ = caps.umr_modify_atomic_disabled;
  RDMX_TRY(c->choose_klm_writer());
  for (uint32_t a = 0; a <= mlx5::kAccessAll; ++a)
    RDMX_ASSERT(kMkcAccess[a] == mlx5::mkc_access_bits(a));
  // Every map takes WQEBBs that only poll() gives back, so a send queue's worth bounds the maps
  // between two refreshes of the key table.
  RDMX_TRY(c->keys_.init(pool.config().key_policy, pool.config().key_seed, c->id_, d.sq.wqe_cnt),
           "poll core");
  c->init_templates();
  if (cfg.memory_windows) RDMX_TRY(c->create_memory_windows(cfg.memory_windows), "poll core");
  c->cache_.init(cfg.cache_size, pool.n_windows());
  c->scratch_ = std::make_unique<Window*[]>(std::max(cfg.cache_size, 1u));
  c->fill_cache();
  return c;
}

Status PollCore::create_qp(mlx5::QpDesc* out) {
  mlx5::QpConfig qc = cfg_.qp;
  qc.pd = pool_.pd();  // the windows' PD: UMRs and remote accesses through this QP reach them
  auto desc = pool_.device().create_qp(qc);
  if (!desc) return make_error(desc.error().code, "poll core: create_qp: " + desc.error().message);
  qp_created_ = true;
  const mlx5::QpDesc& d = desc.value();
  // Every WQE takes >= 1 WQEBB, so at most sq.wqe_cnt send CQEs plus one per receive can be
  // outstanding (a flush completes every WQE, signaled or not): the CQ must hold them all
  // (never overflows), plus the spare entry a CQ of 2^n entries keeps (verbs max_cqe = 2^n - 1;
  // doc/guides/mlx5.md "Capabilities").
  if (d.cq.cqe_cnt <= d.sq.wqe_cnt + d.rq.wqe_cnt) {
    qp_.init(d, cfg_.signal_every);  // so the destructor can destroy it
    return make_error(Errc::kInvalidArgument, "poll core: CQ of " + std::to_string(d.cq.cqe_cnt) +
                                                  " CQEs cannot hold the completions of SQ " +
                                                  std::to_string(d.sq.wqe_cnt) + " + RQ " +
                                                  std::to_string(d.rq.wqe_cnt) +
                                                  " plus one spare entry");
  }
  const uint32_t largest = pool_.max_pages() > pool_.inline_klm_limit()
                               ? mlx5::prm::kUmrPointerDs
                               : mlx5::prm::umr_inline_ds(pool_.max_pages());
  if (mlx5::prm::ds_to_wqebbs(largest) > d.sq.wqe_cnt)
    return make_error(Errc::kInvalidArgument, "poll core: SQ too small for one map WQE");
  qp_.init(d, cfg_.signal_every);
  *out = d;
  return {};
}

// The widest KLM writer this CPU runs within DPDK's SIMD width limit (EAL's
// --force-max-simd-bitwidth; 256 by default, and before EAL init, which leaves it 0). Same
// bytes as the baseline: tests/unit/prm compares every variant the CPU supports.
Status PollCore::choose_klm_writer() {
  const uint16_t simd_bits = rte_vect_get_max_simd_bitwidth();
  const mlx5::prm::KlmVariant klm =
      cfg_.klm_variant
          ? *cfg_.klm_variant
          : mlx5::prm::klm_best_variant(simd_bits ? simd_bits : uint32_t{RTE_VECT_SIMD_256});
  if (!mlx5::prm::klm_variant_supported(klm))
    return make_error(Errc::kUnsupported, std::string("poll core: KLM writer ") +
                                              mlx5::prm::klm_variant_name(klm) +
                                              " is not supported by this CPU");
  klm_variant_ = klm;
  klm_mid_ = mlx5::prm::klm_mid_variant(klm);
  klm_list_ = mlx5::prm::klm_list_variant(klm);
  return {};
}

// The cache's first windows (initial_windows, or half the cache) from the depot.
void PollCore::fill_cache() {
  const uint32_t want = cfg_.initial_windows ? cfg_.initial_windows : cfg_.cache_size / 2;
  while (cache_.len() < want) {
    const uint32_t n =
        pool_.depot_get(scratch_.get(), std::min(cache_.batch(), want - cache_.len()));
    if (!n) break;
    for (uint32_t i = 0; i < n; ++i) {
      Window* w = scratch_[i];
      w->owner_ = id_;
      w->state_ = WindowState::kCache;
      cache_.push(w);
    }
  }
}

void PollCore::init_templates() noexcept {
  namespace prm = mlx5::prm;
  UmrTemplate& t = tpl_;
  mlx5::SqWriter& sq = qp_.sq();
  t.ctrl0 = prm::ctrl_word0(0, MLX5_OPCODE_UMR, 0, sq.qpn(), 0);
  t.map_umr0 = prm::umr_ctrl_word0(MLX5_WQE_UMR_CTRL_FLAG_INLINE | prm::kUmrFlagFailIfNotFree, 0);
  t.ptr_umr0 = prm::umr_ctrl_word0(prm::kUmrFlagFailIfNotFree, 0);
  t.map_mask_be = detail::bswap(no_atomic_mask_ ? prm::kMapMaskNoAtomic : prm::kMapMask);
  const uint64_t ps = arena_.page_size();
  t.klm =
      prm::KlmListConsts::of(ps, parent_lkey_, arena_.base(), arena_.data_end() - arena_.base());
  t.inv_ctrl0 = prm::ctrl_word0(0, MLX5_OPCODE_UMR, 0, sq.qpn(), prm::kUmrHeaderDs);
  t.inv_umr0 = prm::umr_ctrl_word0(MLX5_WQE_UMR_CTRL_FLAG_INLINE, 0);
  t.inv_mask_be = detail::bswap(uint64_t{MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE});
  t.n_windows = pool_.n_windows();
  t.fast_pages = max_pages_;
  t.inline_pages = std::min(max_pages_, inline_limit_);
  t.max_length = uint64_t{t.fast_pages} * ps;
  t.page_shift = arena_.page_shift();
  t.page_mask = ps - 1;
  // The access masks validate() accepts and the device can grant by UMR.
  t.access_ok = 0;
  for (uint32_t a = 0; a <= mlx5::kAccessAll; ++a) {
    const bool needs_lw = (a & (mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteAtomic)) != 0;
    if (needs_lw && !(a & mlx5::kAccessLocalWrite)) continue;
    if (no_atomic_mask_ && (a & mlx5::kAccessRemoteAtomic)) continue;
    t.access_ok = static_cast<uint16_t>(t.access_ok | (1u << a));
  }
}

void WindowCache::init(uint32_t nominal_size, uint32_t capacity) {
  size_ = nominal_size;
  batch_ = std::max(nominal_size / 2, 1u);
  cap_ = std::max(capacity, nominal_size) + 1;
  slots_ = std::make_unique<Window*[]>(cap_);
  len_.set(0);
}

namespace {

using Clock = std::chrono::steady_clock;

// A spin-wait hint between empty polls (no system call: quiesce() may run in a strict-mode
// run phase, e.g. rdmafwd's one-sided engine at start).
inline void cpu_relax() noexcept {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

Status PollCore::create_memory_windows(uint32_t n) {
  mlx5::Device& dev = pool_.device();
  if (!dev.caps().memory_windows)
    return make_error(Errc::kUnsupported, dev.name() + " has no type-2 memory windows");
  if (!(arena_.mr().access & mlx5::kAccessMwBind))
    return make_error(Errc::kInvalidArgument,
                      "memory windows need an arena registered with kAccessMwBind "
                      "(ArenaConfig::access)");
  // The memory windows' keys: a stream of their own, so that a peer that sees one kind's keys
  // learns nothing of the other's.
  RDMX_TRY(mw_keys_.init(pool_.config().key_policy, pool_.config().key_seed, id_ + 0x10000u,
                         qp_.sq().wqe_cnt()),
           "memory window keys");
  mws_ = std::make_unique<MemoryWindow[]>(n);
  mw_free_ = std::make_unique<MemoryWindow*[]>(n);
  for (uint32_t i = 0; i < n; ++i) {
    auto k = dev.alloc_mw(pool_.pd());
    if (!k) return make_error(k.error().code, "alloc_mw: " + k.error().message);
    MemoryWindow& mw = mws_[i];
    mw.mkey_base_ = k.value() & ~0xffu;
    mw.key_ = static_cast<uint8_t>(k.value());
    mw.id_ = i;
    ++n_mws_;
  }
  for (uint32_t i = n; i-- > 0;) mw_free_[mw_free_len_++] = &mws_[i];
  return Status{};
}

void PollCore::destroy_memory_windows() noexcept {
  for (uint32_t i = 0; i < n_mws_; ++i) {
    Status s = pool_.device().dealloc_mw(mws_[i].rkey());
    if (!s) RDMX_LOG_WARN("poll core %u: dealloc_mw: %s", id_, s.error().message.c_str());
  }
  n_mws_ = mw_free_len_ = 0;
}

// Polls window-internal work until nothing of this core is in flight or `deadline` passed.
bool PollCore::quiesce_until(Clock::time_point deadline) {
  flush();
  while (umrs_in_flight_ != 0) {
    // Flushed CQEs of a QP in error still arrive; they are read like any other.
    const uint32_t n = poll(64, [](const mlx5::Completion&) {});
    if (umrs_in_flight_ == 0 || Clock::now() >= deadline) break;
    if (n == 0) cpu_relax();
  }
  return umrs_in_flight_ == 0;
}

bool PollCore::quiesce(std::chrono::nanoseconds budget) {
  return quiesce_until(Clock::now() + budget);
}

Status PollCore::recover(std::chrono::nanoseconds budget) {
  const Clock::time_point deadline = Clock::now() + budget;
  // 1. Drain what is left in the CQ (flush errors). UMR completions settle windows; anything
  //    else is dropped.
  while (poll(qp_.cq().cqe_cnt(), [](const mlx5::Completion&) {}) != 0) {
  }
  // 2. The device QP is back in RTS with its counters at 0: start the rings over (SqWriter::reset
  //    moves the positions on, so the windows' recorded ones are all behind the consumer; what
  //    had completed is judged against the consumer before).
  const uint64_t done_at = qp_.sq().ci();
  qp_.reset();
  umrs_in_flight_.set(0);
  rq_posted_ = false;
  // 3. Every window of this core whose device state is not known to be free gets a fresh
  //    invalidate; mapped windows come back to the cache (their mappings are gone).
  const uint32_t n = pool_.n_windows();
  uint32_t posted = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Window* w = &pool_.window(i);
    if (w->owner_ != id_) continue;
    const bool was_mapped = w->state_ == WindowState::kMapped;
    const bool unknown = was_mapped || w->dirty_ || w->umr_end_ > done_at;
    w->umr_end_ = 0;
    w->klm_end_ = 0;
    w->dirty_ = false;
    w->local_use_ = 0;
    w->state_ = WindowState::kCache;
    if (was_mapped) cache_.push(w);
    if (!unknown) continue;
    while (post_umr_invalidate(w, 0) == Errc::kNoRoom) {
      flush();
      if (poll(64, [](const mlx5::Completion&) {}) == 0) {
        if (Clock::now() >= deadline)
          return make_error(Errc::kTimeout,
                            "recover: no send-queue room for the invalidates within " +
                                std::to_string(budget.count() / 1000000) + " ms");
        cpu_relax();
      }
      if (qp_.in_error()) return make_error(Errc::kQpError, "recover: QP failed again");
    }
    w->state_ = WindowState::kUnmapping;
    ++posted;
  }
  // Memory windows: every one whose state is not known to be free is invalidated again; bound
  // ones are free afterwards (their bindings are gone: bind again).
  for (uint32_t i = 0; i < n_mws_; ++i) {
    MemoryWindow* mw = &mws_[i];
    const bool unknown = mw->state_ == MwState::kBound || mw->dirty_ || mw->outstanding_;
    if (mw->state_ == MwState::kBound) mw_free_[mw_free_len_++] = mw;
    mw->state_ = MwState::kFree;
    mw->outstanding_ = 0;
    mw->dirty_ = false;
    if (!unknown) continue;
    while (post_mw_invalidate(mw, 0) == Errc::kNoRoom) {
      flush();
      if (poll(64, [](const mlx5::Completion&) {}) == 0) {
        if (Clock::now() >= deadline)
          return make_error(Errc::kTimeout, "recover: no send-queue room for the invalidates");
        cpu_relax();
      }
      if (qp_.in_error()) return make_error(Errc::kQpError, "recover: QP failed again");
    }
    ++posted;
  }
  if (!quiesce_until(deadline))
    return make_error(Errc::kTimeout, "recover: " + std::to_string(umrs_in_flight_.get()) +
                                          " invalidates did not complete within " +
                                          std::to_string(budget.count() / 1000000) + " ms");
  if (qp_.in_error()) return make_error(Errc::kQpError, "recover: QP failed again");
  ++stats_.recoveries;
  RDMX_LOG_DEBUG("poll core %u: recovered, %u windows re-invalidated", id_, posted);
  return Status{};
}

PollCore::~PollCore() {
  if (qp_created_ && attached_) {
    // Unmap what the application left mapped, then wait for every UMR of this core: the whole
    // wait bounded by one budget (a peer that stopped answering holds the UMRs queued behind its
    // data WQEs until the transport gives up; the application moves such a QP to error first).
    if (!qp_.in_error()) {
      const Clock::time_point deadline = Clock::now() + kDefaultQuiesceBudget;
      for (uint32_t i = 0; i < pool_.n_windows(); ++i) {
        Window* w = &pool_.window(i);
        if (w->owner_ == id_ && w->state_ == WindowState::kMapped) {
          while (unmap(w) == Errc::kNoRoom && Clock::now() < deadline) {
            flush();
            if (poll(64, [](const mlx5::Completion&) {}) == 0) cpu_relax();
          }
        }
      }
      for (uint32_t i = 0; i < n_mws_; ++i) {
        if (mws_[i].state_ != MwState::kBound) continue;
        while (invalidate_mw(&mws_[i]) == Errc::kNoRoom && Clock::now() < deadline) {
          flush();
          if (poll(64, [](const mlx5::Completion&) {}) == 0) cpu_relax();
        }
      }
      if (!quiesce_until(deadline))
        RDMX_LOG_WARN(
            "poll core %u: %u UMRs still in flight at shutdown after %lld ms (the "
            "device did not complete them: a peer that does not answer?)",
            id_, umrs_in_flight(), static_cast<long long>(kDefaultQuiesceBudget.count()));
    }
    destroy_memory_windows();
    // Everything of this core goes to the depot (one line for the windows whose last UMR did
    // not complete: a QP in error, a peer gone).
    uint32_t unknown = 0;
    for (uint32_t i = 0; i < pool_.n_windows(); ++i) {
      Window* w = &pool_.window(i);
      if (w->owner_ != id_) continue;
      unknown += !umrs_done(w) || w->dirty_;
      w->umr_end_ = 0;
      w->klm_end_ = 0;
      w->dirty_ = false;
      w->state_ = WindowState::kDepot;
      w->owner_ = kNoCore;
      pool_.depot_put(&w, 1);
    }
    if (unknown)
      RDMX_LOG_WARN("poll core %u: %u windows returned with unknown device state", id_, unknown);
  }
  if (qp_created_) {
    Status s = pool_.device().destroy_qp(qp_.qpn());
    if (!s) RDMX_LOG_WARN("poll core: destroy_qp: %s", s.error().message.c_str());
  }
  if (attached_) pool_.detach_core(id_);
  // Last: the process total keeps what this core counted, its shutdown unmaps included.
  if (stats_index_ != kNoStatsIndex) stats_unregister(stats_index_);
}

}  // namespace rdmx::win
