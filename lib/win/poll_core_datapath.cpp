// PollCore hot path: map/unmap UMRs, data WQEs, completions of the window layer's own WQEs.
// Setup and recovery are in poll_core.cpp.
#include <algorithm>
#include <array>
#include <bit>

#include <rdmx/mlx5/prm/wqe.hpp>
#include <rdmx/win/poll_core.hpp>

namespace rdmx::win {

namespace prm = mlx5::prm;

namespace {
constexpr uint32_t kMaxSges = 16;  // data WQE gather/scatter entries
constexpr uint32_t kKnownAccess = mlx5::kAccessAll;
constexpr uint32_t kNeedsLocalWrite = mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteAtomic;
}  // namespace

Errc PollCore::validate_slow(std::span<const uint64_t> pages, uint32_t access,
                             uint32_t first_byte_offset, uint64_t length) const noexcept {
  const uint64_t n = pages.size();
  if (n == 0) return Errc::kInvalidArgument;
  if (n > max_pages_) return Errc::kTooManyPages;
  if (access & ~kKnownAccess) return Errc::kInvalidArgument;
  // Verbs rule (ibv_reg_mr): remote write and atomic need local write.
  if ((access & kNeedsLocalWrite) && !(access & mlx5::kAccessLocalWrite))
    return Errc::kInvalidArgument;
  if (length == 0) return Errc::kInvalidArgument;
  const uint64_t ps = arena_.page_size();
  if (first_byte_offset >= ps) return Errc::kOutOfRange;
  // The mapped bytes must lie in the pages and reach into the last one (every page is used).
  if (length > n * ps - first_byte_offset) return Errc::kOutOfRange;
  if (first_byte_offset + length <= (n - 1) * ps) return Errc::kOutOfRange;
  for (uint64_t p : pages)
    if (!arena_.is_page(p)) return Errc::kNotInArena;
  return Errc::kOk;
}

Errc PollCore::validate(std::span<const uint64_t> pages, uint32_t access,
                        uint32_t first_byte_offset, uint64_t length) const noexcept {
  // The checks of validate_slow but the per-page one, evaluated all at once without early exits
  // (unsigned arithmetic: the terms that make no sense when an earlier one fails are harmless).
  // When any fails, validate_slow names the first one in its order. The pages themselves are
  // checked by map() in the same pass that writes their KLMs (prm::PageCheck).
  const uint64_t n = pages.size();
  const uint64_t ps = arena_.page_size();
  const bool bad =
      (n - 1 >= max_pages_) | ((access & ~kKnownAccess) != 0) |
      (((access & kNeedsLocalWrite) != 0) & ((access & mlx5::kAccessLocalWrite) == 0)) |
      (length == 0) | (first_byte_offset >= ps) | (length > n * ps - first_byte_offset) |
      (first_byte_offset + length <= (n - 1) * ps);
  if (bad) [[unlikely]]
    return validate_slow(pages, access, first_byte_offset, length);
  return Errc::kOk;
}

Errc PollCore::reject_map(std::span<const uint64_t> pages, Errc e) noexcept {
  // The pages are checked after the SQ room and the window: a bad page still wins over kNoRoom,
  // kNoWindow and kBusy, as when every check came first.
  for (uint64_t p : pages)
    if (!arena_.is_page(p)) return reject(Errc::kNotInArena);
  return reject(e);
}

uint32_t PollCore::refill_from_depot() noexcept {
  const uint32_t n = pool_.depot_get(scratch_.get(), cache_.batch());
  for (uint32_t i = 0; i < n; ++i) {
    Window* w = scratch_[i];
    RDMX_DEBUG_ASSERT(w->state_ == WindowState::kDepot && w->umr_end_ == 0);
    w->owner_ = id_;
    w->state_ = WindowState::kCache;
    cache_.push(w);
  }
  if (n) {
    ++stats_.depot_refills;
    stats_.windows_from_depot += n;
  }
  return n;
}

void PollCore::flush_to_depot() noexcept {
  // Down to the nominal size, in bursts of half of it. Only windows with every UMR completed
  // may leave the core (another core's QP is not ordered after this SQ); the oldest are the
  // likeliest to be done.
  while (cache_.over()) {
    const uint32_t n = cache_.take_oldest(scratch_.get(), cache_.batch(), [this](const Window* w) {
      return state_of(w) == WindowState::kCache;
    });
    if (!n) return;
    for (uint32_t i = 0; i < n; ++i) {
      scratch_[i]->state_ = WindowState::kDepot;
      scratch_[i]->owner_ = kNoCore;
      scratch_[i]->umr_end_ = 0;  // this core's SQ positions mean nothing to the next owner
      scratch_[i]->klm_end_ = 0;
    }
    pool_.depot_put(scratch_.get(), n);  // release: the fields above are visible to the taker
    ++stats_.depot_flushes;
    stats_.windows_to_depot += n;
  }
}

Window* PollCore::get_window_slow(bool pointer, Errc& why) noexcept {
  if (cache_.len() == 0) {
    ++stats_.cache_misses;
    if (refill_from_depot() == 0) {
      why = Errc::kNoWindow;
      ++stats_.exhausted;
      return nullptr;
    }
  } else {
    ++stats_.cache_hits;
  }
  if (pointer && klm_busy(cache_.at(cache_.len() - 1))) {
    // The KLM array of the top window may still be read by the device (its pointer-mode map
    // has not completed): take another one.
    if (!cache_.raise_first([this](const Window* w) { return !klm_busy(w); }) &&
        refill_from_depot() == 0) {
      why = Errc::kBusy;
      ++stats_.klm_waits;
      return nullptr;
    }
  }
  return cache_.pop();
}

template <bool kPointer>
Window* PollCore::map_fast(mlx5::SqWriter::Burst& b, uint32_t top, uint64_t draw,
                           const uint64_t* pages, size_t n, uint32_t access,
                           uint32_t first_byte_offset, uint64_t length) noexcept {
  // The fast path of one map: a valid request whose WQE does not wrap the ring, the window
  // cache_.at(top - 1) (in pointer mode, one whose KLM array the device no longer reads).
  // Everything it needs is checked at once (no early exits); anything else returns nullptr with
  // nothing committed, and the caller takes map_general, which names the first failed check in
  // the documented order. The WQE is the template's constant words plus what changes, then the
  // KLMs (inline, or in the window's array behind one pointer entry), the pages checked in the
  // same pass; the same bytes as map_general's builders (tests/window compares them).
  const uint64_t ps = tpl_.klm.page_size;
  const uint64_t end = uint64_t{first_byte_offset} + length;  // no overflow once length passed
  const uint32_t oct = prm::align4(static_cast<uint32_t>(n));
  const uint32_t ds = kPointer ? prm::kUmrPointerDs : prm::kUmrHeaderDs + oct;
  mlx5::SqWriter& sq = qp_.sq();
  mlx5::SqWriter::Slot s;
  // Bytes first_byte_offset .. end-1 must start in the first page and end in the last:
  // (n - 1) * ps < end <= n * ps, i.e. end - 1 - (n - 1) * ps < ps, with 1 <= length <= max.
  if (n - 1 >= (kPointer ? tpl_.fast_pages : tpl_.inline_pages) || access >= 16 ||
      !((tpl_.access_ok >> access) & 1) || first_byte_offset >= ps ||
      length - 1 >= tpl_.max_length || end - 1 - ((n - 1) << tpl_.klm.page_shift) >= ps ||
      top == 0 || !sq.reserve(b, prm::ds_to_wqebbs(ds), umr_fence_, s)) [[unlikely]]
    return nullptr;
  Window* w = cache_.at(top - 1);
  if constexpr (kPointer) {
    // As get_window_slow: the topmost window whose KLM array the device no longer reads is
    // raised to the top (map_general would pick the same one). A window just unmapped is on
    // top with its own pointer-mode map maybe still in flight. Only called with the whole
    // cache (top == cache_.len()).
    if (klm_busy(w)) [[unlikely]] {
      RDMX_DEBUG_ASSERT(top == cache_.len());
      if (!cache_.raise_first([this](const Window* x) { return !klm_busy(x); })) return nullptr;
      w = cache_.at(top - 1);
    }
  }
  const uint8_t key = keys_.next_key(w->key_, draw);
  // The key's words, kept in the window for the invalidate (unmap_fast).
  const uint64_t ctrl1_mkey = prm::ctrl_word1(0, Be32::from_host(w->mkey_base_ | key));
  const uint64_t mkc0_key = prm::mkc_word0(false, 0, key);
  uint8_t* const q = s.wqe;
  prm::put_umr_head(q,
                    tpl_.ctrl0 | (uint64_t{ds} << 56) |
                        (uint64_t{detail::bswap(static_cast<uint16_t>(s.pi))} << 8),
                    ctrl1_mkey | (uint64_t{s.fm_ce_se} << 24),
                    (kPointer ? tpl_.ptr_umr0 : tpl_.map_umr0) |
                        (uint64_t{detail::bswap(static_cast<uint16_t>(oct))} << 32),
                    tpl_.map_mask_be, mkc0_key | (uint64_t{kMkcAccess[access]} << 16),
                    detail::bswap(length));
  uint8_t* klms = q + 2 * MLX5_SEND_WQE_BB;
  if constexpr (kPointer) {
    // The pointer entry: the array's bytes rounded to 64 (as build_umr_map_pointer).
    prm::set_data(reinterpret_cast<mlx5_wqe_data_seg*>(klms), (oct * prm::kKlmBytes + 63u) & ~63u,
                  parent_lkey_, pool_.klm_array(w->id_));
    klms = reinterpret_cast<uint8_t*>(pool_.klm_array(w->id_));
  }
  if (klm_list_(klms, pages, static_cast<uint32_t>(n), first_byte_offset, end, tpl_.klm) != 0)
      [[unlikely]]
    return nullptr;  // a page outside the arena: map_general counts it
  sq.commit(b, s, MLX5_OPCODE_UMR, cookie_of(kOpMap, w));
  set_key(w, key, ctrl1_mkey, mkc0_key);
  w->state_ = WindowState::kMapped;
  w->local_use_ = 0;
  w->n_pages_ = static_cast<uint32_t>(n);
  w->length_ = length;
  w->umr_end_ = s.pi + s.nbb;
  if constexpr (kPointer) w->klm_end_ = static_cast<uint32_t>(s.pi + s.nbb);
  return w;
}

void PollCore::fast_maps_done(uint32_t count, uint32_t pointer, uint64_t pages) noexcept {
  cache_.drop(count);
  umrs_in_flight_ += count;
  stats_.cache_hits += count;
  stats_.inline_maps += count - pointer;
  stats_.pointer_maps += pointer;
  stats_.maps += count;
  stats_.pages_mapped += pages;
}

template <bool kPointer>
MapResult PollCore::map_one(std::span<const uint64_t> pages, uint32_t access,
                            uint32_t first_byte_offset, uint64_t length) noexcept {
  mlx5::SqWriter& sq = qp_.sq();
  mlx5::SqWriter::Burst b = sq.begin_burst();
  Window* const w = qp_.in_error()
                        ? nullptr
                        : map_fast<kPointer>(b, cache_.len(), stats_.maps, pages.data(),
                                             pages.size(), access, first_byte_offset, length);
  if (!w) [[unlikely]] {
    // More pages than fit inline: pointer mode's fast path (itself falling back to map_general).
    if (!kPointer && pages.size() > tpl_.inline_pages && !qp_.in_error())
      return map_pointer(pages, access, first_byte_offset, length);
    return map_general(pages, access, first_byte_offset, length);
  }
  sq.end_burst(b, 1);
  fast_maps_done(1, kPointer, pages.size());
  return result_of(w, length);
}

MapResult PollCore::map(std::span<const uint64_t> pages, uint32_t access,
                        uint32_t first_byte_offset, uint64_t length) noexcept {
  return map_one<false>(pages, access, first_byte_offset, length);
}

MapResult PollCore::map_pointer(std::span<const uint64_t> pages, uint32_t access,
                                uint32_t first_byte_offset, uint64_t length) noexcept {
  return map_one<true>(pages, access, first_byte_offset, length);
}

size_t PollCore::map_burst(std::span<const MapRequest> reqs, std::span<Window*> out) noexcept {
  // The inline fast path for as many requests as it takes, with the SQ producer, the cache top
  // and the key draw in locals (one write-back, the counters added once); the request it cannot
  // take goes through map() (pointer mode's fast path, or map_general), then the burst resumes.
  const size_t n = reqs.size() < out.size() ? reqs.size() : out.size();
  size_t i = 0;
  mlx5::SqWriter& sq = qp_.sq();
  while (i < n) {
    if (!qp_.in_error()) [[likely]] {
      mlx5::SqWriter::Burst b = sq.begin_burst();
      uint32_t top = cache_.len();
      const uint64_t draw = stats_.maps;
      const size_t first = i;
      uint64_t pages = 0;
      for (; i < n; ++i) {
        const MapRequest& q = reqs[i];
        Window* const w = map_fast<false>(b, top, draw + (i - first), q.pages.data(),
                                          q.pages.size(), q.access, q.first_byte_offset, q.length);
        if (!w) [[unlikely]]
          break;
        out[i] = w;
        --top;
        pages += q.pages.size();
      }
      sq.end_burst(b, static_cast<uint32_t>(i - first));
      fast_maps_done(static_cast<uint32_t>(i - first), 0, pages);
      if (i == n) break;
    }
    // A pointer-mode request (its own fast path), or one the inline fast path refused.
    const MapRequest& q = reqs[i];
    MapResult r = q.pages.size() > tpl_.inline_pages && !qp_.in_error()
                      ? map_pointer(q.pages, q.access, q.first_byte_offset, q.length)
                      : map_general(q.pages, q.access, q.first_byte_offset, q.length);
    if (!r.ok()) break;
    out[i++] = r.window;
  }
  return i;
}

// map_general's checks before it takes anything: kOk, or why the map is refused.
Errc PollCore::map_check(std::span<const uint64_t> pages, uint32_t access,
                         uint32_t first_byte_offset, uint64_t length) noexcept {
  if (qp_.in_error()) [[unlikely]]
    return Errc::kQpError;
  if (Errc e = validate(pages, access, first_byte_offset, length); e != Errc::kOk) [[unlikely]]
    return e;
  if (no_atomic_mask_ && (access & mlx5::kAccessRemoteAtomic)) [[unlikely]]
    return Errc::kUnsupported;  // the device cannot grant atomics by UMR
  return Errc::kOk;
}

// map_general's window: the top of the cache, unless it is empty or (pointer mode) its KLM array
// is still in use (*top false then: get_window_slow's, nullptr with *why when there is none).
Window* PollCore::map_window(bool pointer, bool* top, Errc* why) noexcept {
  const uint32_t len = cache_.len();
  *top = len != 0 && !(pointer && klm_busy(cache_.at(len - 1)));
  if (*top) [[likely]]
    return cache_.pop();
  return get_window_slow(pointer, *why);
}

// Writes the map's UMR WQE (and, pointer mode, w's KLM array) past the producer index, checking
// every page against the arena in the same pass: false (nothing to commit) when one is not the
// arena's.
bool PollCore::write_map_wqe(Window* w, uint8_t key, std::span<const uint64_t> pages,
                             uint32_t access, uint32_t first_byte_offset, uint64_t length,
                             bool pointer) noexcept {
  mlx5::SqWriter& sq = qp_.sq();
  prm::UmrMap m;
  m.qpn = sq.qpn();
  m.wqe_index = sq.wqe_index();
  m.fm_ce_se = sq.next_fm_ce_se(false, umr_fence_);
  m.mkey = w->mkey_base_ | key;
  m.access = kMkcAccess[access];  // access < 16: validated
  m.start_addr = 0;               // zero-based IOVA: START_ADDR is not in the mask
  m.parent_lkey = parent_lkey_;
  m.page_size = arena_.page_size();
  m.first_offset = first_byte_offset;
  m.length = length;
  m.pages = pages;
  // The window must be free on the device (it is, by the state machine): the NIC checks it.
  m.check = prm::kUmrFlagFailIfNotFree;
  m.no_atomic_mask = no_atomic_mask_;
  // Arena::is_page for every page, in the pass that writes the KLMs. Nothing is committed
  // before the check: bytes written past the producer index are not the device's to read.
  prm::PageCheck pc;
  pc.base = arena_.base();
  pc.span = arena_.data_end() - pc.base;
  pc.mid = klm_mid_;
  prm::RingCursor cur = sq.cursor();
  if (pointer) {
    // The KLM array of a window whose pointer-mode map completed (klm_busy() false): the device
    // does not read it, so a rejected map may leave anything in it.
    const uint64_t klm = pool_.klm_array(w->id_);
    prm::write_page_klms(reinterpret_cast<mlx5_wqe_umr_klm_seg*>(klm), m, pc);
    prm::build_umr_map_pointer(cur, m, klm, parent_lkey_);
  } else {
    prm::build_umr_map_inline(cur, m, pc);
  }
  return pc.ok(m.page_size);
}

MapResult PollCore::map_general(std::span<const uint64_t> pages, uint32_t access,
                                uint32_t first_byte_offset, uint64_t length) noexcept {
  MapResult r;
  if (Errc e = map_check(pages, access, first_byte_offset, length); e != Errc::kOk) [[unlikely]] {
    r.errc = reject(e);
    return r;
  }
  const uint32_t n = static_cast<uint32_t>(pages.size());
  const bool pointer = n > inline_limit_;
  const uint32_t ds = pointer ? prm::kUmrPointerDs : prm::umr_inline_ds(n);
  mlx5::SqWriter& sq = qp_.sq();
  if (!sq.has_room(ds)) [[unlikely]] {
    r.errc = reject_map(pages, Errc::kNoRoom);
    return r;
  }
  bool top;
  Errc why = Errc::kOk;
  Window* w = map_window(pointer, &top, &why);
  if (!w) [[unlikely]] {
    r.errc = reject_map(pages, why);
    return r;
  }
  const uint8_t key = next_key(w);
  if (!write_map_wqe(w, key, pages, access, first_byte_offset, length, pointer)) [[unlikely]] {
    cache_.push(w);  // back on top, untouched
    r.errc = reject(Errc::kNotInArena);
    return r;
  }
  if (pointer) {
    ++stats_.pointer_maps;
  } else {
    ++stats_.inline_maps;
  }
  stats_.cache_hits += top;  // get_window_slow counted its own
  sq.commit(ds, MLX5_OPCODE_UMR, cookie_of(kOpMap, w));
  ++umrs_in_flight_;
  if (pointer) w->klm_end_ = static_cast<uint32_t>(sq.pi());

  return mapped(w, key, n, length);
}

MapResult PollCore::mapped(Window* w, uint8_t key, uint32_t n, uint64_t length) noexcept {
  set_key(w, key, prm::ctrl_word1(0, Be32::from_host(w->mkey_base_ | key)),
          prm::mkc_word0(false, 0, key));
  w->state_ = WindowState::kMapped;
  w->local_use_ = 0;
  w->n_pages_ = n;
  w->length_ = length;
  w->umr_end_ = qp_.sq().pi();  // just past the UMR the caller committed
  ++stats_.maps;
  stats_.pages_mapped += n;
  return result_of(w, length);
}

Errc PollCore::validate_interleaved(std::span<const InterleavedPart> parts, uint32_t blocks,
                                    uint32_t access, uint64_t* length) const noexcept {
  const uint32_t limit = std::min(max_pages_, inline_limit_);
  if (parts.empty() || blocks == 0) return Errc::kInvalidArgument;
  if (parts.size() + 1 > limit) return Errc::kTooManyPages;
  if (access & ~kKnownAccess) return Errc::kInvalidArgument;
  if ((access & kNeedsLocalWrite) && !(access & mlx5::kAccessLocalWrite))
    return Errc::kInvalidArgument;
  uint64_t block = 0;
  for (const InterleavedPart& p : parts) {
    if (p.bytes == 0) return Errc::kInvalidArgument;
    // The repeat entry's stride and byte count are 16-bit fields (PRM repeat block entry).
    if (uint64_t{p.bytes} + p.skip > 0xffff) return Errc::kOutOfRange;
    block += p.bytes;
  }
  const uint64_t len = block * blocks;  // < 2^16 * 2^6 * 2^32: no overflow
  if (len > uint64_t{max_pages_} * arena_.page_size()) return Errc::kOutOfRange;
  for (const InterleavedPart& p : parts) {
    // Block b's bytes of the part: addr + b * (bytes + skip) .. + bytes.
    const uint64_t last = p.addr + uint64_t{blocks - 1} * (p.bytes + p.skip) + p.bytes;
    if (p.addr < arena_.base() || last < p.addr || last > arena_.data_end())
      return Errc::kNotInArena;
  }
  *length = len;
  return Errc::kOk;
}

Window* PollCore::map_interleaved_fast(std::span<const InterleavedPart> parts, uint32_t blocks,
                                       uint32_t access) noexcept {
  // validate_interleaved's checks, all at once, fused into the entries' writing; the WQE is the
  // map template's head (as map_fast) with the repeat block and its entries: the bytes of
  // build_umr_interleaved (tests/window compares them).
  const size_t n = parts.size();
  const uint32_t top = cache_.len();
  const uint32_t oct = prm::repeat_block_octowords(static_cast<uint32_t>(n));
  const uint32_t ds = prm::kUmrHeaderDs + oct;
  mlx5::SqWriter& sq = qp_.sq();
  mlx5::SqWriter::Burst b = sq.begin_burst();
  mlx5::SqWriter::Slot s;
  // n + 1 translation slots (the repeat header) within the inline limit; access as map_fast.
  if (qp_.in_error() || n == 0 || n + 1 > tpl_.inline_pages || blocks == 0 || access >= 16 ||
      !((tpl_.access_ok >> access) & 1) || top == 0 ||
      !sq.reserve(b, prm::ds_to_wqebbs(ds), umr_fence_, s)) [[unlikely]]
    return nullptr;
  uint8_t* const q = s.wqe;
  auto* const rb = reinterpret_cast<mlx5_wqe_umr_repeat_block_seg*>(q + 2 * MLX5_SEND_WQE_BB);
  auto* const ent = reinterpret_cast<mlx5_wqe_umr_repeat_ent_seg*>(rb + 1);
  const uint64_t base = arena_.base(), data_end = arena_.data_end();
  uint64_t block = 0;
  bool bad = false;
  for (size_t i = 0; i < n; ++i) {
    const InterleavedPart& p = parts[i];
    const uint64_t stride = uint64_t{p.bytes} + p.skip;
    // Block b's bytes of the part: addr + b * stride .. + bytes, all in the arena's data part.
    const uint64_t last = p.addr + uint64_t{blocks - 1} * stride + p.bytes;
    bad |= p.bytes == 0 || stride > 0xffff || p.addr < base || last < p.addr || last > data_end;
    block += p.bytes;
    ent[i].stride = detail::bswap(static_cast<uint16_t>(stride));
    ent[i].byte_count = detail::bswap(static_cast<uint16_t>(p.bytes));
    ent[i].memkey = detail::bswap(parent_lkey_);
    ent[i].va = detail::bswap(p.addr);
  }
  // Without a bad part, block < 2^16 * 2^6 and length < 2^54: no overflow.
  const uint64_t length = block * blocks;
  if (bad || length > tpl_.max_length) [[unlikely]]
    return nullptr;
  Window* const w = cache_.at(top - 1);
  const uint8_t key = keys_.next_key(w->key_, stats_.maps);
  const uint64_t ctrl1_mkey = prm::ctrl_word1(0, Be32::from_host(w->mkey_base_ | key));
  const uint64_t mkc0_key = prm::mkc_word0(false, 0, key);
  prm::put_umr_head(q,
                    tpl_.ctrl0 | (uint64_t{ds} << 56) |
                        (uint64_t{detail::bswap(static_cast<uint16_t>(s.pi))} << 8),
                    ctrl1_mkey | (uint64_t{s.fm_ce_se} << 24),
                    tpl_.map_umr0 | (uint64_t{detail::bswap(static_cast<uint16_t>(oct))} << 32),
                    tpl_.map_mask_be, mkc0_key | (uint64_t{kMkcAccess[access]} << 16),
                    detail::bswap(length));
  rb->byte_count = detail::bswap(static_cast<uint32_t>(block));
  rb->op = detail::bswap(prm::kRepeatBlockOp);
  rb->repeat_count = detail::bswap(blocks);
  rb->reserved = 0;
  rb->num_ent = detail::bswap(static_cast<uint16_t>(n));
  std::memset(ent + n, 0, (oct - 1 - n) * sizeof(*ent));  // up to the WQE's 64-byte end
  sq.commit(b, s, MLX5_OPCODE_UMR, cookie_of(kOpMap, w));
  sq.end_burst(b, 1);
  set_key(w, key, ctrl1_mkey, mkc0_key);
  w->state_ = WindowState::kMapped;
  w->local_use_ = 0;
  w->n_pages_ = 0;  // no chunk page list
  w->length_ = length;
  w->umr_end_ = s.pi + s.nbb;
  fast_maps_done(1, 0, interleaved_pages(length));
  return w;
}

MapResult PollCore::map_interleaved(std::span<const InterleavedPart> parts, uint32_t blocks,
                                    uint32_t access) noexcept {
  if (Window* w = map_interleaved_fast(parts, blocks, access)) [[likely]]
    return result_of(w, w->length_);
  return map_interleaved_general(parts, blocks, access);
}

MapResult PollCore::map_interleaved_general(std::span<const InterleavedPart> parts, uint32_t blocks,
                                            uint32_t access) noexcept {
  MapResult r;
  uint64_t length = 0;
  Errc e = qp_.in_error() ? Errc::kQpError : validate_interleaved(parts, blocks, access, &length);
  if (e == Errc::kOk && no_atomic_mask_ && (access & mlx5::kAccessRemoteAtomic))
    e = Errc::kUnsupported;  // the device cannot grant atomics by UMR
  const uint32_t n = static_cast<uint32_t>(parts.size());
  const uint32_t ds = prm::kUmrHeaderDs + prm::repeat_block_octowords(n);
  mlx5::SqWriter& sq = qp_.sq();
  if (e == Errc::kOk && !sq.has_room(ds)) e = Errc::kNoRoom;
  Window* w = nullptr;
  const bool top = cache_.len() != 0;
  if (e == Errc::kOk) w = top ? cache_.pop() : get_window_slow(false, e);
  if (e != Errc::kOk || !w) [[unlikely]] {
    r.errc = reject(e == Errc::kOk ? Errc::kNoWindow : e);
    return r;
  }
  const uint8_t key = next_key(w);
  prm::RepeatEntry ents[prm::kMaxInlineKlm];
  for (uint32_t i = 0; i < n; ++i) {
    ents[i].address = parts[i].addr;
    ents[i].byte_count = static_cast<uint16_t>(parts[i].bytes);
    ents[i].stride = static_cast<uint16_t>(parts[i].bytes + parts[i].skip);
    ents[i].mkey = parent_lkey_;
  }
  prm::UmrVerbsHead h;
  h.qpn = sq.qpn();
  h.wqe_index = sq.wqe_index();
  h.fm_ce_se = sq.next_fm_ce_se(false, umr_fence_);
  h.mkey = w->mkey_base_ | key;
  h.access = kMkcAccess[access];
  h.check = prm::kUmrFlagFailIfNotFree;  // free on the device, by the state machine
  h.no_atomic_mask = no_atomic_mask_;
  prm::RingCursor cur = sq.cursor();
  prm::build_umr_interleaved(cur, h, blocks, std::span<const prm::RepeatEntry>(ents, n));
  ++stats_.inline_maps;
  stats_.cache_hits += top;  // get_window_slow counted its own
  sq.commit(ds, MLX5_OPCODE_UMR, cookie_of(kOpMap, w));
  ++umrs_in_flight_;
  stats_.pages_mapped += interleaved_pages(length);
  return mapped(w, key, 0, length);  // no chunk page list
}

Errc PollCore::post_umr_invalidate(Window* w, uint8_t fence) noexcept {
  mlx5::SqWriter& sq = qp_.sq();
  if (!sq.has_room(prm::kUmrHeaderDs)) return Errc::kNoRoom;
  prm::RingCursor cur = sq.cursor();
  // No free-state check: a peer's SEND_WITH_INV may have freed it already (that race is legal).
  prm::build_umr_invalidate(cur, sq.qpn(), sq.wqe_index(), sq.next_fm_ce_se(false, fence),
                            w->rkey(), 0);
  sq.commit(prm::kUmrHeaderDs, MLX5_OPCODE_UMR, cookie_of(kOpUnmap, w));
  ++umrs_in_flight_;
  w->umr_end_ = sq.pi();
  return Errc::kOk;
}

bool PollCore::unmap_fast(mlx5::SqWriter::Burst& b, Window* w, uint32_t& fenced) noexcept {
  // The fast path: a window of this core, mapped, whose invalidate does not wrap the ring. The
  // pool's windows are one array of power-of-two sized objects: rotating the byte offset right by
  // log2(sizeof(Window)) moves a misaligned remainder into the top bits, so one unsigned compare
  // against the window count proves both the range and the alignment (no modulo, no division).
  static_assert(std::has_single_bit(sizeof(Window)));
  const uint64_t at =
      std::rotr(reinterpret_cast<uintptr_t>(w) - reinterpret_cast<uintptr_t>(windows_),
                std::countr_zero(sizeof(Window)));
  if (at >= tpl_.n_windows || w->state_ != WindowState::kMapped || w->owner_ != id_) [[unlikely]]
    return false;
  // The fence: as unmap_general.
  uint8_t fence = prm::kFenceNone;
  mlx5::SqWriter& sq = qp_.sq();
  const bool in_use = w->local_use_ && static_cast<int32_t>(sq.ci() - w->use_end_) < 0;
  if (in_use) [[unlikely]]
    fence = (w->local_use_ & Window::kUsedByGather) ? prm::kFenceStrongOrdering
                                                    : prm::kFenceSmallAndFence;
  mlx5::SqWriter::Slot s;
  if (!sq.reserve(b, 2, fence, s)) [[unlikely]]
    return false;
  // The invalidate template: only the index, the fence and the key (the words the map left in
  // the window) change.
  prm::put_umr_head(s.wqe,
                    tpl_.inv_ctrl0 | (uint64_t{detail::bswap(static_cast<uint16_t>(s.pi))} << 8),
                    w->inv_ctrl1_ | (uint64_t{s.fm_ce_se} << 24), tpl_.inv_umr0, tpl_.inv_mask_be,
                    w->inv_mkc0_, 0);
  sq.commit(b, s, MLX5_OPCODE_UMR, cookie_of(kOpUnmap, w));
  w->umr_end_ = s.pi + s.nbb;
  fenced += in_use;
  w->state_ = WindowState::kUnmapping;
  w->local_use_ = 0;
  return true;
}

void PollCore::fast_unmaps_done(Window* const* ws, uint32_t count, uint32_t fenced) noexcept {
  // Same-SQ ordering: a later map of these windows on this core runs after their invalidates.
  cache_.push_burst(ws, count);
  umrs_in_flight_ += count;
  stats_.unmaps += count;
  stats_.fenced_unmaps += fenced;
  if (cache_.over()) [[unlikely]]
    flush_to_depot();
}

Errc PollCore::unmap(Window* w) noexcept {
  mlx5::SqWriter& sq = qp_.sq();
  mlx5::SqWriter::Burst b = sq.begin_burst();
  uint32_t fenced = 0;
  if (qp_.in_error() || !unmap_fast(b, w, fenced)) [[unlikely]]
    return unmap_general(w);
  sq.end_burst(b, 1);
  fast_unmaps_done(&w, 1, fenced);
  return Errc::kOk;
}

Errc PollCore::unmap_general(Window* w) noexcept {
  if (!pool_.owns(w)) [[unlikely]]
    return reject(Errc::kInvalidArgument);
  if (w->state_ != WindowState::kMapped) [[unlikely]]
    return reject(Errc::kNotMapped);
  if (w->owner_ != id_) [[unlikely]]
    return reject(Errc::kWrongCore);
  if (qp_.in_error()) [[unlikely]]
    return reject(Errc::kQpError);
  // Fence (doc/guides/windows.md, "Fences"): only while a data WQE that used the window as its
  // local key has not completed. A READ (or atomic) scattering into it: SMALL_AND_FENCE (0x80,
  // IBV_SEND_FENCE) waits for prior READ/atomic WQEs; a WRITE/SEND gathering from it may re-read
  // it on retransmission until acknowledged: STRONG_ORDERING (all prior WQEs done). Once the SQ
  // consumer passed the last such WQE (its completion was polled), the invalidate needs
  // no fence of its own and the SQ keeps flowing. The umr_fence cap is not an invalidate's: the
  // kernel gives dev->umr_fence to REG_MR (and its integrity and crypto forms) only, and posts
  // LOCAL_INV with the QP's inherited fence, or FENCE / SMALL_AND_FENCE when asked (Linux
  // drivers/infiniband/hw/mlx5/wr.c mlx5_ib_post_send; 4.x kernels' qp.c gave LOCAL_INV the cap's
  // fence too). The SqWriter still adds INITIATOR_SMALL right after a UMR.
  uint8_t fence = prm::kFenceNone;
  const bool in_use = w->local_use_ && static_cast<int32_t>(qp_.sq().ci() - w->use_end_) < 0;
  if (in_use)
    fence = (w->local_use_ & Window::kUsedByGather) ? prm::kFenceStrongOrdering
                                                    : prm::kFenceSmallAndFence;
  if (Errc e = post_umr_invalidate(w, fence); e != Errc::kOk) [[unlikely]]
    return reject(e);
  stats_.fenced_unmaps += in_use;
  w->state_ = WindowState::kUnmapping;
  w->local_use_ = 0;
  ++stats_.unmaps;
  // Same-SQ ordering: a later map of this window on this core runs after the invalidate.
  cache_.push(w);
  if (cache_.over()) flush_to_depot();
  return Errc::kOk;
}

size_t PollCore::unmap_burst(std::span<Window* const> ws) noexcept {
  // As map_burst: the fast path with the SQ producer in locals, unmap() for what it cannot take.
  const size_t n = ws.size();
  size_t i = 0;
  mlx5::SqWriter& sq = qp_.sq();
  while (i < n) {
    if (!qp_.in_error()) [[likely]] {
      mlx5::SqWriter::Burst b = sq.begin_burst();
      uint32_t fenced = 0;
      const size_t first = i;
      while (i < n && unmap_fast(b, ws[i], fenced)) ++i;
      sq.end_burst(b, static_cast<uint32_t>(i - first));
      fast_unmaps_done(ws.data() + first, static_cast<uint32_t>(i - first), fenced);
      if (i == n) break;
    }
    if (unmap_general(ws[i]) != Errc::kOk) break;
    ++i;
  }
  return i;
}

void PollCore::note_local_use(std::span<const prm::Sge> local, uint8_t use) noexcept {
  const uint32_t end = qp_.sq().pi();  // just past the WQE committed by the caller
  for (const prm::Sge& s : local) {
    if (s.lkey == parent_lkey_) continue;
    Window* w = pool_.find(s.lkey);
    if (w && w->owner_ == id_ && w->state_ == WindowState::kMapped && w->lkey() == s.lkey) {
      w->local_use_ |= use;
      w->use_end_ = end;
    }
  }
}

Errc PollCore::post_data(uint8_t opcode, std::span<const prm::Sge> local, uint64_t raddr,
                         uint32_t rkey, Be32 imm, uint64_t cookie, bool signal) noexcept {
  if ((cookie & kInternalCookie) || local.size() > kMaxSges) [[unlikely]]
    return reject(Errc::kInvalidArgument);
  if (qp_.in_error()) [[unlikely]]
    return reject(Errc::kQpError);
  const bool rdma = opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_READ;
  const uint32_t ds = (rdma ? 2u : 1u) + static_cast<uint32_t>(local.size());
  mlx5::SqWriter& sq = qp_.sq();
  if (!sq.has_room(ds)) [[unlikely]]
    return reject(Errc::kNoRoom);
  prm::RingCursor cur = sq.cursor();
  const uint8_t f = sq.next_fm_ce_se(signal);
  if (rdma)
    prm::build_rdma(cur, opcode, sq.qpn(), sq.wqe_index(), f, raddr, rkey, local, imm);
  else
    prm::build_send(cur, opcode, sq.qpn(), sq.wqe_index(), f, local, imm);
  sq.commit(ds, opcode, cookie);
  note_local_use(local,
                 opcode == MLX5_OPCODE_RDMA_READ ? Window::kUsedByRead : Window::kUsedByGather);
  return Errc::kOk;
}

Errc PollCore::post_write(std::span<const prm::Sge> local, uint64_t raddr, uint32_t rkey,
                          uint64_t cookie, bool signal) noexcept {
  return post_data(MLX5_OPCODE_RDMA_WRITE, local, raddr, rkey, Be32{}, cookie, signal);
}

Errc PollCore::post_read(std::span<const prm::Sge> local, uint64_t raddr, uint32_t rkey,
                         uint64_t cookie, bool signal) noexcept {
  return post_data(MLX5_OPCODE_RDMA_READ, local, raddr, rkey, Be32{}, cookie, signal);
}

Errc PollCore::post_send(std::span<const prm::Sge> local, uint64_t cookie, bool signal) noexcept {
  return post_data(MLX5_OPCODE_SEND, local, 0, 0, Be32{}, cookie, signal);
}

Errc PollCore::post_send_inv(std::span<const prm::Sge> local, uint32_t invalidate_rkey,
                             uint64_t cookie, bool signal) noexcept {
  return post_data(MLX5_OPCODE_SEND_INVAL, local, 0, 0, Be32::from_host(invalidate_rkey), cookie,
                   signal);
}

Errc PollCore::post_recv(std::span<const prm::Sge> local, uint64_t cookie) noexcept {
  if (local.size() > kMaxSges) [[unlikely]]
    return reject(Errc::kInvalidArgument);
  if (qp_.in_error()) [[unlikely]]
    return reject(Errc::kQpError);
  if (!qp_.rq().post(local, cookie)) [[unlikely]]
    return reject(Errc::kNoRoom);
  rq_posted_ = true;
  return Errc::kOk;
}

// ---- Type-2 memory windows ---------------------------------------------------------------------

BindResult PollCore::bind_mw(uint64_t addr, uint64_t length, uint32_t access,
                             bool zero_based) noexcept {
  constexpr uint32_t kMwAccess =
      mlx5::kAccessRemoteRead | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteAtomic;
  BindResult r;
  Errc e = Errc::kOk;
  if (length == 0 || access == 0 || (access & ~kMwAccess))
    e = Errc::kInvalidArgument;
  else if (length > prm::kMaxBindMwLength)
    e = Errc::kOutOfRange;
  else if (addr < arena_.base() || addr + length < addr || addr + length > arena_.data_end())
    e = Errc::kNotInArena;
  else if (no_atomic_mask_ && (access & mlx5::kAccessRemoteAtomic))
    e = Errc::kUnsupported;  // the device cannot grant atomics by UMR
  else if (qp_.in_error())
    e = Errc::kQpError;
  else if (!qp_.sq().has_room(prm::kUmrHeaderDs + 4))
    e = Errc::kNoRoom;
  else if (mw_free_len_ == 0)
    e = Errc::kNoWindow;
  if (e != Errc::kOk) [[unlikely]] {
    r.errc = reject(e);
    return r;
  }
  MemoryWindow* mw = mw_free_[--mw_free_len_];
  // The key table is refreshed here rather than in poll() (binds are rarer than polls): any
  // refresh point works as long as no more than half a table is drawn between two of them.
  mw_keys_.refresh(stats_.mw_binds);
  const uint8_t key = mw_keys_.next_key(mw->key_, stats_.mw_binds);
  mlx5::SqWriter& sq = qp_.sq();
  prm::BindMw b;
  b.qpn = sq.qpn();
  b.wqe_index = sq.wqe_index();
  b.fm_ce_se = sq.next_fm_ce_se(false, umr_fence_);
  b.mw_rkey = mw->rkey();
  b.new_rkey = mw->mkey_base_ | key;
  b.type2 = true;
  b.access = kMkcAccess[access];
  b.zero_based = zero_based;
  b.addr = addr;
  b.length = length;
  b.mr_lkey = parent_lkey_;
  b.no_atomic_mask = no_atomic_mask_;
  prm::RingCursor cur = sq.cursor();
  const uint32_t ds = prm::build_bind_mw(cur, b);
  sq.commit(ds, MLX5_OPCODE_UMR, cookie_of_mw(kOpMwBind, mw));
  ++umrs_in_flight_;
  ++mw->outstanding_;
  mw->key_ = key;
  mw->state_ = MwState::kBound;
  mw->addr_ = addr;
  mw->length_ = length;
  mw->zero_based_ = zero_based;
  ++stats_.mw_binds;
  r.mw = mw;
  r.rkey = mw->rkey();
  r.iova = mw->iova();
  r.length = length;
  return r;
}

Errc PollCore::post_mw_invalidate(MemoryWindow* mw, uint8_t fence) noexcept {
  mlx5::SqWriter& sq = qp_.sq();
  if (!sq.has_room(prm::kUmrHeaderDs)) return Errc::kNoRoom;
  prm::RingCursor cur = sq.cursor();
  // rdma-core's type-2 window invalidate (providers/mlx5/qp.c mlx5_send_wr_local_inv ->
  // set_bind_wr: INLINE|TRANSLATION_OFFSET|CHECK_QPN, mask FREE|KEY|QPN), so the device refuses
  // it from a QP the window is not bound to and unbinds the window; no free-state check (the
  // peer's SEND_WITH_INV may have freed it). The key byte stays the window's (rdma-core writes
  // 0), so the next bind's key differs from the one just retired.
  prm::build_mw_invalidate(cur, sq.qpn(), sq.wqe_index(), sq.next_fm_ce_se(false, fence),
                           mw->rkey());
  sq.commit(prm::kUmrHeaderDs, MLX5_OPCODE_UMR, cookie_of_mw(kOpMwInvalidate, mw));
  ++umrs_in_flight_;
  ++mw->outstanding_;
  return Errc::kOk;
}

Errc PollCore::invalidate_mw(MemoryWindow* mw) noexcept {
  const uintptr_t at = reinterpret_cast<uintptr_t>(mw) - reinterpret_cast<uintptr_t>(mws_.get());
  if (!mw || !n_mws_ || at % sizeof(MemoryWindow) || at / sizeof(MemoryWindow) >= n_mws_)
      [[unlikely]]
    return reject(Errc::kInvalidArgument);
  if (mw->state_ != MwState::kBound) [[unlikely]]
    return reject(Errc::kNotMapped);
  if (qp_.in_error()) [[unlikely]]
    return reject(Errc::kQpError);
  // A memory window is never a local key: no data WQE of this SQ needs to finish first, and an
  // invalidate takes no umr_fence (as a window's unmap, unmap_general).
  if (Errc e = post_mw_invalidate(mw, prm::kFenceNone); e != Errc::kOk) [[unlikely]]
    return reject(e);
  mw->state_ = MwState::kFree;
  mw_free_[mw_free_len_++] = mw;  // same-SQ order: a later bind runs after the invalidate
  ++stats_.mw_invalidates;
  return Errc::kOk;
}

void PollCore::on_mw_internal(const mlx5::Completion& c) noexcept {
  const uint32_t id = static_cast<uint32_t>(c.cookie);
  RDMX_DEBUG_ASSERT(id < n_mws_);
  MemoryWindow* mw = &mws_[id];
  RDMX_DEBUG_ASSERT(mw->outstanding_ > 0);
  if (!umr_completed(c)) [[unlikely]]
    mw->dirty_ = true;
  --mw->outstanding_;
}

bool PollCore::mw_remote_invalidated(uint32_t rkey, Errc* out) noexcept {
  for (uint32_t i = 0; i < n_mws_; ++i) {
    MemoryWindow* mw = &mws_[i];
    if (mw->mkey_base_ != (rkey & ~0xffu)) continue;
    if (mw->state_ != MwState::kBound || mw->rkey() != rkey) {
      ++stats_.stale_invalidations;
      *out = Errc::kNotMapped;
      return true;
    }
    // The peer's NIC freed it: no UMR is needed.
    mw->state_ = MwState::kFree;
    mw_free_[mw_free_len_++] = mw;
    ++stats_.mw_remote_invalidations;
    *out = Errc::kOk;
    return true;
  }
  return false;
}

void PollCore::flush() noexcept {
  if (rq_posted_) {
    qp_.rq().ring_doorbell();
    rq_posted_ = false;
  }
  qp_.sq().ring_doorbell();
}

bool PollCore::umr_completed(const mlx5::Completion& c) noexcept {
  ++stats_.umr_completions;
  --umrs_in_flight_;
  if (c.ok()) return true;
  ++stats_.umr_errors;
  ++stats_.wqe_errors;
  ++stats_.syndromes[c.status];
  return false;
}

void PollCore::on_internal(const mlx5::Completion& c) noexcept {
  if (c.cookie & kMwCookie) {
    on_mw_internal(c);
    return;
  }
  const uint32_t wid = static_cast<uint32_t>(c.cookie);
  RDMX_DEBUG_ASSERT(wid < pool_.n_windows());
  Window* w = &pool_.window(wid);
  RDMX_DEBUG_ASSERT(w->owner_ == id_);
  // A failed or flushed UMR: whether it took effect is unknown until recover().
  if (!umr_completed(c)) [[unlikely]]
    w->dirty_ = true;
}

void PollCore::on_app_error(const mlx5::Completion& c) noexcept {
  ++stats_.wqe_errors;
  ++stats_.syndromes[c.status];
}

Errc PollCore::remote_invalidated(uint32_t rkey) noexcept {
  Window* w = pool_.find(rkey);
  if (!w && n_mws_) [[unlikely]] {
    Errc e;
    if (mw_remote_invalidated(rkey, &e)) return e;
  }
  if (!w) {
    ++stats_.stale_invalidations;
    return Errc::kNotMapped;
  }
  if (w->owner_ != id_) {
    ++stats_.foreign_invalidations;
    return w->state_ == WindowState::kMapped ? Errc::kWrongCore : Errc::kNotMapped;
  }
  if (w->state_ != WindowState::kMapped || w->rkey() != rkey) {
    // Already unmapped here (our invalidate and the peer's crossed), or an older key.
    ++stats_.stale_invalidations;
    return Errc::kNotMapped;
  }
  // The peer's NIC freed the mkey: no UMR is needed and none may be counted as pending for it.
  w->state_ = umrs_done(w) ? WindowState::kCache : WindowState::kUnmapping;
  w->local_use_ = 0;
  ++stats_.remote_invalidations;
  cache_.push(w);
  return Errc::kOk;
}

void PollCore::on_remote_invalidate(uint32_t rkey) noexcept {
  (void)remote_invalidated(rkey);
}

}  // namespace rdmx::win
