// The per-core hot-path object: one per poll core. Owns a QueuePair (its SQ, RQ and CQ), the
// core's window cache and its stats. Nothing in it is touched by another core; windows reach
// other cores only through the pool's depot, and only after all their UMRs completed.
//
// Hot path (map, unmap, post_*, flush, poll): noexcept, no allocation, no lock, no system call.
// Nothing is sent to the device until flush() rings the doorbell (one per burst).
//
//   auto m = core.map(pages, kAccessLocalWrite | kAccessRemoteWrite, off, len);
//   core.post_send(msg_with(m.rkey, m.iova, m.length), cookie);  // same SQ: ordered after the UMR
//   core.flush();
//   ... core.poll(32, [](const mlx5::Completion& c) { ... });
//   core.unmap(m.window); core.flush();
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include <rdmx/core/result.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mlx5/device.hpp>
#include <rdmx/mlx5/qp.hpp>
#include <rdmx/win/key_gen.hpp>
#include <rdmx/win/stats.hpp>
#include <rdmx/win/window.hpp>
#include <rdmx/win/window_cache.hpp>
#include <rdmx/win/window_pool.hpp>

namespace rdmx::win {

struct CoreConfig {
  uint32_t cache_size = 64;      // nominal cache size; refill/flush bursts of half of it
  uint32_t initial_windows = 0;  // taken from the depot at create (0 = cache_size / 2)
  mlx5::QpConfig qp;             // the core's QP (and CQ) as created by the device
  uint32_t signal_every = kDefaultSignalEvery;
  // Type-2 memory windows of this core (bind_mw), allocated at create in the pool's PD. Needs a
  // device with DeviceCaps::memory_windows and an arena registered with kAccessMwBind.
  uint32_t memory_windows = 0;
  // Tests and benchmarks: this KLM writer instead of the widest one DPDK's SIMD width limit
  // allows (create refuses, kUnsupported, a variant the CPU cannot run).
  std::optional<mlx5::prm::KlmVariant> klm_variant;
};

// Cookies with this bit set are the window layer's own (map/unmap UMRs). Application cookies
// must leave it clear (kInvalidArgument otherwise).
inline constexpr uint64_t kInternalCookie = 1ull << 63;

class PollCore {
 public:
  // Setup path: registers with the pool, creates the QP through the pool's device (reset state;
  // connect it with Device::connect / mlx5::connect_qps using qp_handle()) and fills the cache.
  static Result<std::unique_ptr<PollCore>> create(WindowPool& pool, const CoreConfig& cfg);
  // Quiesces (invalidates windows still mapped, waits for this core's UMRs to complete), returns
  // every window to the depot and destroys the QP.
  ~PollCore();
  PollCore(const PollCore&) = delete;
  PollCore& operator=(const PollCore&) = delete;

  uint16_t id() const noexcept { return id_; }
  mlx5::QpHandle qp_handle() const noexcept { return qp_.qpn(); }
  mlx5::QueuePair& qp() noexcept { return qp_; }
  const mlx5::QueuePair& qp() const noexcept { return qp_; }
  const WindowCache& cache() const noexcept { return cache_; }

  // A window of this core: every UMR posted on it has completed (the SQ consumer passed the
  // last one; Window::umr_end_).
  bool umrs_done(const Window* w) const noexcept { return qp_.sq().ci() >= w->umr_end_; }
  // A window of this core whose pointer-mode map has not completed: the device may still read
  // its KLM array. (While any UMR of it is in flight its last pointer map is within a ring of
  // the consumer, so the 32-bit compare is exact; a false "busy" on an old map only delays.)
  bool klm_busy(const Window* w) const noexcept {
    return !umrs_done(w) &&
           static_cast<int32_t>(static_cast<uint32_t>(qp_.sq().ci()) - w->klm_end_) < 0;
  }
  // The state of a window of this core as of now: Window::state() is what was recorded, and a
  // window recorded kUnmapping whose invalidate has since completed (and did not fail) is
  // kCache. Nothing on the hot path records that change: it is read where it matters (leaving
  // the core, recover, check_windows).
  WindowState state_of(const Window* w) const noexcept {
    return w->state_ == WindowState::kUnmapping && umrs_done(w) && !w->dirty_ ? WindowState::kCache
                                                                              : w->state_;
  }
  // This core's counters. Any thread may read them (win::snapshot(); rdmx/win/stats.hpp).
  const CoreStats& stats() const noexcept { return stats_; }
  // This core's index in the process (telemetry /rdmx/stats,<index>; rdmx/win/stats_registry.hpp).
  uint32_t stats_index() const noexcept { return stats_index_; }
  const KeyGen& keys() const noexcept { return keys_; }
  // The KLM writer variant chosen at create (CPU features, DPDK's SIMD width limit).
  mlx5::prm::KlmVariant klm_variant() const noexcept { return klm_variant_; }
  uint32_t umrs_in_flight() const noexcept { return static_cast<uint32_t>(umrs_in_flight_.get()); }
  WindowPool& pool() noexcept { return pool_; }
  // The Errc of the last rejected call (map_burst/unmap_burst stop at it).
  Errc last_error() const noexcept { return last_errc_; }

