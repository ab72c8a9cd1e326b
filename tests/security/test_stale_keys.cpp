// The stale-key campaign (suite 'security'): >= 100,000 remote READ/WRITE attempts from the peer
// (side B) at side A's memory with keys and addresses it was not given, over emu in inline mode.
//
// Categories (each attempt is one RDMA READ or WRITE WQE posted by B's PollCore):
//   unmapped      the rkey of a mapping whose unmap completed
//   remapped      an older rkey of a window that was mapped again (key rotated; 1..254 maps back)
//   invalidated   the rkey of a mapping the peer freed with SEND_WITH_INV
//   never-mapped  a window index that is free on the device (tag 0 and others)
//   wrong-key     the index of a live mapping with any other 8-bit key
//   wrong-index   a live mapping's key byte on an index that is no window / no mkey / 0 / 1 / huge
//   bounds        a live mapping's own rkey with ranges outside [0, length): at length, length+1,
//                 straddling the end by 1 byte and by a whole packet, length+1 from 0, huge
//                 offsets, and ranges whose end wraps the 64-bit IOVA
//   access        WRITE to a read-only mapping, READ from a write-only mapping
// Every attempt must complete with REMOTE_ACCESS_ERR (0x13): that is the syndrome an RC requester
// reports for the responder's "remote access error" NAK (IBA 9.7.5.2.4; rdma-core maps mlx5 0x13
// to IBV_WC_REM_ACCESS_ERR), which real hardware returns for an R_Key that does not resolve, a
// freed mkey, missing rights and a range outside the mkey alike.
// Zero-length attempts are counted apart: IBA (C9-88/C9-92) lets a responder skip the R_Key check
// for a zero-length RDMA, so hardware may complete them successfully; emu refuses them when the
// key or address is bad. Either way no byte may move, and that is what is checked.
//
// Not one byte may change or be disclosed: every page of both hosts' memory is hashed against a
// snapshot (every 64 attempts and at the end; a hash mismatch is confirmed and counted byte by
// byte), the aimed-at pages are compared after every attempt, and B's READ landing buffer is
// filled with a canary that must survive every refused READ.
//
// Each refused attempt moves B's QP to error (the requester side of an RC NAK); the campaign
// recovers it with connect (reset -> init -> rtr -> rts with the PSNs kept) + PollCore::recover.
// Side A's responder stays in RTS, so its windows stay mapped throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <vector>

#include "rig.hpp"

namespace rdmx::sectest {
namespace {

enum Cat : int {
  kUnmapped,
  kRemapped,
  kInvalidated,
  kNeverMapped,
  kWrongKey,
  kWrongIndex,
  kBounds,
  kAccess,
  kZeroLength,
  kNumCats
};
constexpr const char* kCatName[kNumCats] = {"unmapped",     "remapped",  "invalidated",
                                            "never-mapped", "wrong-key", "wrong-index",
                                            "bounds",       "access",    "zero-length"};

struct Live {
  Window* w = nullptr;
  uint32_t rkey = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  std::vector<uint64_t> pages;
  uint32_t first = 0;
};

struct Counts {
  std::array<uint64_t, kNumCats> tried{}, refused{}, accepted{}, other{};
  uint64_t changed = 0;    // bytes of A (or of B outside the landing buffer) that changed
  uint64_t disclosed = 0;  // landing-buffer bytes of B that lost their canary
  uint64_t total_tried() const {
    uint64_t t = 0;
    for (auto v : tried) t += v;
    return t;
  }
  uint64_t total_refused() const {
    uint64_t t = 0;
    for (auto v : refused) t += v;
    return t;
  }
};

constexpr uint64_t kSrcOff = 0;            // B: WRITE source (random pattern), 128 KiB
constexpr uint64_t kLandOff = 128 * 1024;  // B: READ landing buffer (canary), 160 KiB
constexpr uint64_t kLandLen = 160 * 1024;
constexpr uint8_t kCanary = 0xA5;

class Campaign {
 public:
  explicit Campaign(uint64_t seed) : rng_(seed), r_(rig_cfg()) {
    std::mt19937_64 fill(seed ^ 0x5eed);
    uint8_t* pa = side_mem(r_.a);
    for (size_t i = 0; i < r_.a.arena().size(); ++i) pa[i] = static_cast<uint8_t>(fill());
    uint8_t* pb = side_mem(r_.b);
    for (size_t i = 0; i < r_.b.arena().size(); ++i) pb[i] = static_cast<uint8_t>(fill());
    std::memset(pb + kLandOff, kCanary, kLandLen);
    snap_a_.take_from(pa, r_.a.arena().size());
    snap_b_.take_from(pb, r_.b.arena().size());
    parent_rkey_ = r_.a.arena().mr().rkey;
    for (uint32_t i = 0; i < r_.a.arena().n_pages(); ++i)
      all_pages_.push_back(r_.a.arena().page_addr(i));
    // Most windows mapped, with a mix of access rights; a few stay free (never mapped).
    for (int i = 0; i < 40; ++i) map_one(pick_access());
    settle_a();
  }

