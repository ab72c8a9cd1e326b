// lib/mem: arena, chunk-page translation, page allocator (suite 'unit', no device).
#include <gtest/gtest.h>

#include <rdmx/mem/arena.hpp>
#include <rdmx/mem/page_allocator.hpp>

#include "plain_device.hpp"

namespace {

using rdmx::Errc;
using rdmx::mem::Arena;
using rdmx::mem::ArenaConfig;
using rdmx::mem::PageAllocator;
using rdmx::mem::Source;

std::unique_ptr<Arena> make(rdmx::test::PlainDevice& dev, size_t bytes, uint32_t page) {
  ArenaConfig c;
  c.bytes = bytes;
  c.page_size = page;
  auto a = Arena::create(dev, c);
  EXPECT_TRUE(a.ok()) << (a.ok() ? "" : a.error().message);
  return std::move(a).value();
}

TEST(Arena, PageSizesAndRegistration) {
  rdmx::test::PlainDevice dev;
  for (uint32_t ps : {rdmx::kPage4K, rdmx::kPage64K, rdmx::kPage2M}) {
    auto a = make(dev, size_t{ps} * 5 + 1, ps);  // rounds up to 6 pages
    EXPECT_EQ(dev.n_mrs, 1);
    EXPECT_EQ(a->size(), size_t{ps} * 6);
    EXPECT_EQ(a->n_pages(), 6u);
    EXPECT_EQ(a->page_size(), ps);
    EXPECT_EQ(1u << a->page_shift(), ps);
    EXPECT_EQ(a->base() % ps, 0u);
    EXPECT_EQ(a->mr().addr, a->base());
    EXPECT_EQ(a->mr().length, a->size());
    a.reset();
    EXPECT_EQ(dev.n_mrs, 0);
  }
}

TEST(Arena, RejectsBadConfig) {
  rdmx::test::PlainDevice dev;
  ArenaConfig c;
  c.bytes = 1 << 20;
  c.page_size = 8192;
  EXPECT_EQ(Arena::create(dev, c).error().code, Errc::kInvalidArgument);
  c.page_size = 4096;
  c.bytes = 0;
  EXPECT_EQ(Arena::create(dev, c).error().code, Errc::kInvalidArgument);
  c.bytes = 1 << 20;
  c.source = Source::kUser;
  EXPECT_EQ(Arena::create(dev, c).error().code, Errc::kInvalidArgument);  // no buffer
  alignas(4096) static uint8_t buf[3 * 4096];
  c.user_buf = buf + 16;
  c.bytes = 4096;
  EXPECT_EQ(Arena::create(dev, c).error().code, Errc::kInvalidArgument);  // misaligned
  c.user_buf = buf;
  auto a = Arena::create(dev, c);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value()->base(), reinterpret_cast<uint64_t>(buf));
}

// An arena larger than memory: the message gives the size and the page size (it once said only
// "aligned_alloc failed"). Sanitizer allocators abort on such a size instead of returning null.
TEST(Arena, HeapTooLargeSaysTheSize) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer allocators abort on an impossible size";
#else
  rdmx::test::PlainDevice dev;
  ArenaConfig c;
  c.bytes = size_t{1} << 50;
  c.page_size = rdmx::kPage2M;
  auto a = Arena::create(dev, c);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::kNoMemory);
  EXPECT_NE(a.error().message.find("1125899906842624 bytes"), std::string::npos)
      << a.error().message;
  EXPECT_NE(a.error().message.find("2097152-byte pages"), std::string::npos) << a.error().message;
  EXPECT_EQ(dev.n_mrs, 0);
#endif
}

TEST(Arena, DpdkSourceWithoutEalFailsCleanly) {
  rdmx::test::PlainDevice dev;
  ArenaConfig c;
  c.bytes = 1 << 20;
  c.source = Source::kDpdk;
  auto a = Arena::create(dev, c);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::kNoMemory);
  EXPECT_NE(a.error().message.find("EAL"), std::string::npos) << a.error().message;
  EXPECT_EQ(dev.n_mrs, 0);
}

