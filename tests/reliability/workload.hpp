// The reliability workload shared by test_faults.cpp and soak.cpp: side A runs RDMA WRITE/READ
// at a window B mapped (mostly unsignaled), interleaved with maps and unmaps of its own windows,
// and keeps a ledger of every application WQE by cookie (see test_faults.cpp for what is checked).
#pragma once

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include "../security/rig.hpp"

namespace rdmx::sectest {

struct OpRecord {
  uint64_t seq = 0;  // posting order
  int reports = 0;
  uint8_t status = 0xff;
};

struct Totals {
  uint64_t faults = 0, ops = 0, completed = 0, failed = 0, lost = 0, duplicated = 0;
  uint64_t verify_failures = 0;
  void print(const char* who) const {
    std::printf("%s: faults survived %" PRIu64 ", operations posted %" PRIu64 ", completed %" PRIu64
                ", failed with a syndrome %" PRIu64 ", lost %" PRIu64 ", duplicated %" PRIu64
                ", verification failures %" PRIu64 "\n",
                who, faults, ops, completed, failed, lost, duplicated, verify_failures);
    std::fflush(stdout);
  }
};

class Workload {
 public:
  Workload(Rig& r, uint64_t seed, Totals& t) : r_(r), rng_(seed), g_totals(t) {
    for (uint32_t i = 8; i < r.a.arena().n_pages(); ++i) pages_.push_back(r.a.arena().page_addr(i));
    b_map();
  }

  static constexpr uint32_t kBPages = 4;  // B's pool holds 4-page windows

  // B maps 4 pages of its arena read/write for A.
  void b_map() {
    std::vector<uint64_t> p;
    for (uint32_t i = 0; i < kBPages; ++i) p.push_back(r_.b.arena().page_addr(8 + i));
    MapResult m = r_.cb().map(p, kRw, 0, kBPages * 4096);
    ASSERT_TRUE(m.ok()) << errc_name(m.errc);
    b_rkey_ = m.rkey;
    ASSERT_TRUE(r_.settle(r_.cb()));
  }

  void on(const Completion& c) {
    if (c.recv) return;
    auto it = ops_.find(c.cookie);
    if (it == ops_.end()) {
      ++unknown_;
      return;
    }
    ++it->second.reports;
    it->second.status = c.status;
  }

  // Posts up to n operations (and some maps/unmaps) on A; rings every few. Returns how many
  // application operations were posted (posting stops at kQpError).
  uint32_t burst(uint32_t n) {
    PollCore& c = r_.ca();
    uint32_t posted = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t op = static_cast<uint32_t>(rng_() % 8);
      if (op == 0) {
        const uint64_t p[2] = {pages_[rng_() % pages_.size()], pages_[rng_() % pages_.size()]};
        MapResult m = c.map(p, kRw, 0, 8192);
        if (m.ok())
          a_mapped_.push_back(m.window);
        else if (m.errc == Errc::kQpError)
          break;
        continue;
      }
      if (op == 1 && !a_mapped_.empty()) {
        const size_t k = rng_() % a_mapped_.size();
        const Errc e = c.unmap(a_mapped_[k]);
        if (e == Errc::kOk) {
          a_mapped_[k] = a_mapped_.back();
          a_mapped_.pop_back();
        } else if (e == Errc::kQpError) {
          break;
        }
        continue;
      }
      const bool write = op & 1;
      const uint32_t len = 1 + static_cast<uint32_t>(rng_() % 8192);
      const uint64_t raddr = rng_() % (kBPages * 4096 - len + 1);
      const Sge s{r_.a.arena().page_addr(static_cast<uint32_t>(rng_() % 8)), len,
                  r_.a.arena().lkey()};
      const uint64_t cookie = next_cookie_++;
      Errc e;
      for (;;) {
        e = write ? c.post_write({&s, 1}, raddr, b_rkey_, cookie)
                  : c.post_read({&s, 1}, raddr, b_rkey_, cookie);
        if (e != Errc::kNoRoom) break;
        c.flush();
        if (!c.poll(64, [&](const Completion& x) { on(x); })) r_.pump();
      }
      if (e == Errc::kQpError) break;
      EXPECT_EQ(e, Errc::kOk) << errc_name(e);
      ops_[cookie] = OpRecord{seq_++, 0, 0xff};
      ++posted;
      if (rng_() % 16 == 0) c.flush();
    }
    c.flush();
    return posted;
  }

  // Polls A until every WQE it posted has been retired by a CQE.
  bool drain(int timeout_s = 30) {
    PollCore& c = r_.ca();
    return r_.poll_until(
        c, [&](const Completion& x) { on(x); },
        [&] { return c.qp().sq().in_flight() == 0 && c.umrs_in_flight() == 0; }, timeout_s);
  }