  static RigConfig rig_cfg() {
    RigConfig c;
    c.responder_keeps_rts = true;  // 100,000 refusals on one connection: statistics, not RC
    c.a_windows = 64;
    c.a_max_pages = 16;
    c.a_arena_pages = 512;
    c.b_arena_pages = 96;
    c.cache_size = 16;
    return c;
  }

  uint32_t pick_access() {
    switch (rng_() % 4) {
      case 0:
        return kReadOnly;
      case 1:
        return kWriteOnly;
      default:
        return kRw;
    }
  }

  bool map_one(uint32_t access) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng_() % 16);
    std::vector<uint64_t> pages(n);
    for (auto& p : pages) p = all_pages_[rng_() % all_pages_.size()];
    const uint32_t off = static_cast<uint32_t>(rng_() % 4096);
    const uint64_t lo = n == 1 ? 1 : uint64_t{n - 1} * 4096 - off + 1;
    const uint64_t hi = uint64_t{n} * 4096 - off;
    const uint64_t len = lo + rng_() % (hi - lo + 1);
    MapResult m = r_.ca().map(pages, access, off, len);
    if (!m.ok()) {
      EXPECT_EQ(m.errc, Errc::kNoWindow) << errc_name(m.errc);
      return false;
    }
    EXPECT_NE(m.rkey >> 8, parent_rkey_ >> 8) << "a window shares the parent MR's index";
    live_.push_back(Live{m.window, m.rkey, m.length, access, std::move(pages), off});
    ++maps_;
    return true;
  }

  void settle_a() { ASSERT_TRUE(r_.settle(r_.ca())); }

  bool is_live_key(uint32_t k) const {
    // The parent MR counts as live only if it was registered with remote rights (by default it
    // is local-only, so its key is one more forged key the campaign may hit).
    if (k == parent_rkey_ && (r_.a.arena().mr().access & (kAccessRemoteRead | kAccessRemoteWrite)))
      return true;
    for (const Live& l : live_)
      if (l.rkey == k) return true;
    return false;
  }

