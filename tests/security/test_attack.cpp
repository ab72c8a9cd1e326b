// The security test bed (doc/guides/security.md): one server, one victim client, one attacking
// client, in one process over emu (inline mode). The server maps the victim's windows and
// re-maps each one before every attempt (a fresh key each time); the attacker knows the
// victim's mkey indices, the key policy and the key each window had before the re-map (the
// strongest position short of reading the wire), and writes or reads 8 bytes through its own
// QP with a guessed key, reconnecting after every refusal (the NIC puts its QP in error).
//
//   isolation on  (each peer its own PD, its own windows): 0 accepted, 0 bytes changed or
//                 disclosed, even when the attacker is handed the victim's current rkey
//   isolation off, random keys: accepted fraction within 5 sigma of 1/255
//   isolation off, increment keys: every attempt accepted (why the policy is debugging-only)
//
// The same campaign runs over the two other kinds of exposure: interleaved windows (each victim
// page mapped as 8 blocks of 504 data + 8 metadata bytes) behave as windows; type-2 memory
// windows bound on the victim's QP refuse every attempt even without isolation, the victim's
// current rkey included, because the device binds them to that QP.
//
// The refusals are counted per peer by the server's device (Device::refused_remote_accesses);
// PeerGuard disconnects the attacker after N of them in a time window and logs its name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include <rdmx/win/peer_guard.hpp>

#include "rig.hpp"

namespace rdmx::sectest {
namespace {

using win::KeyPolicy;

constexpr uint32_t kVictimWindows = 4;
constexpr uint8_t kCanary = 0xC5;
constexpr uint8_t kPoison = 0xEE;
constexpr uint64_t kLandOff = 64 * 4096;  // attacker's READ landing area in its arena
constexpr uint64_t kSrcOff = 65 * 4096;   // attacker's WRITE source (kPoison bytes)
constexpr uint32_t kLen = 8;

enum class Kind { kWindow, kInterleaved, kMemoryWindow };

struct Figures {
  uint64_t attempts = 0, accepted = 0, refused = 0, changed = 0, disclosed = 0, victim_ok = 0;
};

class Bed {
 public:
  Bed(bool isolate, KeyPolicy keys, uint64_t seed, Kind kind = Kind::kWindow) : kind_(kind) {
    emu::Options o;
    o.mode = emu::Mode::kInline;
    o.responder_keeps_rts = true;  // thousands of guesses on one connection: statistics
    pair = take(emu::make_pair(o, o));
    // Server: one arena; the victim's windows in pool pv. Isolation: the attacker's core gets
    // a pool of its own (own PD, own windows); without it, both cores share pv (one PD).
    mem::ArenaConfig ac;
    ac.bytes = size_t{128} * 4096;
    if (kind == Kind::kMemoryWindow) ac.access |= mlx5::kAccessMwBind;
    sarena = take(mem::Arena::create(*pair.a, ac));
    win::PoolConfig pc;
    pc.n_windows = 16;
    pc.max_pages = 4;
    pc.key_policy = keys;
    pc.key_seed = seed;
    pc.own_pd = isolate;
    pv = take(WindowPool::create(*pair.a, *sarena, pc));
    if (isolate) px = take(WindowPool::create(*pair.a, *sarena, pc));
    win::CoreConfig cc;
    cc.cache_size = 4;
    cc.qp.sq_wqebbs = 256;
    cc.qp.rq_wqes = 16;
    cc.qp.cq_cqes = 512;
    win::CoreConfig vcc = cc;
    if (kind == Kind::kMemoryWindow) vcc.memory_windows = kVictimWindows;
    sv = take(PollCore::create(*pv, vcc));
    sx = take(PollCore::create(isolate ? *px : *pv, cc));
    ac.access = mlx5::kAccessLocalWrite;
    // Clients: one arena and pool on the other device, a core each.
    ac.bytes = size_t{96} * 4096;
    ac.access = mlx5::kAccessAll;
    carena = take(mem::Arena::create(*pair.b, ac));
    win::PoolConfig cpc;
    cpc.n_windows = 4;
    cpc.max_pages = 4;
    cpool = take(WindowPool::create(*pair.b, *carena, cpc));
    cv = take(PollCore::create(*cpool, cc));
    cx = take(PollCore::create(*cpool, cc));
    check(endpoint::connect_cores(*sv, *cv));
    check(endpoint::connect_cores(*sx, *cx));
    // The victim's data: pages 0..3 of the server's arena, one window each.
    auto* s = reinterpret_cast<uint8_t*>(sarena->base());
    for (size_t i = 0; i < kVictimWindows * 4096; ++i) s[i] = static_cast<uint8_t>(i * 7 + 1);
    snap.take_from(s, kVictimWindows * 4096);
    for (uint32_t j = 0; j < kVictimWindows; ++j) map_victim(j);
    auto* c = reinterpret_cast<uint8_t*>(carena->base());
    std::memset(c + kLandOff, kCanary, 4096);
    std::memset(c + kSrcOff, kPoison, 4096);
  }
  ~Bed() {
    sv.reset();
    sx.reset();
    cv.reset();
    cx.reset();
  }
  static void check(const Status& s) {
    if (!s.ok()) throw std::runtime_error(s.error().message);
  }