TEST(Arena, MembershipAndAlignment) {
  rdmx::test::PlainDevice dev;
  auto a = make(dev, 16 * 4096, 4096);
  const uint64_t b = a->base();
  EXPECT_TRUE(a->is_page(b));
  EXPECT_TRUE(a->is_page(b + 15 * 4096));
  EXPECT_FALSE(a->is_page(b + 16 * 4096));
  EXPECT_FALSE(a->is_page(b + 4096 + 8));
  EXPECT_FALSE(a->is_page(b - 4096));
  EXPECT_TRUE(a->contains(b, 16 * 4096));
  EXPECT_FALSE(a->contains(b, 16 * 4096 + 1));
  EXPECT_FALSE(a->contains(b - 1, 2));
  EXPECT_EQ(a->page_index(b + 3 * 4096 + 5), 3u);
  EXPECT_EQ(a->page_addr(3), b + 3 * 4096);
}

TEST(Arena, ToPages) {
  rdmx::test::PlainDevice dev;
  auto a = make(dev, 16 * 4096, 4096);
  const uint64_t b = a->base();
  uint64_t out[16];
  auto r = a->to_pages(b + 100, 4096, out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.n_pages, 2u);
  EXPECT_EQ(r.first_offset, 100u);
  EXPECT_EQ(out[0], b);
  EXPECT_EQ(out[1], b + 4096);
  r = a->to_pages(b + 4096, 4096, out);
  EXPECT_EQ(r.n_pages, 1u);
  EXPECT_EQ(r.first_offset, 0u);
  r = a->to_pages(b + 4095, 2, out);
  EXPECT_EQ(r.n_pages, 2u);
  r = a->to_pages(b, 16 * 4096, out);
  EXPECT_EQ(r.n_pages, 16u);
  EXPECT_EQ(a->to_pages(b, 0, out).errc, Errc::kInvalidArgument);
  EXPECT_EQ(a->to_pages(b, 16 * 4096 + 1, out).errc, Errc::kNotInArena);
  EXPECT_EQ(a->to_pages(b - 1, 10, out).errc, Errc::kNotInArena);
  EXPECT_EQ(a->to_pages(b, 3 * 4096, std::span<uint64_t>(out, 2)).errc, Errc::kTooManyPages);
}

TEST(Arena, ReserveTailIsNotMappable) {
  rdmx::test::PlainDevice dev;
  auto a = make(dev, 16 * 4096, 4096);
  auto r = a->reserve_tail(5000, 2048);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), a->base() + 14 * 4096);
  EXPECT_EQ(a->n_pages(), 14u);
  EXPECT_FALSE(a->is_page(a->base() + 14 * 4096));
  EXPECT_TRUE(a->contains(r.value(), 5000));  // still registered
  uint64_t out[16];
  EXPECT_EQ(a->to_pages(a->base() + 14 * 4096, 1, out).errc, Errc::kNotInArena);
  EXPECT_EQ(a->reserve_tail(64 * 4096, 2048).error().code, Errc::kNoMemory);
  EXPECT_EQ(a->reserve_tail(10, 3).error().code, Errc::kInvalidArgument);
  PageAllocator pa(*a);
  EXPECT_EQ(pa.n_total(), 14u);
  EXPECT_EQ(a->reserve_tail(10, 64).error().code, Errc::kState);
}

TEST(PageAllocator, AllocFreeAndMisuse) {
  rdmx::test::PlainDevice dev;
  auto a = make(dev, 8 * 65536, 65536);
  PageAllocator pa(*a);
  EXPECT_EQ(pa.n_free(), 8u);
  uint64_t p[8];
  ASSERT_EQ(pa.alloc_bulk(std::span<uint64_t>(p, 5)), Errc::kOk);
  EXPECT_EQ(p[0], a->base());  // address order when fresh
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(pa.is_allocated(p[i]));
  EXPECT_EQ(pa.alloc_bulk(std::span<uint64_t>(p + 5, 4)), Errc::kNoMemory);  // all or nothing
  EXPECT_EQ(pa.n_free(), 3u);
  EXPECT_EQ(pa.free(p[1]), Errc::kOk);
  EXPECT_EQ(pa.free(p[1]), Errc::kInvalidArgument);  // double free
  EXPECT_EQ(pa.free(p[2] + 1), Errc::kNotInArena);   // not a page
  EXPECT_EQ(pa.alloc(), p[1]);                       // LIFO
  EXPECT_EQ(pa.free_bulk(std::span<const uint64_t>(p, 5)), Errc::kOk);
  EXPECT_EQ(pa.n_free(), 8u);
}

}  // namespace
