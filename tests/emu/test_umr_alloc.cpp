// The emulated device executes a UMR without allocating: inline or pointer-mode translation
// entries land in room taken when the device and the window were made (drivers/mlx5/emu/umr.cpp).
// A reconnect takes the RC link's buffers of the previous connection (roce_link.cpp take_qp).
// Counted with a replaced global operator new, on this thread only (inline mode: the doorbell
// runs the device in the caller's thread).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "emu_util.hpp"

namespace {
thread_local uint64_t t_allocs = 0;
thread_local uint64_t t_bytes = 0;
}  // namespace

void* operator new(size_t n) {
  ++t_allocs;
  t_bytes += n;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace rdmx::emu::test {
namespace {

class UmrAlloc : public EmuTest {
 protected:
  // Maps `n` pages of `arena` into `win` through a pointer-mode KLM array (signaled) and runs
  // the device until it completes; returns the allocations of the post and its execution.
  uint64_t map_pointer(uint32_t win, Buf& arena, Buf& klm, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) pages_[i] = arena.addr(size_t{i} * 4096);
    prm::UmrMap m = page_map(a_, true, win, arena, std::span<const uint64_t>(pages_, n));
    prm::write_page_klms(reinterpret_cast<mlx5_wqe_umr_klm_seg*>(klm.p), m);
    // Inline mode: the doorbell runs the device (Engine::pump_inline) in this thread.
    const uint64_t before = t_allocs;
    post(a_, MLX5_OPCODE_UMR, 1, [&](prm::RingCursor& c, uint16_t idx) {
      m.wqe_index = idx;
      return prm::build_umr_map_pointer(c, m, klm.addr(), klm.mr.lkey);
    });
    const uint64_t allocs = t_allocs - before;
    uint8_t status = 0xff;
    uint32_t got = 0;
    for (int i = 0; i < 1000 && !got; ++i)
      got = a_.qp.poll(1, [&](const Completion& c) { status = c.status; });
    EXPECT_EQ(got, 1u);
    EXPECT_EQ(status, 0) << "UMR of " << n << " entries";
    return allocs;
  }
  uint64_t pages_[64] = {};
};

TEST_F(UmrAlloc, PointerModeMapsAllocateNothing) {
  open(Mode::kInline);
  Buf arena, klm;
  arena.alloc(*a_.dev, 64 * 4096, 3);
  klm.alloc(*a_.dev, 4096, 0);  // page aligned: 2 KiB aligned, room for 64 entries
  auto w = a_.dev->create_window_mkey(64, false);
  ASSERT_TRUE(w.ok()) << w.error().message;
  // The window's first translation takes its room (once per window).
  (void)map_pointer(w.value(), arena, klm, 4);
  // Then maps of any size up to its capacity: nothing allocated, not even for the largest.
  EXPECT_EQ(map_pointer(w.value(), arena, klm, 64), 0u);
  EXPECT_EQ(map_pointer(w.value(), arena, klm, 17), 0u);
  EXPECT_EQ(map_pointer(w.value(), arena, klm, 64), 0u);
}

// Both QPs through RESET and connected again, as recovery does (and as a server does for a peer
// whose every refused request costs it its connection): each side's link keeps the previous
// connection's rings and packet buffers (64 packets of the path MTU and headers, 266 KiB) for
// the next one instead of allocating and zeroing them at each connect.
TEST_F(UmrAlloc, AReconnectTakesTheLinksBuffersOfThePreviousConnection) {
  open(Mode::kInline);
  Buf src, dst;
  src.alloc(*a_.dev, 8192, 11);
  dst.alloc(*b_.dev, 8192, 12);
  reconnect();  // the first connection's buffers become the spare ones
  for (int round = 0; round < 3; ++round) {
    const uint64_t before = t_bytes;
    reconnect();
    const uint64_t bytes = t_bytes - before;
    EXPECT_LT(bytes, 16u * 1024) << "round " << round << ": a reconnect allocated " << bytes
                                 << " bytes";
    // The connection works on the buffers it took: an 8 KiB WRITE (two packets) lands.
    std::memset(src.p, 0x40 + round, 8192);
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(0), dst.mr.rkey,
         {{src.addr(), 8192, src.mr.lkey}});
    uint8_t status = 0xff;
    uint32_t got = 0;
    for (int i = 0; i < 1000 && !got; ++i)
      got = a_.qp.poll(1, [&](const Completion& c) { status = c.status; });
    ASSERT_EQ(got, 1u);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(std::memcmp(src.p, dst.p, 8192), 0) << "round " << round;
  }
}

}  // namespace
}  // namespace rdmx::emu::test