  void pump() {
    pair.a->progress();
    pair.b->progress();
  }
  void settle(PollCore& c) {
    c.flush();
    const auto t0 = std::chrono::steady_clock::now();
    while (c.umrs_in_flight()) {
      c.poll(64, [](const Completion&) {});
      pump();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20))
        throw std::runtime_error("server UMRs did not complete");
    }
  }
  // Victim page j behind one rkey at iova 0: a window of the page, an interleaved window of it
  // (8 blocks of 504 data bytes from the page's start and 8 metadata bytes from its tail), or a
  // zero-based memory window bound on the victim's QP.
  void map_victim(uint32_t j) {
    const uint64_t page = sarena->page_addr(j);
    if (kind_ == Kind::kMemoryWindow) {
      win::BindResult b = sv->bind_mw(page, 4096, kRw & ~mlx5::kAccessLocalWrite, true);
      if (!b.ok()) throw std::runtime_error("victim bind");
      mw[j] = b.mw;
      rkey[j] = b.rkey;
    } else {
      const win::InterleavedPart parts[] = {{page, 504, 0}, {page + 504 * 8, 8, 0}};
      MapResult m = kind_ == Kind::kInterleaved ? sv->map_interleaved(parts, 8, kRw)
                                                : sv->map({&page, 1}, kRw, 0, 4096);
      if (!m.ok()) throw std::runtime_error("victim map");
      victim[j] = m.window;
      rkey[j] = m.rkey;
    }
    settle(*sv);
  }
  // A fresh key for victim window j (unmap + map: the LIFO cache hands the same window back).
  uint32_t remap_victim(uint32_t j) {
    const uint32_t old = rkey[j];
    const Errc e = kind_ == Kind::kMemoryWindow ? sv->invalidate_mw(mw[j]) : sv->unmap(victim[j]);
    if (e != Errc::kOk) throw std::runtime_error("victim unmap");
    map_victim(j);
    if ((rkey[j] >> 8) != (old >> 8)) throw std::runtime_error("victim window changed index");
    return old;
  }