  // ---- Windows (hot path) ----------------------------------------------------------------
  // Maps `pages` (chunk pages of the pool's arena) into a free window of this core: writes one
  // UMR WQE (inline list up to the inline limit, else pointer mode) with a new key from this
  // core's KeyGen (never the window's current key; PoolConfig::key_policy).
  // The mapping is usable by WQEs posted after it on this SQ at once (the SQ writer puts
  // INITIATOR_SMALL_FENCE on the next WQE) and by the peer once the UMR executed — send the rkey
  // on this QP after the map, or wait for a completion. Bytes 0..length-1 of the window are
  // `length` bytes starting `first_byte_offset` into pages[0].
  // Errors (nothing posted): kInvalidArgument (no pages, length 0, unknown access bits, remote
  // write/atomic without local write), kTooManyPages (> max_pages), kOutOfRange (offset not in
  // the first page, or length not ending in the last page), kNotInArena (a page outside the
  // arena's data part or not page aligned), kQpError (QP in error: recover() first), kNoRoom
  // (SQ full: poll, then retry), kNoWindow (no free window in cache or depot), kBusy (pointer
  // mode: every free window's KLM array is still being read by the device: poll, then retry),
  // kUnsupported (atomic access on a device with umr_modify_atomic_disabled).
  MapResult map(std::span<const uint64_t> pages, uint32_t access, uint32_t first_byte_offset,
                uint64_t length) noexcept;
  // Maps an interleaved layout into a free window (a repeat-block UMR, as
  // mlx5dv_wr_mr_interleaved builds it): window bytes are part 0 of block 0, part 1 of block 0,
  // ..., part 0 of block 1, ... for `blocks` blocks; length = blocks * sum of the parts' bytes.
  // The same key rotation, fences, unmap and stats as map(); inline only (the repeat header takes
  // one translation slot, so at most min(max_pages, inline limit) - 1 parts). A fast path from
  // the map template, one pass over the parts, as map(). Errors (nothing posted): kInvalidArgument
  // (no parts, blocks 0, a part of 0 bytes, access as map()), kTooManyPages (too many parts),
  // kOutOfRange (bytes + skip over 65535, or a length over the window's), kNotInArena (a part's
  // bytes of any block outside the arena's data part), kQpError, kNoRoom, kNoWindow, kUnsupported.
  MapResult map_interleaved(std::span<const InterleavedPart> parts, uint32_t blocks,
                            uint32_t access) noexcept;
  // Best effort: maps requests in order until one fails (its Errc in last_error()); returns how
  // many were mapped (out[i] for i < count).
  size_t map_burst(std::span<const MapRequest> reqs, std::span<Window*> out) noexcept;

  // Unmaps a window mapped by this core: writes one invalidate UMR and puts the window back on
  // this core's cache at once. The UMR is fenced after READs/WRITEs/SENDs that used the window
  // as their local key only while one of them has not completed: unmap after their completion
  // was polled (as the NFS client invalidates after the reply) and the SQ keeps flowing. Errors
  // (nothing posted): kInvalidArgument (not a window of the pool), kWrongCore (mapped by another
  // core), kNotMapped (not mapped: never mapped, already unmapped, or freed by the peer's
  // SEND_WITH_INV), kQpError, kNoRoom.
  Errc unmap(Window* w) noexcept;
  // Best effort: unmaps in order until one fails; returns how many were unmapped.
  size_t unmap_burst(std::span<Window* const> ws) noexcept;