  // One attempt by the peer. Returns the completion status.
  uint8_t attempt(Cat cat, bool write, uint64_t raddr, uint32_t len, uint32_t rkey,
                  const Live* target) {
    if (len != 0 && is_live_key(rkey) && cat != kBounds && cat != kAccess) {
      ADD_FAILURE() << "campaign bug: " << kCatName[cat] << " uses a live key";
      return 0xff;
    }
    PollCore& c = r_.cb();
    const Sge s{r_.b.arena().base() + (write ? kSrcOff : kLandOff), len, r_.b.arena().lkey()};
    const uint64_t cookie = ++cookie_;
    const Errc e = write ? c.post_write({&s, 1}, raddr, rkey, cookie, true)
                         : c.post_read({&s, 1}, raddr, rkey, cookie, true);
    EXPECT_EQ(e, Errc::kOk) << errc_name(e);
    uint8_t status = 0xff;
    int seen = 0;
    const bool ok = r_.poll_until(
        c,
        [&](const Completion& x) {
          if (x.cookie == cookie) {
            status = x.status;
            ++seen;
          }
        },
        [&] { return seen > 0; });
    EXPECT_TRUE(ok) << "attempt did not complete";
    EXPECT_EQ(seen, 1);
    const size_t cat_i = static_cast<size_t>(cat);
    ++n_.tried[cat_i];
    if (status == kRemAccess)
      ++n_.refused[cat_i];
    else if (status == 0 && len == 0)
      ++n_.accepted[cat_i];
    else
      ++n_.other[cat_i];
    if (len != 0 && status != kRemAccess && n_failures_++ < 20) {
      ADD_FAILURE() << kCatName[cat] << (write ? " WRITE" : " READ") << " raddr 0x" << std::hex
                    << raddr << " len 0x" << len << " rkey 0x" << rkey << std::dec
                    << " completed with status 0x" << std::hex << int{status};
    }
    if (status != 0) r_.recover_peer();
    // Disclosure: the landing buffer keeps its canary.
    if (!write) {
      uint8_t* land = side_mem(r_.b) + kLandOff;
      for (uint32_t i = 0; i < len && i < kLandLen; ++i) {
        if (land[i] != kCanary) {
          ++n_.disclosed;
          land[i] = kCanary;
        }
      }
    }
    // The pages the attempt aimed at (when it named a mapping), byte for byte.
    if (target) {
      for (uint64_t p : target->pages) {
        const uint64_t d = snap_a_.verify_range_and_restore(p - r_.a.arena().base(), 4096);
        if (d && n_failures_++ < 20)
          ADD_FAILURE() << d << " bytes of A changed by " << kCatName[cat]
                        << (write ? " WRITE" : " READ") << " raddr 0x" << std::hex << raddr
                        << " len 0x" << len << " length 0x" << target->length << " status 0x"
                        << int{status};
        n_.changed += d;
      }
    }
    if (++since_full_ >= 64) full_check();
    return status;
  }

  void full_check() {
    since_full_ = 0;
    const uint64_t da = snap_a_.verify_and_restore();
    // B: the landing buffer was restored above; any other difference is a change too.
    const uint64_t db = snap_b_.verify_and_restore();
    if ((da || db) && n_failures_++ < 20)
      ADD_FAILURE() << "full check: " << da << " bytes of A and " << db << " bytes of B changed";
    n_.changed += da + db;
    ++full_checks_;
  }

  // A few attempts at a dead key: read and write, at offsets inside what the mapping had.
  void hammer_dead(Cat cat, uint32_t key, uint64_t length, int n) {
    for (int i = 0; i < n; ++i) {
      const bool write = rng_() & 1;
      const uint64_t off = rng_() % length;
      const uint32_t len =
          static_cast<uint32_t>(1 + rng_() % std::min<uint64_t>(length - off, 65536));
      attempt(cat, write, off, len, key, nullptr);
    }
  }

  size_t pick_live(uint32_t need_access = 0) {
    for (int tries = 0; tries < 64; ++tries) {
      const size_t k = rng_() % live_.size();
      if ((live_[k].access & need_access) == need_access) return k;
    }
    return SIZE_MAX;
  }

  void ep_unmapped() {
    const size_t k = pick_live();
    const Live l = live_[k];
    live_.erase(live_.begin() + static_cast<long>(k));
    ASSERT_EQ(r_.ca().unmap(l.w), Errc::kOk);
    settle_a();  // the key is dead once the invalidate completed
    hammer_dead(kUnmapped, l.rkey, l.length, 4);
    map_one(pick_access());
    settle_a();
  }

  void ep_remapped() {
    const size_t k = pick_live();
    Live l = live_[k];
    live_.erase(live_.begin() + static_cast<long>(k));
    ASSERT_EQ(r_.ca().unmap(l.w), Errc::kOk);
    // The per-core cache is LIFO: the next map takes the window just unmapped (a new key).
    ASSERT_TRUE(map_one(pick_access()));
    settle_a();
    const Live& now = live_.back();
    if (now.w == l.w) {
      EXPECT_NE(static_cast<uint8_t>(now.rkey), static_cast<uint8_t>(l.rkey));
    }
    hammer_dead(kRemapped, l.rkey, l.length, 2);
    // Older keys of the same window (up to 254 maps back; key 255 back == current - 255 - 1
    // would be the current key's predecessor chain wrapping: 8-bit keys repeat after 256 maps).
    const uint32_t idx = now.rkey & ~0xffu;
    for (int i = 0; i < 2; ++i) {
      const uint8_t back = static_cast<uint8_t>(1 + rng_() % 254);
      const uint32_t key = idx | static_cast<uint8_t>(now.rkey - back);
      hammer_dead(kRemapped, key, now.length, 1);
    }
  }

