// Shared rig for the security and reliability suites: two emulated devices joined by a wire.
// Side A owns the windows (the "storage appliance"); side B is the remote peer that reads and
// writes through the rkeys A hands out (or forges them). Both sides run the real PollCore code.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

namespace rdmx::sectest {

using mlx5::Completion;
using mlx5::kAccessLocalWrite;
using mlx5::kAccessRemoteRead;
using mlx5::kAccessRemoteWrite;
using mlx5::prm::Sge;
using win::MapResult;
using win::PollCore;
using win::Window;
using win::WindowPool;

inline constexpr uint32_t kRw = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
inline constexpr uint32_t kReadOnly = kAccessRemoteRead;
inline constexpr uint32_t kWriteOnly = kAccessLocalWrite | kAccessRemoteWrite;
inline constexpr uint8_t kRemAccess = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;  // 0x13
inline constexpr uint8_t kFlushErr = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;        // 0x05

// RDMX_TEST_SCALE (default 1.0; sanitizer builds set e.g. 0.1) scales iteration counts.
inline double test_scale() {
  const char* s = std::getenv("RDMX_TEST_SCALE");
  if (!s || !*s) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 0.1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return 0.1;
#endif
#endif
    return 1.0;
  }
  const double v = std::atof(s);
  return v > 0 ? v : 1.0;
}
inline uint64_t scaled(uint64_t n, uint64_t min = 1) {
  const auto v = static_cast<uint64_t>(static_cast<double>(n) * test_scale());
  return v < min ? min : v;
}

template <class T>
T take(Result<T>&& r) {
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

// 64-bit hash of a page (word-wise multiply/rotate; any change of any byte changes it with
// overwhelming probability, and a mismatch is always confirmed byte by byte against a copy).
inline uint64_t page_hash(const uint8_t* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h ^= w * 0xbf58476d1ce4e5b9ull;
    h = (h << 27 | h >> 37) * 0x94d049bb133111ebull;
  }
  return h;
}

// Expected contents of one host's memory: a byte copy plus per-page hashes.
struct Snapshot {
  const uint8_t* mem = nullptr;
  size_t len = 0;
  std::vector<uint8_t> copy;
  std::vector<uint64_t> hashes;
  void take_from(const uint8_t* m, size_t n) {
    mem = m;
    len = n;
    copy.assign(m, m + n);
    hashes.resize((n + 4095) / 4096);
    for (size_t i = 0; i < hashes.size(); ++i) hashes[i] = page_hash(m + i * 4096, page_len(i));
  }
  size_t page_len(size_t i) const { return std::min<size_t>(4096, len - i * 4096); }
  // Hashes every page; for a page whose hash changed, counts the differing bytes and restores
  // them (so one bad event is counted once). Returns the number of bytes that differed.
  uint64_t verify_and_restore() {
    uint64_t diff = 0;
    auto* m = const_cast<uint8_t*>(mem);
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (page_hash(m + i * 4096, page_len(i)) == hashes[i]) continue;
      for (size_t j = i * 4096; j < i * 4096 + page_len(i); ++j) diff += m[j] != copy[j];
      std::memcpy(m + i * 4096, copy.data() + i * 4096, page_len(i));
    }
    return diff;
  }
  // Byte-exact check of [off, off+n) only (the pages a single attempt aimed at).
  uint64_t verify_range_and_restore(size_t off, size_t n) {
    uint64_t diff = 0;
    auto* m = const_cast<uint8_t*>(mem);
    for (size_t j = off; j < off + n && j < len; ++j) {
      if (m[j] != copy[j]) {
        ++diff;
        m[j] = copy[j];
      }
    }
    return diff;
  }
};

// One side: device, arena, pool and cores (lib/endpoint's builder).
using Side = endpoint::Endpoint;
inline uint8_t* side_mem(const Side& s) {
  return reinterpret_cast<uint8_t*>(s.arena().base());
}
inline size_t side_data_bytes(const Side& s) {
  return s.arena().data_end() - s.arena().base();
}

struct RigConfig {
  emu::Mode mode = emu::Mode::kInline;
  // A device spec for both sides instead of `mode` (open_device_pair: an mlx5 device is opened
  // twice, loopback); the rig then runs as in threaded mode and has no emu checker.
  std::string device;
  uint32_t a_windows = 64;
  uint32_t a_max_pages = 16;
  uint32_t a_arena_pages = 512;
  uint32_t b_arena_pages = 96;
  uint32_t n_cores = 1;
  uint32_t cache_size = 16;
  uint32_t sq_wqebbs = 1024;
  uint32_t rq_wqes = 64;
  uint32_t cq_cqes = 2048;
  uint32_t signal_every = kDefaultSignalEvery;
  bool checker_fatal = false;
  uint32_t a_parent_access = mem::ArenaConfig{}.access;  // A's arena (parent MR): the default
  mlx5::RcTimers timers;  // emu transport model: the RC timers of every QP (rdma_cm's defaults)
  bool responder_keeps_rts = false;  // emu::Options::responder_keeps_rts (key statistics only)
};