  // One RDMA op from client core c; returns the completion status (0 = accepted). A refused
  // op leaves c's QP in error: it reconnects (the server side of the QP stays in RTS).
  uint8_t attempt(PollCore& c, PollCore& server, bool write, uint32_t key, uint64_t src_off) {
    const Sge s{carena->base() + src_off, kLen, carena->lkey()};
    const uint64_t cookie = ++cookie_;
    const Errc e = write ? c.post_write({&s, 1}, 0, key, cookie, true)
                         : c.post_read({&s, 1}, 0, key, cookie, true);
    if (e != Errc::kOk) throw std::runtime_error("post: " + std::string(errc_name(e)));
    c.flush();
    uint8_t status = 0xff;
    const auto t0 = std::chrono::steady_clock::now();
    while (status == 0xff) {
      const uint32_t n = c.poll(16, [&](const Completion& x) {
        if (x.cookie == cookie) status = x.status;
      });
      if (!n) pump();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20))
        throw std::runtime_error("attempt did not complete");
    }
    if (status != 0) check(endpoint::recover_core(c, pair.a->local_info(server.qp_handle())));
    return status;
  }

  // The attack: `n` attempts; guess(old_key, current_key, i) names the key byte to try.
  template <class G>
  Figures attack(uint64_t n, G&& guess) {
    Figures f;
    auto* land = reinterpret_cast<uint8_t*>(carena->base()) + kLandOff;
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t j = static_cast<uint32_t>(i % kVictimWindows);
      const uint32_t old = remap_victim(j);
      const uint32_t key =
          (rkey[j] & ~0xffu) | guess(static_cast<uint8_t>(old), static_cast<uint8_t>(rkey[j]), i);
      const bool write = i & 1;
      const uint8_t st = attempt(*cx, *sx, write, key, write ? kSrcOff : kLandOff);
      ++f.attempts;
      if (st == 0)
        ++f.accepted;
      else if (st == kRemAccess)
        ++f.refused;
      else
        throw std::runtime_error("attempt ended with syndrome " + std::to_string(st));
      f.changed += snap.verify_range_and_restore(size_t{j} * 4096, 4096);
      for (uint32_t b = 0; b < kLen; ++b) {
        f.disclosed += land[b] != kCanary;
        land[b] = kCanary;
      }
      // The victim keeps working through all of it: its own WRITE with its current key.
      if (i % 1024 == 0) {
        const uint8_t vs = attempt(*cv, *sv, true, rkey[j], kSrcOff + 1024);
        if (vs == 0) ++f.victim_ok;
        snap.verify_range_and_restore(size_t{j} * 4096, 4096);
      }
    }
    return f;
  }

  emu::DevicePair pair;
  std::unique_ptr<mem::Arena> sarena, carena;
  std::unique_ptr<WindowPool> pv, px, cpool;
  std::unique_ptr<PollCore> sv, sx, cv, cx;
  Kind kind_;
  Window* victim[kVictimWindows] = {};
  win::MemoryWindow* mw[kVictimWindows] = {};
  uint32_t rkey[kVictimWindows] = {};
  Snapshot snap;
  uint64_t cookie_ = 0;
};

void report(const char* what, const Figures& f) {
  std::printf(
      "  %-32s attempts %8llu accepted %6llu (%.5f, 1/255 = %.5f) refused %8llu "
      "changed %llu disclosed %llu victim ok %llu\n",
      what, (unsigned long long)f.attempts, (unsigned long long)f.accepted,
      f.attempts ? double(f.accepted) / double(f.attempts) : 0.0, 1.0 / 255,
      (unsigned long long)f.refused, (unsigned long long)f.changed, (unsigned long long)f.disclosed,
      (unsigned long long)f.victim_ok);
}

// A guess uniform over the 255 key bytes other than the one the window had before the re-map.
struct Guesser {
  std::mt19937_64 rng{0xa77ac4};
  uint8_t operator()(uint8_t old, uint8_t, uint64_t) {
    return static_cast<uint8_t>(old + 1 + rng() % 255);
  }
};

TEST(AttackBed, IsolationRefusesEveryKeyEvenTheRightOne) {
  Bed bed(true, KeyPolicy::kRandom, 0x1501);
  ASSERT_NE(bed.pv->pd(), bed.px->pd());
  Guesser g;
  // Even attempts guess; odd attempts are handed the victim's current key (an oracle).
  const Figures f = bed.attack(scaled(100'000, 2'000), [&](uint8_t old, uint8_t cur, uint64_t i) {
    return (i & 1) ? cur : g(old, cur, i);
  });
  report("isolation on, random keys", f);
  EXPECT_EQ(f.accepted, 0u);
  EXPECT_EQ(f.refused, f.attempts);
  EXPECT_EQ(f.changed, 0u);
  EXPECT_EQ(f.disclosed, 0u);
  EXPECT_GT(f.victim_ok, 0u);
  EXPECT_EQ(f.victim_ok, (f.attempts + 1023) / 1024);
  // Counted per peer by the server's device: all of them on the attacker's QP, none on the
  // victim's.
  EXPECT_EQ(take(bed.pair.a->refused_remote_accesses(bed.sx->qp_handle())), f.refused);
  EXPECT_EQ(take(bed.pair.a->refused_remote_accesses(bed.sv->qp_handle())), 0u);
  // Refused for the PD alone (right index and key byte): every oracle attempt, plus the guesses
  // that hit the key byte (about 1 in 255 of the other half).
  const uint64_t pd_only = bed.pair.a->stats().pd_refusals;
  EXPECT_GE(pd_only, f.attempts / 2);
  EXPECT_LT(pd_only, f.attempts / 2 + f.attempts / 100);
  std::printf("  refused for the PD alone (right key byte): %llu\n", (unsigned long long)pd_only);
}