  // ---- Type-2 memory windows (hot path; CoreConfig::memory_windows) --------------------------
  // Binds a free memory window of this core to `length` bytes of the arena at `addr` (one bind
  // WQE, as rdma-core's ibv_wr_bind_mw builds it: CHECK_FREE, bound to this core's QP, a new
  // key from the core's generator). The peer addresses it at iova = addr (virtual addressing,
  // like an MR) or at 0 (zero_based). Only remote requests on this core's QP can use the rkey; a
  // peer on any other connection is refused by the device. Usable by the peer once the bind
  // executed: send the rkey on this QP after the bind. Errors (nothing posted):
  // kInvalidArgument (length 0, access other than remote read/write/atomic, or none),
  // kOutOfRange (length over 2 GiB: one translation entry), kNotInArena (a byte outside the
  // arena's data part), kUnsupported (atomic on a device with umr_modify_atomic_disabled),
  // kQpError, kNoRoom, kNoWindow (every memory window is bound).
  BindResult bind_mw(uint64_t addr, uint64_t length, uint32_t access,
                     bool zero_based = false) noexcept;
  // Invalidates a bound memory window of this core (a UMR that frees it; its key stays, so the
  // next bind gives it a different one) and makes it free for the next bind at once. The peer's
  // requests through it that arrive after the invalidate executed are refused. Errors (nothing
  // posted): kInvalidArgument (not one of this core's memory windows), kNotMapped (not bound:
  // already invalidated, or freed by the peer's SEND_WITH_INV), kQpError, kNoRoom.
  Errc invalidate_mw(MemoryWindow* mw) noexcept;
  uint32_t n_memory_windows() const noexcept { return n_mws_; }
  uint32_t free_memory_windows() const noexcept { return mw_free_len_; }
  MemoryWindow& memory_window(uint32_t i) noexcept { return mws_[i]; }

  // ---- Data WQEs (hot path). Local SGEs use the arena's lkey or a window's lkey. -----------
  // Errors: kInvalidArgument (cookie with kInternalCookie set, too many SGEs), kQpError, kNoRoom.
  Errc post_write(std::span<const mlx5::prm::Sge> local, uint64_t raddr, uint32_t rkey,
                  uint64_t cookie, bool signal = false) noexcept;
  Errc post_read(std::span<const mlx5::prm::Sge> local, uint64_t raddr, uint32_t rkey,
                 uint64_t cookie, bool signal = false) noexcept;
  Errc post_send(std::span<const mlx5::prm::Sge> local, uint64_t cookie,
                 bool signal = false) noexcept;
  // SEND_WITH_INV: the peer's NIC frees the peer window `invalidate_rkey` on receipt.
  Errc post_send_inv(std::span<const mlx5::prm::Sge> local, uint32_t invalidate_rkey,
                     uint64_t cookie, bool signal = false) noexcept;
  Errc post_recv(std::span<const mlx5::prm::Sge> local, uint64_t cookie) noexcept;
  // Rings the send (and receive) doorbell once for everything posted since the last flush.
  void flush() noexcept;

