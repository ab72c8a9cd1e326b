// The two-sided rig of the window tests over emu (inline mode): side A owns the windows, side B
// is the peer that reads and writes through them. Shared by the window and memory-window tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mem/page_allocator.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

namespace rdmx_test {

using rdmx::Errc;
using rdmx::mlx5::Completion;
using rdmx::mlx5::kAccessLocalWrite;
using rdmx::mlx5::kAccessRemoteRead;
using rdmx::mlx5::kAccessRemoteWrite;
using rdmx::mlx5::prm::Sge;
using namespace rdmx::win;

constexpr uint32_t kRw = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
constexpr uint8_t kRemAccess = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;  // 0x13

template <class T>
T take(rdmx::Result<T>&& r) {
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

using Side = rdmx::endpoint::Endpoint;

struct EmuRig {
  // memory_windows > 0: each core of A gets that many type-2 memory windows (the arena is then
  // registered with kAccessMwBind).
  EmuRig(uint32_t n_windows = 16, uint32_t max_pages = 16, uint32_t arena_pages = 512,
         uint32_t n_cores = 1, uint32_t cache_size = 8, uint32_t memory_windows = 0) {
    auto devs = take(rdmx::endpoint::open_device_pair("emu-inline"));
    auto ca = side_config(n_windows, max_pages, arena_pages, n_cores, cache_size);
    if (memory_windows) {
      ca.arena.access = kAccessLocalWrite | rdmx::mlx5::kAccessMwBind;
      ca.core.memory_windows = memory_windows;
    }
    a = take(Side::create(std::move(devs[0]), ca));
    b = take(Side::create(std::move(devs[1]), side_config(4, 4, 512, n_cores, 4)));
    for (uint32_t i = 0; i < n_cores; ++i) connect(i);
    page_alloc = std::make_unique<rdmx::mem::PageAllocator>(a.arena());
    std::mt19937_64 rng(7);
    fill(a, rng);
    shadow.assign(arena_a(), arena_a() + a.arena().size());
  }
  ~EmuRig() {
    a.destroy_cores();
    b.destroy_cores();
  }
  static rdmx::endpoint::EndpointConfig side_config(uint32_t n_windows, uint32_t max_pages,
                                                    uint32_t arena_pages, uint32_t n_cores,
                                                    uint32_t cache_size) {
    rdmx::endpoint::EndpointConfig ec;
    ec.arena.bytes = size_t{arena_pages} * 4096;
    ec.pool.n_windows = n_windows;
    ec.pool.max_pages = max_pages;
    ec.core.cache_size = cache_size;
    ec.core.qp.sq_wqebbs = 1024;
    ec.core.qp.rq_wqes = 64;
    ec.core.qp.cq_cqes = 4096;
    ec.n_cores = n_cores;
    return ec;
  }
  static void fill(Side& s, std::mt19937_64& rng) {
    auto* p = reinterpret_cast<uint8_t*>(s.arena().base());
    for (size_t i = 0; i < s.arena().size(); ++i) p[i] = static_cast<uint8_t>(rng());
  }
  void connect(uint32_t i) {
    ASSERT_TRUE(rdmx::mlx5::connect_qps(a.device(), a.core(i).qp_handle(), b.device(),
                                        b.core(i).qp_handle())
                    .ok());
  }
  // After a peer error: both QPs back to RTS, both cores recovered.
  void recover(uint32_t i = 0) {
    drain(b.core(i));
    drain(a.core(i));
    connect(i);
    auto s1 = a.core(i).recover();
    ASSERT_TRUE(s1.ok()) << s1.error().message;
    auto s2 = b.core(i).recover();
    ASSERT_TRUE(s2.ok()) << s2.error().message;
  }
  uint8_t* arena_a() { return reinterpret_cast<uint8_t*>(a.arena().base()); }
  uint8_t* arena_b() { return reinterpret_cast<uint8_t*>(b.arena().base()); }
  PollCore& ca(uint32_t i = 0) { return a.core(i); }
  PollCore& cb(uint32_t i = 0) { return b.core(i); }

  std::vector<Completion> drain(PollCore& c) {
    std::vector<Completion> out;
    c.flush();
    for (int spin = 0; spin < 1000; ++spin) {
      if (!c.poll(64, [&](const Completion& x) { out.push_back(x); })) break;
    }
    return out;
  }
  // Flushes the core and waits until its UMRs completed: a mapping is then "ordered" for the
  // peer (the emu's PRM checker insists: a peer may use an rkey only after that).
  void settle(PollCore& c) {
    c.flush();
    for (int spin = 0; spin < 100000 && c.umrs_in_flight(); ++spin)
      c.poll(64, [&](const Completion& x) { app_a.push_back(x); });
    ASSERT_EQ(c.umrs_in_flight(), 0u);
  }
  // Peer operation: one WQE from B, completion status returned.
  uint8_t peer_op(bool write, uint64_t b_off, uint64_t raddr, uint32_t len, uint32_t rkey,
                  uint32_t core = 0) {
    PollCore& c = cb(core);
    const Sge s{b.arena().base() + b_off, len, b.arena().lkey()};
    const Errc e = write ? c.post_write({&s, 1}, raddr, rkey, 1, true)
                         : c.post_read({&s, 1}, raddr, rkey, 1, true);
    EXPECT_EQ(e, Errc::kOk);
    c.flush();
    for (int spin = 0; spin < 100000; ++spin) {
      uint8_t status = 0xff;
      c.poll(16, [&](const Completion& x) {
        if (x.cookie == 1) status = x.status;
      });
      if (status != 0xff) return status;
      a.emu()->progress();
      b.emu()->progress();
    }
    ADD_FAILURE() << "peer op did not complete";
    return 0xff;
  }
  // Window byte i -> arena A offset, for a map of `pages` starting at `off`.
  static uint64_t phys(const std::vector<uint64_t>& pages, uint32_t off, uint64_t i,
                       uint64_t base) {
    const uint64_t x = off + i;
    return pages[x / 4096] + (x % 4096) - base;
  }
  void expect_arena_matches_shadow(const char* what) {
    const uint8_t* p = arena_a();
    const size_t data = a.arena().data_end() - a.arena().base();
    for (size_t i = 0; i < data; ++i) {
      if (p[i] != shadow[i]) {
        ADD_FAILURE() << what << ": arena byte " << i << " changed/unexpected (page " << i / 4096
                      << ")";
        return;
      }
    }
  }
  std::vector<uint64_t> random_pages(std::mt19937_64& rng, uint32_t n) {
    std::vector<uint64_t> all(page_alloc->n_total());
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = a.arena().page_addr(i);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(n);
    return all;
  }
  // A peer WRITE of a random sub-range of mapping m (all of it when `whole`), then a READ of
  // another; phys(i) is the arena A offset of window byte i. Every arena byte is compared.
  template <class Phys>
  void write_read_check(std::mt19937_64& rng, const MapResult& m, Phys&& phys, int iter,
                        bool whole = false) {
    const uint64_t len = m.length;
    const uint64_t wo = whole ? 0 : rng() % len;
    const uint32_t wl =
        static_cast<uint32_t>(whole ? len : 1 + rng() % std::min<uint64_t>(len - wo, 40000));
    uint8_t* src = arena_b();
    for (uint32_t i = 0; i < wl; ++i) src[i] = static_cast<uint8_t>(rng());
    ASSERT_EQ(peer_op(true, 0, m.iova + wo, wl, m.rkey), 0) << "iter " << iter;
    for (uint32_t i = 0; i < wl; ++i) shadow[phys(wo + i)] = src[i];
    expect_arena_matches_shadow("after WRITE");
    const uint64_t ro = rng() % len;
    const uint32_t rl = static_cast<uint32_t>(1 + rng() % std::min<uint64_t>(len - ro, 40000));
    ASSERT_EQ(peer_op(false, 65536, m.iova + ro, rl, m.rkey), 0);
    for (uint32_t i = 0; i < rl; ++i)
      ASSERT_EQ(arena_b()[65536 + i], shadow[phys(ro + i)]) << "iter " << iter << " byte " << i;
    expect_arena_matches_shadow("after READ");
  }
  void expect_no_checker_reports() {
    EXPECT_EQ(a.emu()->checker().total(), 0u) << a.emu()->checker().dump();
    EXPECT_EQ(b.emu()->checker().total(), 0u) << b.emu()->checker().dump();
  }

  Side a, b;
  std::unique_ptr<rdmx::mem::PageAllocator> page_alloc;
  std::vector<uint8_t> shadow;
  std::vector<Completion> app_a;
};

}  // namespace rdmx_test
