// A poll core's queue pair as the CPU sees it: send-queue writer, receive-queue writer and the
// CQ poller that maps every CQE back to the WQE(s) it completes. Concrete, shared by dv and
// emu; owned by one core.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include <rdmx/core/assert.hpp>
#include <rdmx/core/counter.hpp>
#include <rdmx/mlx5/barrier.hpp>
#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/mlx5/queue_desc.hpp>
#include <rdmx/mlx5/sq.hpp>

namespace rdmx::mlx5 {

// One completed work request.
struct Completion {
  uint64_t cookie = 0;    // what the caller passed at post time
  uint32_t byte_len = 0;  // receive: bytes received; RDMA READ: bytes read
  uint32_t imm = 0;       // immediate data or the invalidated rkey (host order)
  uint8_t status = 0;     // 0 = success, else the CQE syndrome (MLX5_CQE_SYNDROME_*)
  uint8_t vendor_syndrome = 0;
  uint8_t wqe_opcode = 0;  // send side: MLX5_OPCODE_* of the WQE
  uint8_t cqe_opcode = 0;  // MLX5_CQE_* (REQ for a covered unsignaled WQE)
  bool recv = false;       // completion of a receive WQE
  bool signaled = false;   // false: an unsignaled WQE covered by a later CQE
  bool ok() const noexcept { return status == 0; }
};

class RqWriter {
 public:
  void init(const RqDesc& d);
  void reset() noexcept;
  uint32_t free_slots() const noexcept { return n_ - (pi_ - ci_); }
  // Posts one receive WQE; false when the RQ is full.
  bool post(std::span<const prm::Sge> sges, uint64_t cookie) noexcept {
    if (free_slots() == 0) return false;
    const uint32_t slot = pi_ & (n_ - 1);
    prm::build_recv(static_cast<uint8_t*>(buf_) + size_t{slot} * stride_, stride_, sges);
    cookies_[slot] = cookie;
    ++pi_;
    return true;
  }
  // Publishes posted receives (doorbell record only; receive queues have no register write).
  void ring_doorbell() noexcept {
    wmb_to_device();
    __atomic_store_n(dbrec_, detail::bswap(pi_ & 0xffffu), __ATOMIC_RELEASE);
    hook_();
  }
  uint64_t take(uint16_t wqe_counter) noexcept {
    (void)wqe_counter;
    return cookies_[ci_++ & (n_ - 1)];
  }
  uint32_t posted_not_completed() const noexcept { return pi_ - ci_; }

 private:
  void* buf_ = nullptr;
  uint32_t n_ = 0;
  uint32_t stride_ = 0;
  uint32_t pi_ = 0;
  uint32_t ci_ = 0;
  volatile uint32_t* dbrec_ = nullptr;
  DoorbellHook hook_;
  std::unique_ptr<uint64_t[]> cookies_;
};

class CqPoller {
 public:
  void init(const CqDesc& d);
  void reset() noexcept;
  // The next software-owned CQE, or nullptr. Once the owner bit says software, the device
  // barrier orders the reads of the rest of the CQE after it (rdma-core cq.c get_next_cqe).
  const mlx5_cqe64* peek() const noexcept {
    const auto* c = reinterpret_cast<const mlx5_cqe64*>(buf_) + (ci_ & (n_ - 1));
    if (!prm::cqe_is_sw_owned(c, ci_, n_)) return nullptr;
    rmb_from_device();
    return c;
  }
  void pop() noexcept { ++ci_; }
  // Tells the device how far software has consumed: the CQ doorbell record (consumer index).
  void update_doorbell() noexcept {
    wmb_to_device();
    __atomic_store_n(dbrec_, detail::bswap(ci_ & prm::kCqDbrCiMask), __ATOMIC_RELEASE);
    published_ = ci_;
  }
  // The same, only when CQEs were consumed since the last publication (before a callback that
  // may post: the device then sees every CQE already read as free).
  void publish() noexcept {
    if (ci_ != published_) update_doorbell();
  }
  uint32_t ci() const noexcept { return ci_; }
  uint32_t cqe_cnt() const noexcept { return n_; }