TEST(AttackBed, RandomKeysWithoutIsolationLeakOneIn255) {
  Bed bed(false, KeyPolicy::kRandom, 0x1502);
  Guesser g;
  const Figures f = bed.attack(scaled(100'000, 10'000), g);
  report("isolation off, random keys", f);
  // Binomial(n, 1/255): 5 sigma either side (fixed seeds: the figure is deterministic).
  const double n = static_cast<double>(f.attempts), p = 1.0 / 255;
  const double mean = n * p, sd = std::sqrt(n * p * (1 - p));
  EXPECT_GT(static_cast<double>(f.accepted), mean - 5 * sd);
  EXPECT_LT(static_cast<double>(f.accepted), mean + 5 * sd);
  EXPECT_EQ(f.accepted + f.refused, f.attempts);
  EXPECT_GT(f.changed + f.disclosed, 0u);  // what an accepted guess does without isolation
  EXPECT_EQ(f.victim_ok, (f.attempts + 1023) / 1024);
  EXPECT_EQ(take(bed.pair.a->refused_remote_accesses(bed.sx->qp_handle())), f.refused);
}

TEST(AttackBed, IncrementKeysAreDebuggingOnly) {
  Bed bed(false, KeyPolicy::kIncrement, 0);
  const Figures f = bed.attack(scaled(2'000, 200), [](uint8_t old, uint8_t, uint64_t) {
    return static_cast<uint8_t>(old + 1);  // the next key of an increment policy
  });
  report("isolation off, increment keys", f);
  EXPECT_EQ(f.accepted, f.attempts) << "with increment keys the next key is known";
  EXPECT_GT(f.changed, 0u);
  EXPECT_GT(f.disclosed, 0u);
  // Isolation still holds with increment keys.
  Bed iso(true, KeyPolicy::kIncrement, 0);
  const Figures fi = iso.attack(scaled(2'000, 200), [](uint8_t old, uint8_t, uint64_t) {
    return static_cast<uint8_t>(old + 1);
  });
  report("isolation on, increment keys", fi);
  EXPECT_EQ(fi.accepted, 0u);
  EXPECT_EQ(fi.changed + fi.disclosed, 0u);
}

// Interleaved windows rotate their keys as windows do: isolation refuses everything (the oracle
// key too), and without it a guess lands about one time in 255.
TEST(AttackBed, InterleavedWindowsAsWindows) {
  Bed iso(true, KeyPolicy::kRandom, 0x1504, Kind::kInterleaved);
  Guesser g;
  const Figures fi = iso.attack(scaled(20'000, 1'000), [&](uint8_t old, uint8_t cur, uint64_t i) {
    return (i & 1) ? cur : g(old, cur, i);
  });
  report("interleaved, isolation on", fi);
  EXPECT_EQ(fi.accepted, 0u);
  EXPECT_EQ(fi.changed + fi.disclosed, 0u);
  EXPECT_EQ(fi.victim_ok, (fi.attempts + 1023) / 1024);
  Bed open(false, KeyPolicy::kRandom, 0x1505, Kind::kInterleaved);
  const Figures fo = open.attack(scaled(50'000, 5'000), g);
  report("interleaved, isolation off", fo);
  const double n = static_cast<double>(fo.attempts), p = 1.0 / 255;
  const double mean = n * p, sd = std::sqrt(n * p * (1 - p));
  EXPECT_GT(static_cast<double>(fo.accepted), mean - 5 * sd);
  EXPECT_LT(static_cast<double>(fo.accepted), mean + 5 * sd);
  EXPECT_EQ(fo.victim_ok, (fo.attempts + 1023) / 1024);
}