  // Reads up to max_cqes CQEs. Window-internal completions (map/unmap UMRs) are consumed here:
  // an unmap that completed lets the window leave the core (umrs_done: the windows are not
  // touched, each compares its last UMR's position with the SQ consumer); a receive that carried a
  // SEND_WITH_INV of one of this core's mapped windows frees it (a later unmap() of it is
  // refused). Every application completion is handed to on(const mlx5::Completion&), receives
  // with an invalidation included. Returns the number of CQEs read.
  template <class F>
  uint32_t poll(uint32_t max_cqes, F&& on) noexcept {
    // The window layer's own UMRs that completed successfully need nothing but counting (the
    // windows read their state from the SQ consumer): a CQE covering only the fast paths'
    // (quiet) UMRs is retired in one step, other window UMRs take the queue pair's cheap path
    // (cookie only). Their counters are added once per call: every completion the queue pair
    // counted that did not reach the Completion path was one of them.
    const uint64_t before = qp_.stats().completions;
    uint64_t others = 0;
    const uint32_t n = qp_.poll<true>(
        max_cqes,
        [](uint64_t cookie) noexcept {
          // Application cookies (bit 63 clear) and memory-window cookies (bits 63 and 62 set)
          // take the Completion path; only windows' map/unmap cookies (10 in the top bits) stay.
          static_assert(kInternalCookie >> 62 == 2 && kMwCookie >> 62 == 1);
          return (cookie >> 62) == 2;
        },
        [&](const mlx5::Completion& c) {
          ++others;
          if (!c.recv && (c.cookie & kInternalCookie)) {
            on_internal(c);
            return;
          }
          if (!c.ok()) [[unlikely]]
            on_app_error(c);
          else if (c.recv && c.cqe_opcode == MLX5_CQE_RESP_SEND_INV)
            on_remote_invalidate(c.imm);
          on(c);
        });
    const uint64_t umrs_ok = qp_.stats().completions - before - others;
    stats_.umr_completions += umrs_ok;
    umrs_in_flight_ -= static_cast<uint32_t>(umrs_ok);
    keys_.refresh(stats_.maps);
    if (cache_.over()) flush_to_depot();
    return n;
  }

  // Tells this core that the peer invalidated `rkey` (a SEND_WITH_INV that arrived on another
  // core's QP). Returns kOk when the window was mapped here under that key and is now free,
  // kNotMapped when the key is stale, kWrongCore when the window is another core's.
  Errc remote_invalidated(uint32_t rkey) noexcept;

  // ---- Recovery (setup path) -----------------------------------------------------------------
  // Waits on this path are bounded in time (steady clock), never in polls: how many polls fit
  // in a second depends on the CPU, on what shares it, and on whether the device (emu's thread,
  // or a NIC behind a busy PCIe link) got to run. A NIC completes a UMR in microseconds, so the
  // defaults only catch a device that stopped; they are long enough for emu's device thread
  // to be scheduled on a loaded machine.
  static constexpr std::chrono::milliseconds kDefaultQuiesceBudget{5000};
  static constexpr std::chrono::milliseconds kDefaultRecoverBudget{10000};

  // After the QP reported an error: the application polls until it has what it wants, moves the
  // device QP back to RTS (Device::connect or modify_qp), then calls recover(). Any CQE still in
  // the CQ is consumed (application completions in it are dropped), the QueuePair is reset, and
  // every window of this core — mapped ones included; their mappings are gone — is invalidated
  // with a fresh UMR and returned to the cache. On return all of them are free (kCache).
  // kTimeout when the invalidates have not all completed within `budget` (the whole call).
  Status recover(std::chrono::nanoseconds budget = kDefaultRecoverBudget);

  // Polls only window-internal work until this core has no UMR in flight or `budget` passed
  // (setup path: tests, shutdown, moving windows). Application completions read meanwhile
  // are dropped: drain them with poll() first. Returns true when quiescent.
  bool quiesce(std::chrono::nanoseconds budget = kDefaultQuiesceBudget);

 private:
  PollCore(WindowPool& pool, const CoreConfig& cfg);
  bool quiesce_until(std::chrono::steady_clock::time_point deadline);
  void init_templates() noexcept;  // tpl_, from the QP, arena and caps (create)
  // create()'s steps: the QP in the pool's PD (its CQ and SQ large enough), the KLM writer
  // this CPU runs, the cache's first windows from the depot.
  Status create_qp(mlx5::QpDesc* out);
  Status choose_klm_writer();
  void fill_cache();