 private:
  void* buf_ = nullptr;
  uint32_t n_ = 0;
  uint32_t ci_ = 0;
  uint32_t published_ = 0;  // the consumer index last written to the doorbell record
  volatile uint32_t* dbrec_ = nullptr;
};

// Written by the thread that polls the QP, readable from any thread (rdmx_core_stats_get).
struct QpStats {
  Counter cqes;
  Counter completions;
  Counter errors;
  Counter bad_cqes;  // CQE naming a WQE that is not in flight (device bug / corruption)
};

class QueuePair {
 public:
  // Setup path.
  void init(const QpDesc& d, uint32_t signal_every);
  // After the device reset the QP (error recovery): rings back to index 0.
  void reset() noexcept;

  SqWriter& sq() noexcept { return sq_; }
  const SqWriter& sq() const noexcept { return sq_; }
  RqWriter& rq() noexcept { return rq_; }
  CqPoller& cq() noexcept { return cq_; }
  uint32_t qpn() const noexcept { return qpn_; }
  const QpStats& stats() const noexcept { return stats_; }
  // True once an error CQE was seen (the QP is in the error state until recovered).
  bool in_error() const noexcept { return in_error_; }

  // Reads up to max_cqes CQEs and calls on(const Completion&) once per completed WQE: for a
  // send CQE, every unsignaled WQE it covers first (in order), then the WQE it names. Returns
  // the number of CQEs consumed. Hot path: no allocation. The CQ doorbell record (consumer
  // index) is written at the end, and also before each on() call when CQEs were consumed since
  // the last write: on() may post and ring, and the device must not see the CQEs already read
  // as still occupied (with a CQ sized to its limit it would overflow). rdma-core's poll writes
  // it once at the end (providers/mlx5/cq.c update_cons_index) because verbs has no callbacks.
  template <class F>
  uint32_t poll(uint32_t max_cqes, F&& on) noexcept {
    return poll(
        max_cqes, [](uint64_t) noexcept { return false; }, on);
  }

  // The same, with a cheap first offer: fast(uint64_t cookie) -> bool is called, in order, for
  // every send WQE that completed successfully (each unsignaled WQE a CQE covers, then the WQE a
  // successful REQ CQE names). When it returns true the WQE is consumed; otherwise on() gets
  // its full Completion exactly as above. Error CQEs and receives always go to on(). Either
  // way every WQE is reported exactly once and in order. For consumers (the window layer) whose
  // own WQEs need only the cookie: no Completion record is built for them.
  //
  // kRetireQuiet: the caller keeps no state per quiet WQE (those committed through an
  // SqWriter::Burst; fast() would take them and do nothing else). A successful CQE whose WQEs
  // since the consumer are all quiet then retires them in one step: the consumer moves past
  // the named WQE and the completion count grows by the WQE numbers between (SqShadow::seq),
  // with no walk and no fast() call. Anything else is walked as above.
  template <bool kRetireQuiet = false, class Fast, class F>
  uint32_t poll(uint32_t max_cqes, Fast&& fast, F&& on) noexcept {
    uint32_t n = 0;
    for (; n < max_cqes; ++n) {
      const mlx5_cqe64* c = cq_.peek();
      if (!c) break;
      const uint8_t op = prm::cqe_opcode(c);
      Completion comp;
      comp.cqe_opcode = op;
      comp.signaled = true;
      if (op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR) [[unlikely]] {
        comp.status = prm::cqe_syndrome(c);
        comp.vendor_syndrome = prm::cqe_vendor_syndrome(c);
        in_error_ = true;
        ++stats_.errors;
      }
      const uint16_t wc = prm::cqe_wqe_counter(c);
      // Every field is read before the CQE is consumed (pop), so a callback may publish it.
      if (op == MLX5_CQE_REQ || op == MLX5_CQE_REQ_ERR) {
        comp.byte_len = prm::cqe_byte_cnt(c);
        cq_.pop();
        if (op == MLX5_CQE_REQ) [[likely]]
          send_side_ok<kRetireQuiet>(wc, comp, fast, on);
        else
          send_side(wc, comp, on);
      } else {
        comp.recv = true;
        comp.byte_len = op == MLX5_CQE_RESP_ERR ? 0 : prm::cqe_byte_cnt(c);
        comp.imm = op == MLX5_CQE_RESP_ERR ? 0 : prm::cqe_imm_inval(c);
        cq_.pop();
        comp.cookie = rq_.take(wc);
        ++stats_.completions;
        cq_.publish();
        on(static_cast<const Completion&>(comp));
      }
    }
    if (n) {
      cq_.publish();
      stats_.cqes += n;
    }
    return n;
  }

