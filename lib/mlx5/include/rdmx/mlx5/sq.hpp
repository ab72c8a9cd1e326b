// Send-queue writer: producer index in WQEBBs, room check, shadow table of caller cookies,
// unsignaled batching, fences, and one doorbell per burst. Shared by dv and emu; owned by one
// poll core (no atomics, no locks).
//
// Usage per WQE (hot path):
//   if (!sq.has_room(ds)) -> poll first
//   auto cur = sq.cursor();
//   uint32_t ds = prm::build_xxx(cur, ..., sq.wqe_index(), sq.next_fm_ce_se(sig, fence), ...);
//   sq.commit(ds, opcode, cookie, sig);
// and once per burst: sq.ring_doorbell().
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <rdmx/core/assert.hpp>
#include <rdmx/core/be.hpp>
#include <rdmx/core/config.hpp>
#include <rdmx/mlx5/barrier.hpp>
#include <rdmx/mlx5/prm/defs.hpp>
#include <rdmx/mlx5/prm/wqe.hpp>
#include <rdmx/mlx5/queue_desc.hpp>

namespace rdmx::mlx5 {

// One shadow entry per WQEBB slot; only the slot where a WQE starts is meaningful.
struct SqShadow {
  uint64_t cookie;
  uint16_t n_wqebb;
  uint8_t opcode;
  uint8_t pad8;  // padding to 16 bytes
  uint32_t seq;  // the WQE's number: SqWriter::posted() before it (low 32 bits)
};
static_assert(sizeof(SqShadow) == 16);

class SqWriter {
 public:
  SqWriter() = default;
  SqWriter(const SqWriter&) = delete;
  SqWriter& operator=(const SqWriter&) = delete;

  // Setup path: attach to a ring. signal_every >= 1: at most signal_every-1 unsignaled WQEs in
  // a row. Allocates the shadow table (the only allocation).
  void init(const SqDesc& d, uint32_t qpn, uint32_t signal_every);
  // After a QP reset (device counters return to 0): forget everything posted. The producer and
  // consumer counters move on to the next multiple of 65536 rather than back to 0: the ring
  // slot and the 16-bit WQE counter start over as the device's do, and a position recorded
  // before the reset (PollCore's windows keep some) stays behind the consumer.
  void reset() noexcept;
  // Setup path, for tools and tests: continue as if `pi` WQEBBs had been posted and completed
  // and the last WQE left `fm_cache` as the fence the next WQE inherits (0 or
  // prm::kFenceInitiatorSmall after a UMR). Nothing is in flight afterwards.
  void restart_at(uint64_t pi, uint8_t fm_cache) noexcept {
    pi_ = ci_ = db_pi_ = loud_end_ = pi;
    unsignaled_ = 0;
    fm_cache_ = fm_cache;
  }

  uint32_t qpn() const noexcept { return qpn_; }
  uint32_t wqe_cnt() const noexcept { return n_; }
  // Free-running 64-bit counters in WQEBBs (they do not wrap in the life of a process): the
  // producer, the consumer (first WQEBB not yet completed), and the end of the last WQE
  // committed other than through a Burst (see Burst).
  uint64_t pi() const noexcept { return pi_; }
  uint64_t ci() const noexcept { return ci_; }
  uint64_t loud_end() const noexcept { return loud_end_; }
  uint32_t in_flight() const noexcept { return static_cast<uint32_t>(pi_ - ci_); }
  uint32_t free_wqebbs() const noexcept { return n_ - in_flight(); }
  bool has_room(uint32_t ds) const noexcept { return prm::ds_to_wqebbs(ds) <= free_wqebbs(); }
  uint16_t wqe_index() const noexcept { return static_cast<uint16_t>(pi_); }
  prm::RingCursor cursor() const noexcept {
    return prm::RingCursor(buf_, n_, static_cast<uint32_t>(pi_ & (n_ - 1)));
  }

  // fm_ce_se for the next WQE: the fence inherited from a preceding UMR (INITIATOR_SMALL, as
  // rdma-core's fm_cache and the kernel do), or a stronger one when asked; CQ_UPDATE when
  // signaled is asked or when the unsignaled budget is used up; solicited when asked.
  uint8_t next_fm_ce_se(bool signal, uint8_t fence = 0, bool solicited = false) const noexcept {
    uint8_t f = fence ? fence : fm_cache_;
    if (signal || unsignaled_ + 1 >= signal_every_) f |= MLX5_WQE_CTRL_CQ_UPDATE;
    if (solicited) f |= MLX5_WQE_CTRL_SOLICITED;
    return f;
  }