  void ep_invalidated() {
    const size_t k = pick_live();
    const Live l = live_[k];
    live_.erase(live_.begin() + static_cast<long>(k));
    // A posts a receive; B sends a zero-byte SEND_WITH_INV naming the rkey.
    const Sge rbuf{r_.a.arena().page_addr(0), 64, r_.a.arena().lkey()};
    ASSERT_EQ(r_.ca().post_recv({&rbuf, 1}, 0x1000 + invalidations_), Errc::kOk);
    settle_a();
    const uint64_t cookie = ++cookie_;
    ASSERT_EQ(r_.cb().post_send_inv({}, l.rkey, cookie, true), Errc::kOk);
    bool sent = false, got = false;
    ASSERT_TRUE(r_.poll_until(
        r_.cb(), [&](const Completion& x) { sent |= x.cookie == cookie && x.ok(); },
        [&] { return sent; }));
    ASSERT_TRUE(r_.poll_until(
        r_.ca(),
        [&](const Completion& x) {
          got |= x.recv && x.ok() && x.cqe_opcode == MLX5_CQE_RESP_SEND_INV && x.imm == l.rkey;
        },
        [&] { return got; }));
    ASSERT_NE(l.w->state(), win::WindowState::kMapped);
    ASSERT_EQ(r_.ca().unmap(l.w), Errc::kNotMapped);
    ++invalidations_;
    hammer_dead(kInvalidated, l.rkey, l.length, 4);
    map_one(pick_access());
    settle_a();
  }

  void ep_never_mapped() {
    // Windows that are free on the device right now: in A's cache or depot.
    std::vector<const Window*> free_ws;
    for (uint32_t i = 0; i < r_.a.pool().n_windows(); ++i) {
      const Window& w = r_.a.pool().window(i);
      if (w.state() != win::WindowState::kMapped) free_ws.push_back(&w);
    }
    if (free_ws.empty()) return;
    const Window* w = free_ws[rng_() % free_ws.size()];
    const uint32_t idx = w->mkey_index() << 8;
    for (int i = 0; i < 4; ++i) {
      const uint32_t key = idx | static_cast<uint8_t>(i == 0 ? 0 : rng_());
      attempt(kNeverMapped, rng_() & 1, rng_() % 65536, 1 + rng_() % 4096, key, nullptr);
    }
  }

  void ep_wrong_key() {
    const size_t k = pick_live();
    const Live& l = live_[k];
    for (int i = 0; i < 4; ++i) {
      const uint8_t delta = static_cast<uint8_t>(1 + rng_() % 255);
      const uint32_t key = (l.rkey & ~0xffu) | static_cast<uint8_t>(l.rkey + delta);
      const uint64_t off = rng_() % l.length;
      attempt(kWrongKey, rng_() & 1, off,
              static_cast<uint32_t>(1 + rng_() % std::min<uint64_t>(l.length - off, 65536)), key,
              &l);
    }
  }

  void ep_wrong_index() {
    const size_t k = pick_live();
    const Live& l = live_[k];
    const uint8_t kb = static_cast<uint8_t>(l.rkey);
    uint32_t idx;
    switch (rng_() % 6) {
      case 0:
        idx = 0;  // reserved (MLX5_INVALID_LKEY's neighbourhood)
        break;
      case 1:
        idx = 1;
        break;
      case 2:
        idx = 0xffffff;  // beyond every table
        break;
      case 3:
        idx = static_cast<uint32_t>(rng_() & 0xffffff);
        break;
      case 4:  // the neighbours of the window's index
        idx = (l.rkey >> 8) + ((rng_() & 1) ? 1 : -1);
        break;
      default:  // another window's index with this key byte
        idx = r_.a.pool()
                  .window(static_cast<uint32_t>(rng_() % r_.a.pool().n_windows()))
                  .mkey_index();
        break;
    }
    const uint32_t key = (idx << 8) | kb;
    if (is_live_key(key)) return;  // that would be a real key, not a forged one
    const uint64_t off = rng_() % l.length;
    attempt(kWrongIndex, rng_() & 1, off,
            static_cast<uint32_t>(1 + rng_() % std::min<uint64_t>(l.length - off, 65536)), key, &l);
  }

