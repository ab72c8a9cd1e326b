// rdmafwd fault handling (poll lcore): recovery of a lane after a QP error, and --fault-every,
// the emu fault injector that exercises it.
//
// Recovery (single-process mode): when any QP of a lane reports an error, the lane stops issuing
// and keeps polling (its engine completes what still completes) until no WQE is in flight on
// any of its cores; if that takes longer than 200 ms every QP of the lane is moved to error so
// that the rest flushes (bounded again). Every I/O issued and not completed is then counted once
// as failed by a fault (fault_ios); both ends of every connection go back to RTS
// (Device::connect), every PollCore recovers (all windows invalidated, back in the cache), the
// receives are posted again, the engine restarts (persistent windows mapped again) and the lane
// resumes. A recovery that fails leaves the lane dead (counted, exit status 1).
#include "faults.hpp"
#include "engines/common.hpp"

namespace rdmafwd {
namespace {

constexpr const char* kFaultNames[kFaultKinds] = {"error-cqe", "qp-error", "unreachable", "delay"};

uint64_t next_rand(Lane::FaultState& f) noexcept {
  uint64_t x = f.rng;  // xorshift64*
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  f.rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

// Next fault after a random number of I/Os in [N/2, 3N/2].
void schedule(Lane& l) noexcept {
  const uint64_t n = l.cfg.fault_every;
  if (!n) return;
  const uint64_t lo = n / 2 > 0 ? n / 2 : 1;
  l.fault.next_at = l.issued + lo + next_rand(l.fault) % (n + 1);
}

bool quiescent(const Lane& l) noexcept {
  for (win::PollCore* k : {l.c, l.p, l.r, l.s})
    if (k && (k->qp().sq().in_flight() != 0 || k->umrs_in_flight() != 0)) return false;
  return true;
}

mlx5::Device* device_of(const Testbed& tb, const Lane& l, const win::PollCore* k) noexcept {
  return (k == l.c || k == l.s) ? tb.dev_a : tb.dev_b;
}

// Turns the timed faults off (before a reconnect: the new connection must work).
void clear_timed(Lane& l, Testbed& tb) noexcept {
  if (l.fault.pending == kFaultUnreachable && tb.emu_a) tb.emu_a.set_peer_unreachable(false);
  if (l.fault.pending == kFaultDelay && tb.emu_a && l.c)
    (void)tb.emu_a.delay_completions(l.c->qp_handle(), 0);
}

}  // namespace

const char* fault_kind_name(uint32_t k) noexcept {
  return k < kFaultKinds ? kFaultNames[k] : "?";
}

uint32_t parse_fault_kinds(const std::string& list) noexcept {
  uint32_t mask = 0;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(pos, end - pos);
    bool found = false;
    if (name == "all") {
      mask |= (1u << kFaultKinds) - 1;
      found = true;
    }
    for (uint32_t k = 0; k < kFaultKinds && !found; ++k) {
      if (name == kFaultNames[k]) {
        mask |= 1u << k;
        found = true;
      }
    }
    if (!found) return 0;
    pos = end + 1;
  }
  return mask;
}

bool lane_in_error(const Lane& l) noexcept {
  for (win::PollCore* k : {l.c, l.p, l.r, l.s})
    if (k && k->qp().in_error()) return true;
  return false;
}

void fault_start(Lane& l) noexcept {
  if (l.fault.rng == 0) l.fault.rng = (l.cfg.fault_seed + 1) * 0x9E3779B97F4A7C15ull + l.index;
  l.fault.pending = -1;
  schedule(l);
}

void fault_inject(Lane& l, Testbed& tb, uint64_t now) noexcept {
  Lane::FaultState& f = l.fault;
  if (!l.cfg.fault_every || !tb.emu_a || !tb.emu_b || !l.c) return;
  if (f.pending >= 0) {
    if (now < f.until_tsc || l.failed) return;
    if (f.pending == kFaultUnreachable || f.pending == kFaultDelay) {
      // Timed faults end by themselves. One that caused no error was survived, but a WQE executed
      // while it was in effect may have failed with its error CQE not polled yet: it counts as
      // survived only once every I/O issued before the clear has completed (an error instead
      // recovers the lane, which counts the fault once).
      if (!f.settling) {
        clear_timed(l, tb);
        f.settling = true;
        f.settle_mark = l.issued;
        return;
      }
      if (l.completed < f.settle_mark || lane_in_error(l)) return;
      f.settling = false;
      f.pending = -1;
      l.st.faults_recovered.add(1);
      schedule(l);
    } else {
      // A QP error nobody polls for (the peer QP of an engine that does not use it) or an error
      // CQE armed on a WQE not posted yet: the lane recovers all the same.
      l.failed = true;
    }
    return;
  }
  if (l.failed || l.draining || l.issued < f.next_at) return;
  uint32_t kinds[kFaultKinds];
  uint32_t n = 0;
  for (uint32_t k = 0; k < kFaultKinds; ++k) {
    // Peer unreachable is device-wide: with several lanes it would hit lanes that did not ask.
    if (k == kFaultUnreachable && l.cfg.lanes > 1) continue;
    if (l.cfg.fault_kinds & (1u << k)) kinds[n++] = k;
  }
  if (n == 0) return;
  const uint32_t kind = kinds[next_rand(f) % n];
  const uint64_t hz = rte_get_tsc_hz();
  endpoint::EmuControl& fa = tb.emu_a;
  Status s;
  switch (kind) {
    case kFaultErrorCqe:
      f.until_tsc = now + hz / 5;
      s = fa.error_on_nth_wqe(l.c->qp_handle(), 1 + next_rand(f) % (2 * l.cfg.burst),
                              next_rand(f) & 1 ? MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
                                               : MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
      break;
    case kFaultQpError:
      f.until_tsc = now + hz / 5;
      if (l.p && (next_rand(f) & 1))
        s = tb.emu_b.qp_to_error(l.p->qp_handle());
      else
        s = fa.qp_to_error(l.c->qp_handle());
      break;
    case kFaultUnreachable:
      fa.set_peer_unreachable(true);
      f.until_tsc = now + hz / 20;
      break;
    default:
      s = fa.delay_completions(l.c->qp_handle(), 1 + static_cast<uint32_t>(next_rand(f) % 300));
      f.until_tsc = now + hz / 100;
      break;
  }
  if (!s) {
    l.st.rejected.add(1);  // the device refused the fault: counted as an error
    schedule(l);
    return;
  }
  f.pending = static_cast<int>(kind);
  l.st.faults_injected.add(1);
}

bool recover_lane(Lane& l, Testbed& tb) {
  const Engine* e = l.cfg.engine;
  const uint64_t hz = rte_get_tsc_hz();
  l.failed = true;  // issue nothing while draining
  clear_timed(l, tb);
  // 1. Poll until nothing is in flight: what completes is accounted by the engine.
  uint64_t deadline = rte_rdtsc() + hz / 5;
  while (!quiescent(l) && rte_rdtsc() < deadline) e->fwd(l);
  // 2. Still busy (a healthy end waits for an answer that will not come): every QP of the lane to
  //    error, so that the rest flushes.
  if (!quiescent(l)) {
    for (win::PollCore* k : {l.c, l.p, l.r, l.s}) {
      mlx5::Device* d = k ? device_of(tb, l, k) : nullptr;
      if (d) (void)d->modify_qp(k->qp_handle(), mlx5::QpState::kError);
    }
    deadline = rte_rdtsc() + 2 * hz;
    while (!quiescent(l) && rte_rdtsc() < deadline) {
      e->fwd(l);
      for (win::PollCore* k : {l.c, l.p, l.r, l.s})
        if (k) (void)k->poll(64, [](const mlx5::Completion&) {});
    }
  }
  // 3. Every I/O not completed failed: counted once.
  const uint64_t issued = l.issued;
  if (issued > l.completed) l.st.fault_ios.add(issued - l.completed);
  if (!quiescent(l)) {
    l.dead = true;
    l.st.failed.set(1);
    l.completed = issued;
    return false;
  }
  if (e->before_reconnect) e->before_reconnect(l);
  // 4. Both ends back to RTS, the cores recovered, receives posted, the engine restarted.
  if (Status s = reconnect_lane(tb, l); !s || !e->start(l)) {
    l.dead = true;
    l.st.failed.set(1);
    l.issued = l.completed = issued;
    return false;
  }
  l.issued = l.completed = issued;
  if (e->recovered) e->recovered(l);
  l.failed = false;
  l.st.faults_recovered.add(1);
  l.fault.settling = false;
  if (l.fault.pending >= 0) {
    l.fault.pending = -1;
    schedule(l);
  }
  return true;
}

bool fault_settle(Lane& l, Testbed& tb) {
  Lane::FaultState& f = l.fault;
  if (lane_in_error(l) && !l.dead) {
    (void)recover_lane(l, tb);
    return true;
  }
  if (f.pending < 0) return false;
  if (f.pending == kFaultUnreachable || f.pending == kFaultDelay) {
    clear_timed(l, tb);
    f.pending = -1;
    f.settling = false;
    l.st.faults_recovered.add(1);
    return false;
  }
  // An error CQE armed on a WQE that was never posted (or a QP error not seen yet): the QP goes
  // to error now and the lane recovers, so that the next run starts clean.
  if (tb.emu_a && l.c) (void)tb.emu_a.qp_to_error(l.c->qp_handle());
  (void)recover_lane(l, tb);
  return true;
}

}  // namespace rdmafwd