  // A window's UMR: kInternalCookie, the op (bits 56-62), the window's index (bits 0-31).
  static uint64_t cookie_of(uint8_t op, const Window* w) noexcept {
    return kInternalCookie | (uint64_t{op} << 56) | w->id_;
  }
  static constexpr uint8_t kOpMap = 1;
  static constexpr uint8_t kOpUnmap = 2;
  // Memory-window WQEs: kMwCookie (bit 62) set, the window's index in mws_ below.
  static constexpr uint8_t kOpMwBind = 4;
  static constexpr uint8_t kOpMwInvalidate = 5;
  static constexpr uint64_t kMwCookie = uint64_t{1} << 62;
  static uint64_t cookie_of_mw(uint8_t op, const MemoryWindow* mw) noexcept {
    return kInternalCookie | kMwCookie | (uint64_t{op} << 56) | mw->id_;
  }
  Status create_memory_windows(uint32_t n);
  void destroy_memory_windows() noexcept;
  Errc post_mw_invalidate(MemoryWindow* mw, uint8_t fence) noexcept;
  void on_mw_internal(const mlx5::Completion& c) noexcept;
  // A remote invalidation naming a memory window of this core; false when `rkey` names none.
  bool mw_remote_invalidated(uint32_t rkey, Errc* out) noexcept;