  void ep_bounds() {
    const size_t k = pick_live();
    const Live& l = live_[k];
    const bool can_w = l.access & kAccessRemoteWrite, can_r = l.access & kAccessRemoteRead;
    const uint64_t L = l.length;
    struct R {
      uint64_t raddr;
      uint64_t len;
    };
    const R cases[] = {
        {L, 1},                            // at length
        {L + 1, 1},                        // length + 1
        {L - 1, 2},                        // straddles the end by one byte
        {L >= 4096 ? L - 4096 : 0, 8192},  // straddles by a whole packet (multi-packet WRITE)
        {0, L + 1},                        // one byte too long from 0
        {L, 4096},
        {uint64_t{1} << 32, 16},
        {uint64_t{1} << 63, 16},
        {~uint64_t{0}, 1},       // the last IOVA
        {~uint64_t{0} - 7, 16},  // end wraps 2^64
        // wraps back into [0, L) (for L = 1, 2^64 - L + 1 is 0 itself: start one byte lower)
        {L >= 2 ? ~uint64_t{0} - L + 2 : ~uint64_t{0}, L >= 2 ? L : 2},
        {static_cast<uint64_t>(-4096), 8192},
        {L + (rng_() % (uint64_t{1} << 40)), 1 + rng_() % 4096},
    };
    const R& c = cases[rng_() % std::size(cases)];
    if (c.len > 65536 + 8192) return;
    bool write = rng_() & 1;
    if (write && !can_w) write = false;
    if (!write && !can_r) write = true;
    attempt(kBounds, write, c.raddr, static_cast<uint32_t>(c.len), l.rkey, &l);
  }

  void ep_access() {
    const bool write = rng_() & 1;  // WRITE at a read-only mapping, or READ at a write-only one
    const size_t k = write ? pick_live(kAccessRemoteRead) : pick_live(kAccessRemoteWrite);
    if (k == SIZE_MAX) return;
    const Live& l = live_[k];
    if (write && (l.access & kAccessRemoteWrite)) return;
    if (!write && (l.access & kAccessRemoteRead)) return;
    const uint64_t off = rng_() % l.length;
    attempt(kAccess, write, off,
            static_cast<uint32_t>(1 + rng_() % std::min<uint64_t>(l.length - off, 65536)), l.rkey,
            &l);
  }

  void ep_zero_length() {
    const size_t k = pick_live();
    const Live& l = live_[k];
    uint32_t key = l.rkey;
    uint64_t raddr = 0;
    switch (rng_() % 4) {
      case 0:
        key = (l.rkey & ~0xffu) | static_cast<uint8_t>(l.rkey + 1);  // stale/forged key
        break;
      case 1:
        raddr = l.length + 1 + rng_() % 100000;  // past the end
        break;
      case 2:
        raddr = ~uint64_t{0};
        break;
      default:
        raddr = l.length;  // exactly at the end: an empty range inside the mapping
        break;
    }
    attempt(kZeroLength, rng_() & 1, raddr, 0, key, &l);
  }