  // The ledger: exactly once each, in-order error semantics. `injected` = the syndrome the
  // fault produces on the WQE it hits (0 = none expected among application WQEs).
  void check_ledger(const char* what, bool expect_error) {
    std::map<uint64_t, const OpRecord*> by_seq;
    uint64_t completed = 0, failed = 0, lost = 0, dup = 0;
    for (const auto& [cookie, rec] : ops_) {
      by_seq[rec.seq] = &rec;
      if (rec.reports == 0) ++lost;
      if (rec.reports > 1) ++dup;
      if (rec.reports >= 1) (rec.status == 0 ? completed : failed) += 1;
    }
    bool seen_error = false;
    uint64_t success_after_error = 0;
    for (const auto& [seq, rec] : by_seq) {
      if (rec->status != 0 && rec->reports) seen_error = true;
      if (rec->status == 0 && seen_error) ++success_after_error;
    }
    EXPECT_EQ(lost, 0u) << what;
    EXPECT_EQ(dup, 0u) << what;
    EXPECT_EQ(unknown_, 0u) << what;
    EXPECT_EQ(success_after_error, 0u) << what;
    if (expect_error) {
      EXPECT_TRUE(seen_error || r_.ca().stats().umr_errors > 0) << what << ": no error seen";
    }
    g_totals.ops += ops_.size();
    g_totals.completed += completed;
    g_totals.failed += failed;
    g_totals.lost += lost;
    g_totals.duplicated += dup;
    if (!quiet) print_ledger(what, completed, failed, lost, dup);
    ops_.clear();
    unknown_ = 0;
  }

  void print_ledger(const char* what, uint64_t completed, uint64_t failed, uint64_t lost,
                    uint64_t dup) {
    std::printf("  %-40s ops %5zu completed %5" PRIu64 " failed %5" PRIu64 " lost %" PRIu64
                " dup %" PRIu64 " (A: %" PRIu64 " UMR errors, syndromes:",
                what, ops_.size(), completed, failed, lost, dup, r_.ca().stats().umr_errors.get());
    const auto& syn = r_.ca().stats().syndromes;
    for (size_t i = 0; i < syn.size(); ++i)
      if (syn[i]) std::printf(" 0x%02zx x%" PRIu64, i, syn[i].get());
    std::printf(")\n");
  }

  uint64_t count_status(uint8_t st) const {
    uint64_t n = 0;
    for (const auto& [c, rec] : ops_) n += rec.reports && rec.status == st;
    return n;
  }

  void check_windows(const char* what) {
    auto ca = r_.a.pool().check_windows();
    ASSERT_TRUE(ca.ok()) << what << ": A: " << ca.error().message;
    auto cb = r_.b.pool().check_windows();
    ASSERT_TRUE(cb.ok()) << what << ": B: " << cb.error().message;
    EXPECT_EQ(ca.value().total, r_.a.pool().n_windows());
    EXPECT_EQ(ca.value().mapped, a_mapped_.size()) << what;
  }

  // Both ends back to RTS; both cores recovered; B maps its window again.
  void recover() {
    ASSERT_TRUE(drain()) << "A did not retire every WQE before recovery";
    r_.recover_both();
    a_mapped_.clear();  // recover() freed them (their mappings are gone)
    check_windows("after recover");
    auto ca = r_.a.pool().check_windows();
    ASSERT_TRUE(ca.ok());
    EXPECT_EQ(ca.value().mapped, 0u);
    EXPECT_EQ(ca.value().dirty, 0u);
    EXPECT_EQ(ca.value().unmapping, 0u);
    b_map();
    auto st = r_.a.emu()->query_qp(r_.ca().qp_handle());
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st.value(), mlx5::QpState::kRts);
    ++g_totals.faults;
  }

  // Traffic resumes: a verified WRITE + READ round trip, then a clean burst.
  void expect_traffic_resumes(const char* what) {
    PollCore& c = r_.ca();
    uint8_t* src = side_mem(r_.a) + r_.a.arena().page_addr(2) - r_.a.arena().base();
    uint8_t* dst = side_mem(r_.a) + r_.a.arena().page_addr(4) - r_.a.arena().base();
    for (int i = 0; i < 4096; ++i) src[i] = static_cast<uint8_t>(rng_());
    std::memset(dst, 0, 4096);
    const Sge s{r_.a.arena().page_addr(2), 4096, r_.a.arena().lkey()};
    const Sge d{r_.a.arena().page_addr(4), 4096, r_.a.arena().lkey()};
    const uint64_t cw = next_cookie_++, cr = next_cookie_++;
    ops_[cw] = OpRecord{seq_++, 0, 0xff};
    ops_[cr] = OpRecord{seq_++, 0, 0xff};
    ASSERT_EQ(c.post_write({&s, 1}, 4096, b_rkey_, cw, true), Errc::kOk);
    ASSERT_EQ(c.post_read({&d, 1}, 4096, b_rkey_, cr, true), Errc::kOk);
    ASSERT_TRUE(drain());
    EXPECT_EQ(ops_[cw].status, 0) << what;
    EXPECT_EQ(ops_[cr].status, 0) << what;
    const bool same = std::memcmp(src, dst, 4096) == 0;
    EXPECT_TRUE(same) << what << ": round trip data differs";
    if (!same) ++g_totals.verify_failures;
    burst(200);
    ASSERT_TRUE(drain());
    EXPECT_FALSE(c.qp().in_error()) << what;
    EXPECT_EQ(count_status(0), ops_.size()) << what << ": not every op completed after recovery";
    check_ledger(what, false);
    check_windows(what);
  }

  Rig& r_;
  std::mt19937_64 rng_;
  Totals& g_totals;
  bool quiet = false;
  std::vector<uint64_t> pages_;
  std::vector<Window*> a_mapped_;
  std::unordered_map<uint64_t, OpRecord> ops_;
  uint64_t next_cookie_ = 1, seq_ = 0, unknown_ = 0;
  uint32_t b_rkey_ = 0;
};

}  // namespace rdmx::sectest