 private:
  // A successful REQ CQE: every WQE from the SQ consumer up to the named one completed. The
  // unsignaled WQEs before it are walked without comparing each to the CQE: the named WQE's
  // distance from the consumer is known up front. The consumer index and the completion count
  // stay in registers (and the shadow table's base in a local, which the callbacks' stores
  // cannot alias) while fast() takes the WQEs; they are written back before on() runs (it may
  // post, and has_room() reads the consumer index).
  template <bool kRetireQuiet, class Fast, class F>
  void send_side_ok(uint16_t wc, const Completion& comp, Fast& fast, F& on) noexcept {
    const SqShadow* const sh = sq_.shadow();
    const uint32_t mask = sq_.wqe_cnt() - 1;
    const uint64_t start = sq_.ci();
    // WQEBBs from the consumer to the named WQE; it must start inside the in-flight range.
    const uint32_t in_flight = sq_.in_flight();
    const uint32_t dist = static_cast<uint16_t>(wc - static_cast<uint16_t>(start));
    if constexpr (kRetireQuiet) {
      // Nothing but quiet WQEs since the consumer: retire up to the named one in one step. The
      // named slot must hold a WQE of this lap (a slot inside a WQE keeps an older entry, whose
      // number is behind the first in-flight WQE's) that ends inside the in-flight range;
      // otherwise the walk below judges the CQE.
      const SqShadow& named = sh[(start + dist) & mask];
      const uint32_t wqes = named.seq - sh[start & mask].seq + 1;
      if (sq_.loud_end() <= start && dist < in_flight && named.n_wqebb != 0 &&
          dist + named.n_wqebb <= in_flight && wqes - 1 <= dist) [[likely]] {
        sq_.set_ci(start + dist + named.n_wqebb);
        stats_.completions += wqes;
        return;
      }
    }
    uint64_t ci = start;
    uint32_t left = dist;  // WQEBBs from ci to the named WQE (the walk's loop counter)
    uint64_t done = 0;
    auto one = [&](bool named) {
      const SqShadow& s = sh[ci & mask];
      const uint64_t cookie = s.cookie;
      ci += s.n_wqebb;
      left -= s.n_wqebb;
      ++done;
      if (fast(cookie)) [[likely]]
        return;
      sq_.set_ci(ci);
      stats_.completions += done;
      done = 0;
      Completion c = named ? comp : Completion{};
      c.cookie = cookie;
      c.wqe_opcode = s.opcode;
      if (!named) c.cqe_opcode = MLX5_CQE_REQ;
      cq_.publish();
      on(static_cast<const Completion&>(c));
    };
    if (dist < in_flight) [[likely]] {
      while (static_cast<int32_t>(left) > 0) one(false);
      if (left == 0) [[likely]] {
        one(true);
        sq_.set_ci(ci);
        stats_.completions += done;
        return;
      }
    }
    // The CQE named no WQE in flight (or a slot where no WQE starts): as send_side, report
    // everything in flight as completed and count a bad CQE.
    const uint64_t end = start + in_flight;
    while (ci < end) one(false);
    ++stats_.bad_cqes;
    sq_.set_ci(ci);
    stats_.completions += done;
  }

  template <class F>
  void send_side(uint16_t wc, Completion& comp, F& on) noexcept {
    // Walk from the SQ consumer to the WQE the CQE names; everything before it is an
    // unsignaled WQE that completed successfully (same-SQ completion order).
    const uint32_t limit = sq_.in_flight();
    uint32_t walked = 0;
    while (walked < limit) {
      const uint64_t at = sq_.ci();
      const SqShadow& s = sq_.shadow_at(at);
      const bool named = static_cast<uint16_t>(at) == wc;
      Completion c = named ? comp : Completion{};
      c.cookie = s.cookie;
      c.wqe_opcode = s.opcode;
      if (!named) {
        c.cqe_opcode = MLX5_CQE_REQ;
        c.signaled = false;
      }
      walked += s.n_wqebb;
      sq_.retire(s.n_wqebb);
      ++stats_.completions;
      cq_.publish();
      on(static_cast<const Completion&>(c));
      if (named) return;
    }
    ++stats_.bad_cqes;  // the CQE named no WQE in flight
  }

  SqWriter sq_;
  RqWriter rq_;
  CqPoller cq_;
  uint32_t qpn_ = 0;
  bool in_error_ = false;
  QpStats stats_;
};

}  // namespace rdmx::mlx5
