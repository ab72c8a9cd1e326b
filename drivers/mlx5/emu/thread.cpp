// Device threads: the loop that polls one or several emulated devices (a device's own thread
// and DeviceThread share it), CPU pinning, idle backoff, and binding devices to threads.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>

#include "engine.hpp"

namespace rdmx::emu {

namespace detail {

namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

std::string online_cpus() {
  std::ifstream f("/sys/devices/system/cpu/online");
  std::string s;
  if (!(f >> s)) return "unknown";
  return s;
}

}  // namespace

std::mutex& bind_mu() noexcept {
  static std::mutex mu;
  return mu;
}

Runner::Runner(std::vector<Engine*> engs, const ThreadOptions& opt)
    : opt_(opt), engs_(std::move(engs)) {}

Runner::~Runner() {
  stop();
}

Status Runner::run() {
  if (run_.load(std::memory_order_acquire)) return Status{};
  if (opt_.cpu >= CPU_SETSIZE)
    return make_error(Errc::kInvalidArgument,
                      "emu: cannot pin device thread '" + opt_.name + "' to CPU " +
                          std::to_string(opt_.cpu) +
                          ": beyond CPU_SETSIZE (online CPUs: " + online_cpus() + ")");
  // The thread pins (and names) itself before its first poll and reports the pinning result.
  std::promise<int> pinned;
  std::future<int> pin_result = pinned.get_future();
  run_.store(true, std::memory_order_release);
  thr_ = std::thread([this, p = std::move(pinned)]() mutable {
    int err = 0;
    if (opt_.cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<size_t>(opt_.cpu), &set);
      err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    (void)pthread_setname_np(pthread_self(), opt_.name.substr(0, 15).c_str());
    p.set_value(err);
    if (err == 0) loop();
  });
  const int pin_err = pin_result.get();
  if (pin_err != 0) {
    thr_.join();
    run_.store(false, std::memory_order_release);
    return make_error(Errc::kInvalidArgument, "emu: cannot pin device thread '" + opt_.name +
                                                  "' to CPU " + std::to_string(opt_.cpu) + ": " +
                                                  std::strerror(pin_err) +
                                                  " (online CPUs: " + online_cpus() + ")");
  }
  return Status{};
}

void Runner::stop() {
  if (!run_.exchange(false, std::memory_order_acq_rel)) return;
  if (thr_.joinable()) thr_.join();
}

void Runner::remove(Engine* e) {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  {
    std::lock_guard<std::mutex> g(list_mu_);
    engs_.erase(std::remove(engs_.begin(), engs_.end(), e), engs_.end());
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
}

size_t Runner::size() {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  size_t n = 0;
  {
    std::lock_guard<std::mutex> g(list_mu_);
    n = engs_.size();
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  return n;
}

std::vector<Engine*> Runner::engines() {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  std::vector<Engine*> v;
  {
    std::lock_guard<std::mutex> g(list_mu_);
    v = engs_;
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  return v;
}

DeviceThreadStats Runner::stats() const noexcept {
  DeviceThreadStats s;
  s.rounds = rounds_.load(std::memory_order_relaxed);
  s.busy_rounds = busy_.load(std::memory_order_relaxed);
  s.pending_rounds = pending_.load(std::memory_order_relaxed);
  s.sleeps = sleeps_.load(std::memory_order_relaxed);
  return s;
}

void Runner::loop() {
  uint32_t idle = 0;
  size_t first = 0;
  const auto relax = [this] {
    if (opt_.idle_yield)
      std::this_thread::yield();
    else
      cpu_relax();
  };
  while (run_.load(std::memory_order_acquire)) {
    bool work = false;
    bool pending = false;
    {
      // Uncontended (no system call) unless the control path is taking a device off.
      std::lock_guard<std::mutex> g(list_mu_);
      const size_t n = engs_.size();
      if (first >= n) first = 0;
      for (size_t i = 0, k = first; i < n; ++i) {
        work |= engs_[k]->poll(&pending);
        if (++k == n) k = 0;
      }
      ++first;
    }
    bump(rounds_);
    if (waiters_.load(std::memory_order_acquire) != 0) {
      // Let the control path have the list (rare: a device leaves or stats are read).
      while (waiters_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    }
    if (work) {
      bump(busy_);
      idle = 0;
      continue;
    }
    if (pending) {  // never sleep with work pending
      bump(pending_);
      idle = 0;
      relax();
      continue;
    }
    if (opt_.idle_sleep_us == 0 || ++idle < opt_.idle_spin) {
      relax();
      continue;
    }
    bump(sleeps_);
    std::this_thread::sleep_for(std::chrono::microseconds(opt_.idle_sleep_us));
  }
}

}  // namespace detail

// ---- DeviceThread -----------------------------------------------------------------------------
DeviceThread::DeviceThread(std::unique_ptr<detail::Runner> r) : r_(std::move(r)) {}

DeviceThread::~DeviceThread() {
  std::lock_guard<std::mutex> g(detail::bind_mu());
  r_->stop();
  for (detail::Engine* e : r_->engines())
    if (e->runner_ == r_.get()) e->runner_ = nullptr;
}

Result<std::unique_ptr<DeviceThread>> DeviceThread::start(std::span<EmuDevice* const> devs,
                                                          const ThreadOptions& opt) {
  if (devs.empty()) return make_error(Errc::kInvalidArgument, "emu: DeviceThread needs a device");
  std::vector<detail::Engine*> engs;
  for (EmuDevice* d : devs) {
    if (!d) return make_error(Errc::kInvalidArgument, "emu: DeviceThread: null device");
    detail::Engine* e = d->eng_.get();
    if (std::find(engs.begin(), engs.end(), e) != engs.end())
      return make_error(Errc::kInvalidArgument,
                        "emu: DeviceThread: device " + e->name() + " given twice");
    if (e->opt().mode != Mode::kThreaded)
      return make_error(Errc::kInvalidArgument, "emu: DeviceThread runs threaded-mode devices; " +
                                                    e->name() + " is in " +
                                                    mode_name(e->opt().mode) + " mode");
    engs.push_back(e);
  }
  std::lock_guard<std::mutex> g(detail::bind_mu());
  for (detail::Engine* e : engs) {
    if (!e->runner_) continue;
    if (e->runner_ == e->own_.get())
      return make_error(Errc::kBusy, "emu: " + e->name() +
                                         " runs its own device thread (open it with "
                                         "Options::start_thread = false, or stop() it first)");
    return make_error(Errc::kBusy, "emu: " + e->name() + " is already served by a DeviceThread");
  }
  auto r = std::make_unique<detail::Runner>(engs, opt);
  if (Status s = r->run(); !s.ok()) return s.error();
  for (detail::Engine* e : engs) e->runner_ = r.get();
  return std::unique_ptr<DeviceThread>(new DeviceThread(std::move(r)));
}

void DeviceThread::stop() {
  r_->stop();
}

Status DeviceThread::restart() {
  return r_->run();
}

bool DeviceThread::running() const noexcept {
  return r_->running();
}

size_t DeviceThread::size() const {
  return r_->size();
}

const ThreadOptions& DeviceThread::options() const noexcept {
  return r_->opt();
}

DeviceThreadStats DeviceThread::stats() const noexcept {
  return r_->stats();
}

std::thread::native_handle_type DeviceThread::native_handle() {
  return r_->native_handle();
}

}  // namespace rdmx::emu
