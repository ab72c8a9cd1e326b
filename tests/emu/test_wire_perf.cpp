// A fixed amount of work through the in-process wire, for counting instructions per I/O under
// callgrind (the figure of merit of the wire's data path: wall time on a shared machine is too
// noisy): RDMX_WIRE_PERF_IOS WRITEs (default 64) of 16 pages each, 8 outstanding, inline mode
// (one thread, so the count does not depend on scheduling), every byte checked at the end.
//
//   valgrind --tool=callgrind build/tests/emu/test_emu_wire_perf  (with two I/O counts: the
//   difference of the totals over the difference of the counts is the cost per I/O)
#include <cstdlib>

#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

TEST_F(EmuTest, WirePerfWritesOf16PagesInline) {
  const char* env = std::getenv("RDMX_WIRE_PERF_IOS");
  const uint32_t ios = env ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 64;
  constexpr uint32_t kBytes = 16 * 4096, kDepth = 8, kSlots = 4;
  open(Mode::kInline);
  Buf src, dst;
  src.alloc(*a_.dev, size_t{kBytes} * kSlots, 1);
  dst.alloc(*b_.dev, size_t{kBytes} * kSlots, 2);
  uint32_t posted = 0, done = 0;
  while (done < ios) {
    while (posted < ios && posted - done < kDepth) {
      const size_t off = size_t{posted % kSlots} * kBytes;
      rdma(a_, MLX5_OPCODE_RDMA_WRITE, posted, dst.addr(off), dst.mr.rkey,
           {{src.addr(off), kBytes, src.mr.lkey}});
      ++posted;
    }
    auto c = wait(a_, 1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_TRUE(c[0].ok()) << int(c[0].status);
    ++done;
  }
  EXPECT_EQ(0, std::memcmp(src.p, dst.p, std::min<size_t>(ios, kSlots) * kBytes));
}

}  // namespace
}  // namespace rdmx::emu::test
