#include <rdmx/rt/launcher.hpp>

#include <chrono>
#include <string>
#include <thread>

#include <rdmx/core/log.hpp>

namespace rdmx::rt {

const char* phase_name(Phase p) noexcept {
  switch (p) {
    case Phase::kNotStarted:
      return "not-started";
    case Phase::kSetup:
      return "setup";
    case Phase::kRun:
      return "run";
    case Phase::kDrain:
      return "drain";
    case Phase::kTeardown:
      return "teardown";
    case Phase::kDone:
      return "done";
  }
  return "?";
}

Status CoreContext::enter_run_phase() {
  if (strict_.enabled) {
    Status s = enter_strict_mode(strict_.action);
    if (!s.ok()) {
      RDMX_LOG_ERR("lcore %u: %s", lcore_id_, s.error().message.c_str());
      return s;
    }
  }
  set_phase(Phase::kRun);
  return {};
}

void CoreContext::leave_run_phase(Phase next) noexcept {
  if (strict_.enabled) leave_strict_mode();
  set_phase(next);
}

Result<std::unique_ptr<Launcher>> Launcher::create(LauncherConfig cfg) {
  if (cfg.lcores.empty()) return make_error(Errc::kInvalidArgument, "launcher: no lcore given");
  if (!cfg.sockets.empty() && cfg.sockets.size() != cfg.lcores.size()) {
    return make_error(Errc::kInvalidArgument, "launcher: one socket per lcore, or none");
  }
  const unsigned main = rte_get_main_lcore();
  for (size_t i = 0; i < cfg.lcores.size(); ++i) {
    unsigned id = cfg.lcores[i];
    if (id >= RTE_MAX_LCORE || !rte_lcore_is_enabled(id)) {
      return make_error(Errc::kInvalidArgument,
                        "launcher: lcore " + std::to_string(id) + " is not enabled in the EAL");
    }
    if (id == main) {
      return make_error(Errc::kInvalidArgument, "launcher: lcore " + std::to_string(id) +
                                                    " is the main lcore; poll cores are workers");
    }
    for (size_t j = 0; j < i; ++j) {
      if (cfg.lcores[j] == id) {
        return make_error(Errc::kInvalidArgument,
                          "launcher: lcore " + std::to_string(id) + " given twice");
      }
    }
  }
  if (cfg.log_ring_entries < 2 || (cfg.log_ring_entries & (cfg.log_ring_entries - 1)) != 0) {
    return make_error(Errc::kInvalidArgument, "launcher: log_ring_entries must be a power of two");
  }
  std::unique_ptr<Launcher> l(new Launcher());
  const size_t n = cfg.lcores.size();
  l->stats_ = std::make_unique<CoreStats[]>(n);
  for (size_t i = 0; i < n; ++i) {
    auto c = std::make_unique<CoreContext>();
    c->index_ = static_cast<unsigned>(i);
    c->lcore_id_ = cfg.lcores[i];
    c->socket_ = cfg.sockets.empty() ? static_cast<int>(rte_lcore_to_socket_id(cfg.lcores[i]))
                                     : cfg.sockets[i];
    c->strict_ = cfg.strict;
    c->stop_ = &l->stop_;
    c->stats_ = &l->stats_[i];
    l->logs_.push_back(std::make_unique<HotLogRing>(cfg.log_ring_entries, cfg.lcores[i]));
    c->log_ = l->logs_.back().get();
    c->launcher_ = l.get();
    l->ctx_.push_back(std::move(c));
  }
  return l;
}

Launcher::~Launcher() {
  if (running_) {
    request_stop();
    (void)wait();
  }
}

int Launcher::lcore_entry(void* arg) {
  auto* c = static_cast<CoreContext*>(arg);
  c->set_phase(Phase::kSetup);
  int rc = c->launcher_->fn_(*c);
  // A function that returned from inside its run phase (early return) leaves it here, so the
  // EAL's own wait loop on this thread is not reported as a violation.
  if (in_strict_run_phase()) leave_strict_mode();
  c->set_phase(Phase::kDone);
  return rc;
}

Status Launcher::start(std::function<int(CoreContext&)> fn) {
  if (running_) return make_error(Errc::kState, "launcher: already running");
  fn_ = std::move(fn);
  stop_.store(false, std::memory_order_relaxed);
  violations_at_start_ = strict_violations();
  for (size_t i = 0; i < ctx_.size(); ++i) {
    ctx_[i]->set_phase(Phase::kNotStarted);
    int rc = rte_eal_remote_launch(&Launcher::lcore_entry, ctx_[i].get(), ctx_[i]->lcore_id());
    if (rc != 0) {
      Status err = make_error(Errc::kBusy, "launcher: rte_eal_remote_launch on lcore " +
                                               std::to_string(ctx_[i]->lcore_id()) + " failed (" +
                                               std::to_string(rc) + ")");
      running_ = i > 0;
      if (running_) {
        request_stop();
        (void)wait();
      }
      return err;
    }
  }
  running_ = true;
  return {};
}

std::vector<int> Launcher::wait() {
  if (!running_) return rets_;
  // The cores bound their own drain (the function given to start()); a core that overruns it
  // is named every kWaitReport, with its phase, rather than waited for in silence.
  constexpr std::chrono::seconds kWaitReport{10};
  const auto t0 = std::chrono::steady_clock::now();
  auto next_report = t0 + kWaitReport;
  for (;;) {
    bool any = false;
    for (const auto& c : ctx_) {
      if (rte_eal_get_lcore_state(c->lcore_id()) != WAIT) any = true;
    }
    if (!any) break;
    if (std::chrono::steady_clock::now() >= next_report) {
      next_report += kWaitReport;
      for (const auto& c : ctx_)
        if (rte_eal_get_lcore_state(c->lcore_id()) != WAIT)
          RDMX_LOG_WARN("launcher: lcore %u has not returned after %lld s (phase %s)",
                        c->lcore_id(),
                        static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(
                                                   std::chrono::steady_clock::now() - t0)
                                                   .count()),
                        phase_name(c->stats_->phase.load(std::memory_order_acquire)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  rte_eal_mp_wait_lcore();
  // The lcore's last store (phase = done, release) pairs with this acquire: everything the core
  // did happens-before what the caller does next (e.g. destroying what the core used). DPDK's
  // own lcore-state atomics give the same guarantee, but this one is visible to TSan too.
  for (const auto& c : ctx_) {
    while (c->stats_->phase.load(std::memory_order_acquire) != Phase::kDone) rte_pause();
  }
  rets_.clear();
  for (const auto& c : ctx_) rets_.push_back(rte_eal_wait_lcore(c->lcore_id()));
  running_ = false;
  return rets_;
}

Status Launcher::stop_and_wait() {
  request_stop();
  std::vector<int> rets = wait();
  for (size_t i = 0; i < rets.size(); ++i) {
    if (rets[i] != 0) {
      return make_error(Errc::kState, "lcore " + std::to_string(ctx_[i]->lcore_id()) +
                                          " returned " + std::to_string(rets[i]));
    }
  }
  if (strict_violations() != violations_at_start_) {
    StrictViolation v = first_strict_violation();
    return make_error(Errc::kState,
                      "strict mode: " + std::to_string(strict_violations() - violations_at_start_) +
                          " system call(s) in the run phase; first: " + std::to_string(v.nr) +
                          " (" + v.name + ") on lcore " + std::to_string(v.lcore));
  }
  return {};
}

CoreStatsSnapshot Launcher::stats(size_t i) const noexcept {
  const CoreStats& s = stats_[i];
  CoreStatsSnapshot o;
  o.busy_iters = s.busy_iters.load(std::memory_order_relaxed);
  o.idle_iters = s.idle_iters.load(std::memory_order_relaxed);
  o.busy_tsc = s.busy_tsc.load(std::memory_order_relaxed);
  o.idle_tsc = s.idle_tsc.load(std::memory_order_relaxed);
  o.phase = s.phase.load(std::memory_order_acquire);
  return o;
}

CoreStatsSnapshot Launcher::total() const noexcept {
  CoreStatsSnapshot t;
  for (size_t i = 0; i < ctx_.size(); ++i) {
    CoreStatsSnapshot s = stats(i);
    t.busy_iters += s.busy_iters;
    t.idle_iters += s.idle_iters;
    t.busy_tsc += s.busy_tsc;
    t.idle_tsc += s.idle_tsc;
  }
  return t;
}

std::vector<HotLogRing*> Launcher::log_rings() const {
  std::vector<HotLogRing*> out;
  for (const auto& l : logs_) out.push_back(l.get());
  return out;
}

}  // namespace rdmx::rt