// Memory windows bound on the victim's QP: without isolation (one PD for both peers), the
// attacker's QP is refused every key, the victim's current one included; the victim's own
// accesses keep working.
TEST(AttackBed, MemoryWindowsRefuseOtherQpsWithoutIsolation) {
  Bed bed(false, KeyPolicy::kRandom, 0x1506, Kind::kMemoryWindow);
  ASSERT_EQ(bed.sv->n_memory_windows(), kVictimWindows);
  Guesser g;
  const uint64_t qp0 = bed.pair.a->stats().qp_binding_refusals;
  const Figures f = bed.attack(scaled(50'000, 2'000), [&](uint8_t old, uint8_t cur, uint64_t i) {
    return (i & 1) ? cur : g(old, cur, i);
  });
  report("memory windows, isolation off", f);
  EXPECT_EQ(f.accepted, 0u);
  EXPECT_EQ(f.refused, f.attempts);
  EXPECT_EQ(f.changed, 0u);
  EXPECT_EQ(f.disclosed, 0u);
  EXPECT_EQ(f.victim_ok, (f.attempts + 1023) / 1024);
  // Refused for the QP binding alone (right index and key byte): every oracle attempt, plus the
  // guesses that hit the key byte.
  const uint64_t qp_only = bed.pair.a->stats().qp_binding_refusals - qp0;
  EXPECT_GE(qp_only, f.attempts / 2);
  EXPECT_LT(qp_only, f.attempts / 2 + f.attempts / 100);
  EXPECT_EQ(take(bed.pair.a->refused_remote_accesses(bed.sx->qp_handle())), f.refused);
  EXPECT_EQ(take(bed.pair.a->refused_remote_accesses(bed.sv->qp_handle())), 0u);
  std::printf("  refused for the QP binding alone (right key byte): %llu\n",
              (unsigned long long)qp_only);
}

TEST(AttackBed, GuardDisconnectsAfterNRefusalsAndNamesThePeer) {
  Bed bed(true, KeyPolicy::kRandom, 0x1503);
  win::PeerGuard off(*bed.pair.a, bed.sx->qp_handle(), "attacker@off");  // default: never
  win::PeerGuard guard(*bed.pair.a, bed.sx->qp_handle(), "attacker@10.0.0.66",
                       win::RefusalPolicy{10, std::chrono::milliseconds(60'000)});
  ASSERT_FALSE(take(guard.check()));
  ASSERT_FALSE(take(off.check()));
  testing::internal::CaptureStderr();
  uint64_t tries = 0;
  bool gone = false;
  for (; tries < 100 && !gone; ++tries) {
    bed.remap_victim(0);
    (void)bed.attempt(*bed.cx, *bed.sx, true, bed.rkey[0], kSrcOff);
    gone = take(guard.check());
    EXPECT_FALSE(take(off.check()));
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(gone);
  EXPECT_EQ(tries, 11u) << "disconnect after more than 10 refusals";
  EXPECT_EQ(guard.refused(), 11u);
  EXPECT_EQ(off.refused(), 11u);
  EXPECT_FALSE(off.disconnected());
  EXPECT_NE(log.find("attacker@10.0.0.66"), std::string::npos) << log;
  EXPECT_EQ(take(bed.pair.a->query_qp(bed.sx->qp_handle())), mlx5::QpState::kError);
  // The victim's QP is untouched.
  EXPECT_EQ(take(bed.pair.a->query_qp(bed.sv->qp_handle())), mlx5::QpState::kRts);
  EXPECT_EQ(bed.attempt(*bed.cv, *bed.sv, true, bed.rkey[1], kSrcOff), 0);
}

}  // namespace
}  // namespace rdmx::sectest