  // Records the WQE just written at the cursor (ds DS long) and advances the producer.
  void commit(uint32_t ds, uint8_t opcode, uint64_t cookie) noexcept {
    const uint32_t slot = pi_ & (n_ - 1);
    auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(static_cast<uint8_t*>(buf_) +
                                                      size_t{slot} * MLX5_SEND_WQE_BB);
    const bool sig = (ctrl->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
    const uint16_t nbb = static_cast<uint16_t>(prm::ds_to_wqebbs(ds));
    RDMX_DEBUG_ASSERT(nbb <= free_wqebbs());
    shadow_[slot] = SqShadow{cookie, nbb, opcode, 0, static_cast<uint32_t>(posted_)};
    unsignaled_ = sig ? 0 : unsignaled_ + 1;
    fm_cache_ = (opcode == MLX5_OPCODE_UMR) ? prm::kFenceInitiatorSmall : 0;
    last_ctrl_ = ctrl;
    pi_ += nbb;
    loud_end_ = pi_;
    ++posted_;
  }

  // The hot path's contiguous WQEs (prebuilt templates written through a plain pointer): a WQE
  // of `nbb` WQEBBs at the producer that does not reach past the ring's end. The producer state
  // is read once into a Burst (below) and the Slot, before the caller's stores (which may alias
  // it), and written back once by end_burst(): nothing is reloaded in between, and commit does
  // not re-read the WQE.
  struct Slot {
    uint8_t* wqe;  // the WQE's first byte (its nbb WQEBBs are contiguous)
    uint64_t pi;   // producer counter at the WQE
    uint32_t nbb;  // its size in WQEBBs
    uint32_t unsignaled;
    uint8_t fm_ce_se;  // for its ctrl segment: next_fm_ce_se(false, fence)
  };
  // One or several such WQEs in a row (PollCore's map/unmap and their bursts): the producer
  // state lives in a Burst (registers) from begin_burst() to end_burst(). Nothing else may post
  // on this SQ in between, and nothing may move its consumer (poll). `room` is what the burst
  // may take without a room or wrap check per WQE: the free WQEBBs from the producer up to the
  // ring's end (a WQE that would wrap takes the cursor path). WQEs committed through a Burst
  // are "quiet": QueuePair::poll<true> may retire a run of them that a CQE covers in one step,
  // without offering each to its fast callback (only PollCore's window UMRs are posted so).
  struct Burst {
    uint64_t pi;
    uint32_t room;
    uint64_t seq_hi;  // the next WQE's number (low 32 bits of posted()) << 32: its shadow word
    uint32_t unsignaled;
    uint8_t fm_cache;
    mlx5_wqe_ctrl_seg* last_ctrl;
  };
  Burst begin_burst() const noexcept {
    const uint32_t free = free_wqebbs();
    const uint32_t to_end = n_ - static_cast<uint32_t>(pi_ & (n_ - 1));
    return Burst{pi_,       free < to_end ? free : to_end, posted_ << 32, unsignaled_, fm_cache_,
                 last_ctrl_};
  }
  // False when the SQ lacks room or the WQE would wrap (then the caller takes the cursor path).
  bool reserve(const Burst& b, uint32_t nbb, uint8_t fence, Slot& s) const noexcept {
    if (nbb > b.room) return false;
    s.wqe = static_cast<uint8_t*>(buf_) + size_t{b.pi & (n_ - 1)} * MLX5_SEND_WQE_BB;
    s.pi = b.pi;
    s.nbb = nbb;
    s.unsignaled = b.unsignaled;
    uint8_t f = fence ? fence : b.fm_cache;
    if (s.unsignaled + 1 >= signal_every_) f |= MLX5_WQE_CTRL_CQ_UPDATE;
    s.fm_ce_se = f;
    return true;
  }
  // Records the reserved Slot's WQE (written by the caller, with s.fm_ce_se in its ctrl).
  void commit(Burst& b, const Slot& s, uint8_t opcode, uint64_t cookie) noexcept {
    // The shadow entry in two stores: the cookie, then n_wqebb, opcode and the zero padding as
    // one word (the field-by-field form compiles to four).
    static_assert(offsetof(SqShadow, n_wqebb) == 8 && offsetof(SqShadow, opcode) == 10 &&
                  offsetof(SqShadow, pad8) == 11 && offsetof(SqShadow, seq) == 12 &&
                  std::endian::native == std::endian::little);
    SqShadow& sh = shadow_[s.pi & (n_ - 1)];
    const uint64_t meta =
        uint64_t{static_cast<uint16_t>(s.nbb)} | (uint64_t{opcode} << 16) | b.seq_hi;
    sh.cookie = cookie;
    std::memcpy(&sh.n_wqebb, &meta, sizeof(meta));
    b.unsignaled = (s.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) ? 0 : s.unsignaled + 1;
    b.fm_cache = (opcode == MLX5_OPCODE_UMR) ? prm::kFenceInitiatorSmall : 0;
    b.last_ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(s.wqe);
    b.pi = s.pi + s.nbb;
    b.room -= s.nbb;
    b.seq_hi += uint64_t{1} << 32;
  }
  // Writes the burst's producer state back; `wqes` WQEs were committed in it.
  void end_burst(const Burst& b, uint32_t wqes) noexcept {
    pi_ = b.pi;
    unsignaled_ = b.unsignaled;
    fm_cache_ = b.fm_cache;
    last_ctrl_ = b.last_ctrl;
    posted_ += wqes;
  }

  // Ends a burst: makes the last WQE signaled if any WQE since the last signaled one is not
  // (so every WQE is eventually covered by a CQE), then rings the doorbell. No-op when nothing
  // was posted since the last ring.
  void ring_doorbell() noexcept {
    if (pi_ == db_pi_) return;
    if (unsignaled_ != 0) {
      last_ctrl_->fm_ce_se |= MLX5_WQE_CTRL_CQ_UPDATE;
      unsignaled_ = 0;
    }
    // PRM doorbell sequence: WQE stores visible before the doorbell record (release), the
    // record before the register write; the register gets the first 8 bytes of the last WQE's
    // control segment (rdma-core post_send_db, DPDK mlx5_doorbell_ring).
    wmb_to_device();
    __atomic_store_n(dbrec_, detail::bswap(static_cast<uint32_t>(pi_ & 0xffffu)), __ATOMIC_RELEASE);
    wc_flush();
    uint64_t first8;
    __builtin_memcpy(&first8, last_ctrl_, sizeof(first8));
    *reg_ = first8;
    wc_flush();
    db_pi_ = pi_;
    ++doorbells_;
    hook_();
  }

  // Completion side: the WQE starting at `ci` slot. Used by the CQ poller.
  const SqShadow& shadow_at(uint64_t counter) const noexcept { return shadow_[counter & (n_ - 1)]; }
  void retire(uint32_t n_wqebb) noexcept { ci_ += n_wqebb; }
  // Completion side: the shadow table (wqe_cnt() entries; index with counter & (wqe_cnt()-1)).
  const SqShadow* shadow() const noexcept { return shadow_.get(); }
  // Completion side: everything before `ci` has completed (a batch of retire()).
  void set_ci(uint64_t ci) noexcept { ci_ = ci; }

  uint64_t posted() const noexcept { return posted_; }
  uint64_t doorbells() const noexcept { return doorbells_; }

 private:
  void* buf_ = nullptr;
  uint32_t n_ = 0;
  uint32_t qpn_ = 0;
  uint64_t pi_ = 0;
  uint64_t ci_ = 0;
  uint64_t db_pi_ = 0;
  uint64_t loud_end_ = 0;
  uint32_t unsignaled_ = 0;
  uint32_t signal_every_ = kDefaultSignalEvery;
  uint8_t fm_cache_ = 0;
  mlx5_wqe_ctrl_seg* last_ctrl_ = nullptr;
  volatile uint32_t* dbrec_ = nullptr;
  volatile uint64_t* reg_ = nullptr;
  DoorbellHook hook_;
  std::unique_ptr<SqShadow[]> shadow_;
  uint64_t posted_ = 0;
  uint64_t doorbells_ = 0;
};

}  // namespace rdmx::mlx5