  // map() when its fast path does not apply (pointer mode, a WQE that would wrap the ring, an
  // empty cache, any error): every check in order, the cursor builders.
  [[gnu::noinline]] MapResult map_general(std::span<const uint64_t> pages, uint32_t access,
                                          uint32_t first_byte_offset, uint64_t length) noexcept;
  // map_general's steps, inline so that it compiles as one function (the instruction counts of
  // scripts/check-instructions.sh hold): its checks, its window, its WQE.
  [[gnu::always_inline]] inline Errc map_check(std::span<const uint64_t> pages, uint32_t access,
                                               uint32_t first_byte_offset,
                                               uint64_t length) noexcept;
  [[gnu::always_inline]] inline Window* map_window(bool pointer, bool* top, Errc* why) noexcept;
  [[gnu::always_inline]] inline bool write_map_wqe(Window* w, uint8_t key,
                                                   std::span<const uint64_t> pages, uint32_t access,
                                                   uint32_t first_byte_offset, uint64_t length,
                                                   bool pointer) noexcept;
  // map()'s fast path for one request into the SQ burst b, with cache_.at(top - 1) as the window
  // and key draw `draw`, inline (kPointer false: n <= the inline limit) or in pointer mode: the
  // window when its UMR was committed (the window's state is updated; fast_maps_done() does the
  // cache and the counters), nullptr with nothing committed otherwise.
  template <bool kPointer>
  [[gnu::always_inline]] inline Window* map_fast(mlx5::SqWriter::Burst& b, uint32_t top,
                                                 uint64_t draw, const uint64_t* pages, size_t n,
                                                 uint32_t access, uint32_t first_byte_offset,
                                                 uint64_t length) noexcept;
  // map() of one request through map_fast<kPointer>, map_general when that refuses.
  template <bool kPointer>
  [[gnu::always_inline]] inline MapResult map_one(std::span<const uint64_t> pages, uint32_t access,
                                                  uint32_t first_byte_offset,
                                                  uint64_t length) noexcept;
  // map() of more pages than the inline limit (out of line: map()'s inline path stays small).
  [[gnu::noinline]] MapResult map_pointer(std::span<const uint64_t> pages, uint32_t access,
                                          uint32_t first_byte_offset, uint64_t length) noexcept;
  // After `count` map_fast() (`pointer` of them in pointer mode) of `pages` pages in all: off
  // the cache, in flight, counted.
  [[gnu::always_inline]] inline void fast_maps_done(uint32_t count, uint32_t pointer,
                                                    uint64_t pages) noexcept;
  // A map's new key in the window, with the invalidate's words for it (Window::inv_ctrl1_,
  // inv_mkc0_): ctrl1_mkey = prm::ctrl_word1(0, mkey), mkc0_key = prm::mkc_word0(false, 0, key).
  // Every map sets the key through here, so the words always match it.
  static void set_key(Window* w, uint8_t key, uint64_t ctrl1_mkey, uint64_t mkc0_key) noexcept {
    w->key_ = key;
    w->inv_ctrl1_ = ctrl1_mkey;
    w->inv_mkc0_ = mkc0_key | MLX5_WQE_MKEY_CONTEXT_FREE;
  }
  // What an interleaved map adds to CoreStats::pages_mapped: its length in chunk pages, rounded
  // up (it has no page list; the layout reaches that many pages' worth of the arena).
  uint64_t interleaved_pages(uint64_t length) const noexcept {
    return (length + tpl_.page_mask) >> tpl_.page_shift;
  }
  // The bookkeeping of a map whose UMR was committed: the window's new state and the result.
  MapResult mapped(Window* w, uint8_t key, uint32_t n_pages, uint64_t length) noexcept;
  // What a map of `w` hands back (its state already updated).
  static MapResult result_of(Window* w, uint64_t length) noexcept {
    MapResult r;
    r.window = w;
    r.rkey = r.lkey = w->rkey();
    r.iova = 0;
    r.length = length;
    return r;
  }
  // map_interleaved()'s fast path: a valid layout, a window on top of the cache, a WQE that does
  // not wrap the ring. The window when its UMR was committed (state and counters updated),
  // nullptr with nothing committed otherwise (map_interleaved_general names the failure).
  Window* map_interleaved_fast(std::span<const InterleavedPart> parts, uint32_t blocks,
                               uint32_t access) noexcept;
  [[gnu::noinline]] MapResult map_interleaved_general(std::span<const InterleavedPart> parts,
                                                      uint32_t blocks, uint32_t access) noexcept;
  // unmap()'s fast path for one window into the SQ burst b: true when its invalidate was
  // committed (fenced counts a fenced one; fast_unmaps_done() does the cache and the counters),
  // false with nothing committed otherwise.
  [[gnu::always_inline]] inline bool unmap_fast(mlx5::SqWriter::Burst& b, Window* w,
                                                uint32_t& fenced) noexcept;
  [[gnu::always_inline]] inline void fast_unmaps_done(Window* const* ws, uint32_t count,
                                                      uint32_t fenced) noexcept;
  // unmap() when its fast path does not apply (a refusal, an invalidate that would wrap).
  [[gnu::noinline]] Errc unmap_general(Window* w) noexcept;
  // The 8-bit key the next map of `w` writes: the window's key plus this core's step for its
  // next map (the map count numbers the draws; poll() refreshes the table), never the key just
  // retired.
  uint8_t next_key(const Window* w) const noexcept { return keys_.next_key(w->key_, stats_.maps); }
  Errc validate(std::span<const uint64_t> pages, uint32_t access, uint32_t first_byte_offset,
                uint64_t length) const noexcept;
  // A map refused after validate(): kNotInArena when a page is bad, else e (counted).
  [[gnu::cold]] Errc reject_map(std::span<const uint64_t> pages, Errc e) noexcept;
  Errc validate_interleaved(std::span<const InterleavedPart> parts, uint32_t blocks,
                            uint32_t access, uint64_t* length) const noexcept;
  [[gnu::cold]] Errc validate_slow(std::span<const uint64_t> pages, uint32_t access,
                                   uint32_t first_byte_offset, uint64_t length) const noexcept;
  // A window for map() when the top of the cache cannot be taken: refills from the depot,
  // skips windows whose KLM array is busy. nullptr (why = kNoWindow or kBusy) when none.
  Window* get_window_slow(bool pointer, Errc& why) noexcept;
  // mlx5::mkc_access_bits as a table over the 16 access masks validate() lets through (an
  // out-of-line call per map otherwise). PollCore::create checks every entry against it.
  static constexpr std::array<uint8_t, 16> kMkcAccess = [] {
    static_assert(mlx5::kAccessAll == 0xf);
    std::array<uint8_t, 16> t{};
    for (uint32_t a = 0; a < t.size(); ++a) {
      uint8_t b = 0;
      if (a & mlx5::kAccessLocalWrite) b |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE;
      if (a & mlx5::kAccessRemoteWrite) b |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
      if (a & mlx5::kAccessRemoteRead) b |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ;
      if (a & mlx5::kAccessRemoteAtomic) b |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC;
      t[a] = b;
    }
    return t;
  }();
  Errc post_umr_invalidate(Window* w, uint8_t fence) noexcept;
  Errc post_data(uint8_t opcode, std::span<const mlx5::prm::Sge> local, uint64_t raddr,
                 uint32_t rkey, Be32 imm, uint64_t cookie, bool signal) noexcept;
  void note_local_use(std::span<const mlx5::prm::Sge> local, uint8_t use) noexcept;
  void on_internal(const mlx5::Completion& c) noexcept;
  // Counts a completion of one of this core's own UMR-class WQEs (map, unmap, bind,
  // invalidate): in flight no more; false (counted as an error) when it failed or was flushed.
  bool umr_completed(const mlx5::Completion& c) noexcept;
  [[gnu::cold]] void on_app_error(const mlx5::Completion& c) noexcept;
  void on_remote_invalidate(uint32_t rkey) noexcept;
  void flush_to_depot() noexcept;
  uint32_t refill_from_depot() noexcept;
  [[gnu::cold]] Errc reject(Errc e) noexcept {
    ++stats_.errors[static_cast<uint32_t>(e)];
    last_errc_ = e;
    return e;
  }

