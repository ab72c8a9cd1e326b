// The window data path on whatever device RDMX_RIG_DEVICE names (suite 'security'): map, remote
// WRITE and READ through the window, unmap, a stale key refused, SEND_WITH_INV, and the peer's
// QP back in RTS after its error. Without the variable it runs on the threaded emu (so every
// run here proves the test); scripts/hw-check.sh runs it on an mlx5 device (loopback: the device
// opened twice), which is the hardware qualification's data-path step.
//
// Every check compares the whole of side A's memory with what it must hold: the bytes a WRITE
// was allowed to reach, nothing else.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "rig.hpp"

namespace rdmx::sectest {
namespace {

std::string device_under_test() {
  const char* d = std::getenv("RDMX_RIG_DEVICE");
  return d && *d ? d : "emu-threaded";
}

RigConfig config() {
  RigConfig c;
  c.device = device_under_test();
  c.a_arena_pages = 16;
  c.b_arena_pages = 16;
  c.a_windows = 8;
  return c;
}

class DeviceDatapath : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 g(42);
    uint8_t* pa = side_mem(r.a);
    for (size_t i = 0; i < side_data_bytes(r.a); ++i) pa[i] = static_cast<uint8_t>(g());
    uint8_t* pb = side_mem(r.b);
    for (size_t i = 0; i < side_data_bytes(r.b); ++i) pb[i] = static_cast<uint8_t>(g());
    expect.assign(pa, pa + side_data_bytes(r.a));
  }

  // Posts one signaled WQE on B (via `post`) and returns its completion status (0 = ok).
  template <class Post>
  uint8_t on_b(uint64_t cookie, Post&& post) {
    EXPECT_EQ(post(), Errc::kOk);
    bool done = false;
    uint8_t st = 0xff;
    const bool ok = r.poll_until(
        r.cb(),
        [&](const Completion& x) {
          if (x.cookie != cookie && x.status == 0) return;
          done = true;
          st = x.status;
        },
        [&] { return done; });
    EXPECT_TRUE(ok) << "no completion for cookie " << cookie;
    return st;
  }

  // B writes `len` bytes of its page 0 at `raddr` through `rkey`.
  uint8_t write(uint64_t raddr, uint32_t rkey, uint32_t len, uint64_t cookie) {
    const Sge s{r.b.arena().page_addr(0), len, r.b.arena().lkey()};
    return on_b(cookie, [&] { return r.cb().post_write({&s, 1}, raddr, rkey, cookie, true); });
  }

  // The bytes of A that differ from `expect`.
  size_t a_differs() const {
    const uint8_t* pa = side_mem(r.a);
    size_t n = 0;
    for (size_t i = 0; i < expect.size(); ++i) n += pa[i] != expect[i];
    return n;
  }

  // A window over A's pages {5, 2, 9} from byte 100, 150 bytes short of their end.
  MapResult map_three() {
    const std::vector<uint64_t> pages = {r.a.arena().page_addr(5), r.a.arena().page_addr(2),
                                         r.a.arena().page_addr(9)};
    MapResult m = r.ca().map(pages, kRw, 100, 3 * 4096 - 100 - 150);
    EXPECT_TRUE(m.ok());
    EXPECT_TRUE(r.settle(r.ca()));
    return m;
  }

  // What a WRITE of B's page 0 through map_three()'s window does to A.
  void expect_written(uint32_t len) {
    const uint8_t* src = side_mem(r.b) + (r.b.arena().page_addr(0) - r.b.arena().base());
    const uint32_t page_index[3] = {5, 2, 9};
    for (uint32_t i = 0; i < len; ++i) {
      const uint32_t lin = 100 + i;
      const uint64_t addr = r.a.arena().page_addr(page_index[lin / 4096]) + lin % 4096;
      expect[addr - r.a.arena().base()] = src[i];
    }
  }

  Rig r{config()};
  std::vector<uint8_t> expect;
};

TEST_F(DeviceDatapath, WriteAndReadReachExactlyTheMappedBytes) {
  const MapResult m = map_three();
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m.length, 3u * 4096 - 250);
  const auto len = static_cast<uint32_t>(m.length);
  ASSERT_EQ(write(m.iova, m.rkey, len, 1), 0);
  expect_written(len);
  EXPECT_EQ(a_differs(), 0u) << "the WRITE reached other bytes than the window's";

  // READ it back into B's pages 4.. and compare with what B wrote.
  const Sge land{r.b.arena().page_addr(4), len, r.b.arena().lkey()};
  ASSERT_EQ(on_b(2, [&] { return r.cb().post_read({&land, 1}, m.iova, m.rkey, 2, true); }), 0);
  const uint8_t* pb = side_mem(r.b);
  const uint64_t base = r.b.arena().base();
  EXPECT_EQ(std::memcmp(pb + (land.addr - base), pb + (r.b.arena().page_addr(0) - base), len), 0);

  ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
  ASSERT_TRUE(r.settle(r.ca()));
}

TEST_F(DeviceDatapath, StaleKeyIsRefusedAndThePeerRecovers) {
  const MapResult m = map_three();
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
  ASSERT_TRUE(r.settle(r.ca()));
  // The unmapped window's rkey: refused (REMOTE_ACCESS_ERR on the requester), nothing written.
  EXPECT_EQ(write(m.iova, m.rkey, 4096, 3), kRemAccess);
  EXPECT_EQ(a_differs(), 0u);
  r.recover_peer();
  // B's QP is usable again, and a new map of the same window has a new key.
  const MapResult m2 = map_three();
  ASSERT_TRUE(m2.ok());
  EXPECT_NE(m2.rkey, m.rkey);
  ASSERT_EQ(write(m2.iova, m2.rkey, 4096, 4), 0);
  expect_written(4096);
  EXPECT_EQ(a_differs(), 0u);
  ASSERT_EQ(r.ca().unmap(m2.window), Errc::kOk);
  ASSERT_TRUE(r.settle(r.ca()));
}

TEST_F(DeviceDatapath, SendWithInvalidateFreesTheWindow) {
  const Sge rbuf{r.a.arena().page_addr(15), 64, r.a.arena().lkey()};
  ASSERT_EQ(r.ca().post_recv({&rbuf, 1}, 9), Errc::kOk);
  const MapResult m = map_three();
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(on_b(5, [&] { return r.cb().post_send_inv({}, m.rkey, 5, true); }), 0);
  bool got = false;
  uint32_t inv = 0;
  ASSERT_TRUE(r.poll_until(
      r.ca(),
      [&](const Completion& x) {
        if (!x.recv) return;
        got = x.ok() && x.cqe_opcode == MLX5_CQE_RESP_SEND_INV;
        inv = x.imm;
      },
      [&] { return got; }));
  EXPECT_EQ(inv, m.rkey);
  EXPECT_EQ(r.ca().unmap(m.window), Errc::kNotMapped);  // the peer already freed it
  // Its rkey is dead on the device: refused, nothing written.
  EXPECT_EQ(write(m.iova, m.rkey, 64, 6), kRemAccess);
  EXPECT_EQ(a_differs(), 0u);
  r.recover_peer();
  EXPECT_EQ(r.checker_reports(), 0u) << r.checker_dump();
}

}  // namespace
}  // namespace rdmx::sectest
