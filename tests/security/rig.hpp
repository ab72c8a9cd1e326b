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
#include <rdmx/mem/arena.hpp>
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

struct Side {
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<WindowPool> pool;
  std::vector<std::unique_ptr<PollCore>> cores;
  uint8_t* base() const { return reinterpret_cast<uint8_t*>(arena->base()); }
  size_t data_bytes() const { return arena->data_end() - arena->base(); }
};

struct RigConfig {
  emu::Mode mode = emu::Mode::kInline;
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
  uint32_t retry_cnt = 7;                                // emu transport model
  uint32_t transport_timeout_ms = 2000;
};

class Rig {
 public:
  explicit Rig(const RigConfig& c = RigConfig{}) : cfg(c) {
    emu::Options o;
    o.mode = c.mode;
    o.checker_fatal = c.checker_fatal;
    o.retry_cnt = c.retry_cnt;
    o.transport_timeout_ms = c.transport_timeout_ms;
    pair = take(emu::make_pair(o, o));
    make_side(*pair.a, a, c.a_windows, c.a_max_pages, c.a_arena_pages, c.a_parent_access);
    make_side(*pair.b, b, 4, 4, c.b_arena_pages, mlx5::kAccessAll);
    for (uint32_t i = 0; i < c.n_cores; ++i) connect(i);
  }
  ~Rig() {
    a.cores.clear();
    b.cores.clear();
  }

  void make_side(emu::EmuDevice& dev, Side& s, uint32_t n_windows, uint32_t max_pages,
                 uint32_t arena_pages, uint32_t parent_access) {
    mem::ArenaConfig ac;
    ac.bytes = size_t{arena_pages} * 4096;
    ac.access = parent_access;
    s.arena = take(mem::Arena::create(dev, ac));
    win::PoolConfig pc;
    pc.n_windows = n_windows;
    pc.max_pages = max_pages;
    s.pool = take(WindowPool::create(dev, *s.arena, pc));
    win::CoreConfig cc;
    cc.cache_size = cfg.cache_size;
    cc.qp.sq_wqebbs = cfg.sq_wqebbs;
    cc.qp.rq_wqes = cfg.rq_wqes;
    cc.qp.cq_cqes = cfg.cq_cqes;
    cc.signal_every = cfg.signal_every;
    for (uint32_t i = 0; i < cfg.n_cores; ++i)
      s.cores.push_back(take(PollCore::create(*s.pool, cc)));
  }
  void connect(uint32_t i) {
    const Status s = endpoint::connect_cores(*a.cores[i], *b.cores[i]);
    if (!s.ok()) throw std::runtime_error("connect: " + s.error().message);
  }

  PollCore& ca(uint32_t i = 0) { return *a.cores[i]; }
  PollCore& cb(uint32_t i = 0) { return *b.cores[i]; }
  bool threaded() const { return cfg.mode == emu::Mode::kThreaded; }

  // One step of progress: inline mode pumps both devices, threaded mode yields.
  void pump() {
    if (threaded()) {
      std::this_thread::yield();
    } else {
      pair.a->progress();
      pair.b->progress();
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

  // Peer B's core i after an error: both of its QP ends back to RTS by connect (the emu keeps
  // PSNs across it), then PollCore::recover(). Side A is not touched (its QP stayed in RTS: a
  // responder that NAKs a bad rkey does not leave RTS).
  void recover_peer(uint32_t i = 0) {
    const Status s = endpoint::recover_core(cb(i), pair.a->local_info(ca(i).qp_handle()));
    if (!s.ok()) throw std::runtime_error("peer recover: " + s.error().message);
  }

  // A full reconnect of core i on both sides, both recovered (after an error on A).
  void recover_both(uint32_t i = 0) {
    const Status s = endpoint::recover_cores(ca(i), cb(i));
    if (!s.ok()) throw std::runtime_error(s.error().message);
  }

  uint64_t checker_reports() const { return pair.a->checker().total() + pair.b->checker().total(); }
  std::string checker_dump() const { return pair.a->checker().dump() + pair.b->checker().dump(); }

  RigConfig cfg;
  emu::DevicePair pair;
  Side a, b;
};

}  // namespace rdmx::sectest