  WindowPool& pool_;
  mem::Arena& arena_;
  CoreConfig cfg_;
  uint16_t id_ = kNoCore;
  bool attached_ = false;
  bool qp_created_ = false;
  uint32_t parent_lkey_ = 0;
  uint32_t max_pages_ = 0;
  uint32_t inline_limit_ = 0;
  uint8_t umr_fence_ = 0;
  bool no_atomic_mask_ = false;              // DeviceCaps::umr_modify_atomic_disabled
  mlx5::prm::KlmMidFn klm_mid_ = nullptr;    // KLM writer variant for this CPU (create)
  mlx5::prm::KlmListFn klm_list_ = nullptr;  // the inline map's whole-list writer (create)
  mlx5::prm::KlmVariant klm_variant_ = mlx5::prm::KlmVariant::kBaseline;
  // The constant parts of the UMR WQEs this core writes, prepared at create: a map or an
  // unmap then writes only what changes (index, DS, fence, key, length, access, the KLMs).
  struct UmrTemplate {
    uint64_t ctrl0 = 0;            // ctrl bytes 0-7 with wqe_index 0 and DS 0: opcode UMR, qpn
    uint64_t map_umr0 = 0;         // UMR ctrl bytes 0-7 of an inline map without its octowords
    uint64_t ptr_umr0 = 0;         // ... of a pointer-mode map (INLINE clear)
    uint64_t map_mask_be = 0;      // the map's mkey mask, big-endian
    mlx5::prm::KlmListConsts klm;  // the KLM list writer's constants (page check included)
    uint64_t inv_ctrl0 = 0;        // an invalidate's ctrl bytes 0-7 with wqe_index 0
    uint64_t inv_umr0 = 0;         // an invalidate's UMR ctrl bytes 0-7
    uint64_t inv_mask_be = 0;      // its mkey mask (FREE), big-endian
    uint64_t n_windows = 0;        // the pool's window count (unmap's ownership check)
    uint64_t max_length = 0;       // fast_pages * page_size
    uint32_t fast_pages = 0;       // map's fast path: at most this many pages (the pool's max)
    uint32_t inline_pages = 0;     // up to this many inline, more in pointer mode
    uint16_t access_ok = 0;        // bit a: access mask a passes validate() and the atomic cap
    uint32_t page_shift = 0;       // the arena's chunk page (interleaved_pages)
    uint64_t page_mask = 0;        // page size - 1
  } tpl_;
  bool rq_posted_ = false;
  // This core's map/unmap UMRs not yet completed; read by other threads (rdmx_core_stats_get).
  Counter umrs_in_flight_;
  Errc last_errc_ = Errc::kOk;
  mlx5::QueuePair qp_;
  Window* windows_ = nullptr;  // pool_.window(0): the pool's windows never move
  WindowCache cache_;
  KeyGen keys_;     // this core's window keys
  KeyGen mw_keys_;  // this core's memory windows' keys (a stream of its own)
  std::unique_ptr<MemoryWindow[]> mws_;
  std::unique_ptr<MemoryWindow*[]> mw_free_;  // free memory windows (a stack)
  uint32_t n_mws_ = 0;
  uint32_t mw_free_len_ = 0;
  std::unique_ptr<Window*[]> scratch_;  // depot bursts
  CoreStats stats_;
  static constexpr uint32_t kNoStatsIndex = UINT32_MAX;
  uint32_t stats_index_ = kNoStatsIndex;
};

}  // namespace rdmx::win