  void run(uint64_t target) {
    const auto t0 = std::chrono::steady_clock::now();
    while (n_.total_tried() < target && !::testing::Test::HasFatalFailure() && n_failures_ < 20) {
      switch (rng_() % 16) {
        case 0:
          ep_unmapped();
          break;
        case 1:
          ep_remapped();
          break;
        case 2:
          ep_invalidated();
          break;
        case 3:
          ep_never_mapped();
          break;
        case 4:
        case 5:
          ep_wrong_key();
          break;
        case 6:
        case 7:
          ep_wrong_index();
          break;
        case 8:
        case 9:
        case 10:
          ep_bounds();
          break;
        case 11:
        case 12:
          ep_access();
          break;
        case 13:
          ep_zero_length();
          break;
        default:
          ep_remapped();
          break;
      }
    }
    full_check();
    secs_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void report() const {
    for (int c = 0; c < kNumCats; ++c) {
      std::printf("  %-13s tried %7" PRIu64 "  refused(0x13) %7" PRIu64 "  zero-len ok %5" PRIu64
                  "  other %" PRIu64 "\n",
                  kCatName[c], n_.tried[c], n_.refused[c], n_.accepted[c], n_.other[c]);
    }
    std::printf("stale-key campaign: tried %" PRIu64 ", refused %" PRIu64 ", bytes changed %" PRIu64
                ", bytes disclosed %" PRIu64 " (%" PRIu64 " maps, %" PRIu64
                " remote invalidations, %" PRIu64 " full-memory hash checks, %.1f s)\n",
                n_.total_tried(), n_.total_refused(), n_.changed, n_.disclosed, maps_,
                invalidations_, full_checks_, secs_);
    std::fflush(stdout);
  }

  std::mt19937_64 rng_;
  Rig r_;
  Snapshot snap_a_, snap_b_;
  uint32_t parent_rkey_ = 0;
  std::vector<uint64_t> all_pages_;
  std::vector<Live> live_;
  Counts n_;
  uint64_t cookie_ = 0, maps_ = 0, invalidations_ = 0, full_checks_ = 0, since_full_ = 0;
  int n_failures_ = 0;
  double secs_ = 0;
};

TEST(Security, StaleKeyCampaign) {
  Campaign c(20240607);
  const uint64_t target = scaled(100'000, 2'000);
  c.run(target);
  c.report();
  EXPECT_GE(c.n_.total_tried(), target);
  for (int k = 0; k < kNumCats; ++k) {
    if (k == kZeroLength) continue;
    EXPECT_EQ(c.n_.refused[k], c.n_.tried[k]) << kCatName[k];
    EXPECT_GT(c.n_.tried[k], 0u) << kCatName[k];
  }
  EXPECT_EQ(c.n_.other[kZeroLength], 0u);
  EXPECT_EQ(c.n_.changed, 0u);
  EXPECT_EQ(c.n_.disclosed, 0u);
  EXPECT_EQ(c.r_.checker_reports(), 0u) << c.r_.checker_dump();
  // Nothing lost on A's side either: every window is where the state checker expects it.
  auto cen = c.r_.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_EQ(cen.value().mapped, c.live_.size());
  EXPECT_EQ(cen.value().dirty, 0u);
  EXPECT_EQ(c.r_.ca().stats().umr_errors, 0u);
}

// Regression: emu checked a WRITE packet by packet, so a multi-packet WRITE running past the end
// of a window wrote its first packets before the NAK. The responder checks the whole RETH range
// on the first packet (IBA 9.7.5.1.3) now.
TEST(Security, MultiPacketWritePastTheEndChangesNothing) {
  Rig r;
  std::vector<uint64_t> pages;
  for (uint32_t i = 0; i < 4; ++i) pages.push_back(r.a.arena().page_addr(10 + i));
  MapResult m = r.ca().map(pages, kRw, 0, 4 * 4096);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(r.settle(r.ca()));
  Snapshot snap;
  snap.take_from(side_mem(r.a), r.a.arena().size());
  std::memset(side_mem(r.b), 0x5a, 5 * 4096);
  const Sge s{r.b.arena().base(), 3 * 4096, r.b.arena().lkey()};
  ASSERT_EQ(r.cb().post_write({&s, 1}, 2 * 4096, m.rkey, 1, true), Errc::kOk);  // 1 page too far
  uint8_t st = 0xff;
  ASSERT_TRUE(r.poll_until(
      r.cb(), [&](const Completion& x) { st = x.status; }, [&] { return st != 0xff; }));
  EXPECT_EQ(st, kRemAccess);
  EXPECT_EQ(snap.verify_and_restore(), 0u);
}

}  // namespace
}  // namespace rdmx::sectest