class Rig {
 public:
  explicit Rig(const RigConfig& c = RigConfig{}) : cfg(c) {
    endpoint::DeviceOptions o;
    o.emu.checker_fatal = c.checker_fatal;
    o.emu.timers = c.timers;
    o.emu.responder_keeps_rts = c.responder_keeps_rts;
    const std::string spec = !c.device.empty()                ? c.device
                             : c.mode == emu::Mode::kThreaded ? "emu-threaded"
                                                              : "emu-inline";
    auto devs = take(endpoint::open_device_pair(spec, o, o));
    a = take(Side::create(std::move(devs[0]), side_config(c.a_windows, c.a_max_pages,
                                                          c.a_arena_pages, c.a_parent_access)));
    b = take(
        Side::create(std::move(devs[1]), side_config(4, 4, c.b_arena_pages, mlx5::kAccessAll)));
    const Status s = endpoint::connect_endpoints(a, b);
    if (!s.ok()) throw std::runtime_error("connect: " + s.error().message);
  }
  ~Rig() {
    a.destroy_cores();
    b.destroy_cores();
  }

  endpoint::EndpointConfig side_config(uint32_t n_windows, uint32_t max_pages, uint32_t arena_pages,
                                       uint32_t parent_access) const {
    endpoint::EndpointConfig ec;
    ec.arena.bytes = size_t{arena_pages} * 4096;
    ec.arena.access = parent_access;
    ec.pool.n_windows = n_windows;
    ec.pool.max_pages = max_pages;
    ec.core.cache_size = cfg.cache_size;
    ec.core.qp.sq_wqebbs = cfg.sq_wqebbs;
    ec.core.qp.rq_wqes = cfg.rq_wqes;
    ec.core.qp.cq_cqes = cfg.cq_cqes;
    ec.core.signal_every = cfg.signal_every;
    ec.n_cores = cfg.n_cores;
    return ec;
  }

  PollCore& ca(uint32_t i = 0) { return a.core(i); }
  PollCore& cb(uint32_t i = 0) { return b.core(i); }
  bool threaded() const { return cfg.mode == emu::Mode::kThreaded || !cfg.device.empty(); }

  // One step of progress: inline mode pumps both devices, threaded mode yields.
  void pump() {
    if (threaded()) {
      std::this_thread::yield();
    } else {
      a.emu()->progress();
      b.emu()->progress();
    }
  }

  // Flushes `c` and waits until its UMRs completed (a mapping is then usable by the peer:
  // the emu's checker insists on it). Application completions seen meanwhile go to `app`.
  bool settle(PollCore& c, std::vector<Completion>* app = nullptr) {
    c.flush();
    const auto t0 = std::chrono::steady_clock::now();
    while (c.umrs_in_flight()) {
      c.poll(64, [&](const Completion& x) {
        if (app) app->push_back(x);
      });
      pump();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) return false;
    }
    return true;
  }

  // Polls `c` until `done()` or a timeout; completions go to `on`.
  template <class F, class D>
  bool poll_until(PollCore& c, F&& on, D&& done, int timeout_s = 20) {
    c.flush();
    const auto t0 = std::chrono::steady_clock::now();
    while (!done()) {
      if (!c.poll(64, on)) pump();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(timeout_s)) return false;
    }
    return true;
  }

  // After peer B's request was refused with a remote access error. That is a class C error
  // that moved A's responder QP to error too (as on a ConnectX and rxe; A's device raised
  // IBV_EVENT_QP_ACCESS_ERR): core i then reconnects on both sides and both recover. Under
  // RigConfig::responder_keeps_rts A stayed in RTS and only B's core recovers (its QP ends
  // back to RTS by connect, the emu keeps PSNs across it), A's windows untouched.
  void recover_peer(uint32_t i = 0) {
    auto st = a.device().query_qp(ca(i).qp_handle());
    const Status s = st.ok() && st.value() == mlx5::QpState::kError
                         ? endpoint::recover_cores(ca(i), cb(i))
                         : endpoint::recover_core(cb(i), a.device().local_info(ca(i).qp_handle()));
    if (!s.ok()) throw std::runtime_error("peer recover: " + s.error().message);
  }

  // A full reconnect of core i on both sides, both recovered (after an error on A).
  void recover_both(uint32_t i = 0) {
    const Status s = endpoint::recover_cores(ca(i), cb(i));
    if (!s.ok()) throw std::runtime_error(s.error().message);
  }

  uint64_t checker_reports() const {
    if (!a.emu() || !b.emu()) return 0;  // a real device has no checker
    return a.emu()->checker().total() + b.emu()->checker().total();
  }
  std::string checker_dump() const {
    if (!a.emu() || !b.emu()) return "";
    return a.emu()->checker().dump() + b.emu()->checker().dump();
  }

  RigConfig cfg;
  Side a, b;  // declared after cfg; ~Rig destroys both sides' cores before either device
};

}  // namespace rdmx::sectest
