// Windows as RPC-over-RDMA chunks over emu (inline mode): side A is the requester (its windows
// are the chunks), side B the responder. Each test runs whole calls: A maps its chunks, encodes
// the call header with their segments and SENDs it; B decodes it, RDMA WRITEs into the Write
// chunk and replies with SEND or SEND_WITH_INV; A retires the chunks as xprtrdma's frwr_ops.c
// does and may hand the reply up only when CallChunks::done().
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include <rdmx/rpcrdma/chunks.hpp>
#include <rdmx/rpcrdma/codec.hpp>

#include "../window/emu_rig.hpp"

using namespace rdmx_test;
using namespace rdmx::rpcrdma;

namespace {

constexpr uint64_t kReplyCookie = 77;
constexpr uint64_t kCallCookie = 78;
constexpr uint32_t kXid = 0x1000;

Header call_with(const Segment* writes, uint32_t n_writes, const Segment* reply) {
  Header h;
  h.xid = kXid;
  h.credits = 8;
  h.n_writes = n_writes;
  for (uint32_t i = 0; i < n_writes; ++i) {
    h.writes[i].n_segments = 1;
    h.writes[i].segments[0] = writes[i];
  }
  if (reply) {
    h.has_reply = true;
    h.reply.n_segments = 1;
    h.reply.segments[0] = *reply;
  }
  return h;
}

struct RpcRig : EmuRig {
  RpcRig() : EmuRig(/*n_windows=*/16, /*max_pages=*/16) {}

  uint64_t a_page(uint32_t i) { return a.arena().page_addr(i); }
  // Runs both devices and polls both cores until pred() or a bound on iterations.
  bool pump(const std::function<bool()>& pred) {
    for (int spin = 0; spin < 100000; ++spin) {
      if (pred()) return true;
      a.emu()->progress();
      b.emu()->progress();
      ca().poll(16, [&](const Completion& c) { a_done.push_back(c); });
      cb().poll(16, [&](const Completion& c) { b_done.push_back(c); });
    }
    return pred();
  }
  const Completion* find(std::vector<Completion>& v, uint64_t cookie, bool recv) {
    for (const Completion& c : v)
      if (c.cookie == cookie && c.recv == recv) return &c;
    return nullptr;
  }

  // A: the reply's receive buffer (last data page); B: the call's (its page 4).
  void post_receives() {
    const Sge ra{a_page(a.arena().n_pages() - 1), 1024, a.arena().lkey()};
    ASSERT_EQ(ca().post_recv({&ra, 1}, kReplyCookie), Errc::kOk);
    const Sge rb{b.arena().base() + 4 * 4096, 1024, b.arena().lkey()};
    ASSERT_EQ(cb().post_recv({&rb, 1}, kCallCookie), Errc::kOk);
    ca().flush();
    cb().flush();
  }
  // A sends the call header `h` (encoded into its page n-2) and B decodes what arrived.
  Header call(const Header& h) {
    uint8_t* buf = reinterpret_cast<uint8_t*>(a_page(a.arena().n_pages() - 2));
    const CodecResult e = encode(h, {buf, 1024}, Role::kCall);
    EXPECT_TRUE(e.ok()) << error_name(e.error);
    const Sge s{a_page(a.arena().n_pages() - 2), e.length, a.arena().lkey()};
    EXPECT_EQ(ca().post_send({&s, 1}, 1, true), Errc::kOk);
    ca().flush();
    EXPECT_TRUE(pump([&] { return find(b_done, kCallCookie, true) != nullptr; }));
    const Completion* c = find(b_done, kCallCookie, true);
    Header got;
    if (!c) return got;
    const uint8_t* rb = reinterpret_cast<const uint8_t*>(b.arena().base() + 4 * 4096);
    const CodecResult d = decode({rb, c->byte_len}, got, Role::kCall);
    EXPECT_TRUE(d.ok()) << error_name(d.error);
    return got;
  }
  // B writes `len` bytes of `fill` into segment s of A; returns the completion status.
  uint8_t server_write(const Segment& s, uint32_t len, uint8_t fill) {
    std::memset(arena_b() + 8 * 4096, fill, len);
    const Sge l{b.arena().base() + 8 * 4096, len, b.arena().lkey()};
    EXPECT_EQ(cb().post_write({&l, 1}, s.offset, s.handle, 2, true), Errc::kOk);
    cb().flush();
    EXPECT_TRUE(pump([&] { return find(b_done, 2, false) != nullptr; }));
    const Completion* c = find(b_done, 2, false);
    const uint8_t st = c ? c->status : 0xff;
    b_done.clear();
    return st;
  }
  // B replies (RDMA_MSG, no chunks) with SEND, or SEND_WITH_INV naming `inv_rkey`; A's receive
  // completion is returned (A's core has polled it: a SEND_WITH_INV already took its window).
  Completion reply(bool with_inv, uint32_t inv_rkey) {
    Header h;
    h.xid = kXid;
    h.credits = 8;
    uint8_t* buf = arena_b() + 12 * 4096;
    const CodecResult e = encode(h, {buf, 1024}, Role::kReply);
    EXPECT_TRUE(e.ok());
    const Sge s{b.arena().base() + 12 * 4096, e.length, b.arena().lkey()};
    EXPECT_EQ(with_inv ? cb().post_send_inv({&s, 1}, inv_rkey, 3, true)
                       : cb().post_send({&s, 1}, 3, true),
              Errc::kOk);
    cb().flush();
    EXPECT_TRUE(pump([&] { return find(a_done, kReplyCookie, true) != nullptr; }));
    const Completion* c = find(a_done, kReplyCookie, true);
    return c ? *c : Completion{};
  }
  bool device_free(uint32_t rkey) { return a.emu()->inspect_mkey(rkey).free; }

  // A call whose chunk (one page) the peer invalidates with a SEND_WITH_INV (its receive
  // completion is returned), then a next call that maps a page: the cache hands back the same
  // window (LIFO) under a new key.
  Completion invalidate_then_reuse(CallChunks& ch, CallChunks& next, ChunkStats& st, uint32_t page,
                                   Segment* seg, Segment* seg2) {
    post_receives();
    const uint64_t p1[1] = {a_page(page)};
    EXPECT_EQ(ch.map(ca(), p1, kRw, 0, 4096, seg, st), Errc::kOk);
    settle(ca());
    (void)call(call_with(seg, 1, nullptr));
    const Completion c = reply(true, seg->handle);
    EXPECT_TRUE(c.ok());
    const uint64_t p2[1] = {a_page(page + 1)};
    EXPECT_EQ(next.map(ca(), p2, kRw, 0, 4096, seg2, st), Errc::kOk);
    EXPECT_EQ(seg2->handle >> 8, seg->handle >> 8) << "expected the window to be reused";
    settle(ca());
    return c;
  }

  std::vector<Completion> a_done, b_done;
};

}  // namespace

// A plain SEND reply: every chunk is invalidated locally, and done() holds the reply back until
// the invalidate's completion was polled.
TEST(RpcRdmaChunks, LocalInvalidateBeforeTheReplyIsHandedUp) {
  RpcRig r;
  r.post_receives();
  CallChunks ch;
  ChunkStats st;
  Segment seg;
  const uint64_t pages[3] = {r.a_page(0), r.a_page(1), r.a_page(2)};
  ASSERT_EQ(ch.map(r.ca(), pages, kRw, 100, 3 * 4096 - 200, &seg, st), Errc::kOk);
  EXPECT_EQ(seg.length, 3u * 4096 - 200);
  EXPECT_EQ(seg.offset, 0u);  // zero-based window
  r.settle(r.ca());
  const Header got = r.call(call_with(&seg, 1, nullptr));
  ASSERT_EQ(got.n_writes, 1u);
  ASSERT_TRUE(got.writes[0].segments[0] == seg);
  // The responder writes through the chunk: the bytes land in A's pages.
  ASSERT_EQ(r.server_write(got.writes[0].segments[0], 5000, 0x3c), 0);
  EXPECT_EQ(r.arena_a()[100], 0x3c);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(r.a_page(1))[5000 - (4096 - 100) - 1], 0x3c);

  const Completion c = r.reply(false, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_SEND);
  EXPECT_FALSE(r.device_free(seg.handle));
  ASSERT_EQ(ch.retire(r.ca(), &c, true, st), Errc::kOk);
  EXPECT_EQ(st.maps, 1u);
  EXPECT_EQ(st.local_invalidations, 1u);
  EXPECT_EQ(st.remote_invalidations, 0u);
  // Posted (and, inline, executed), but its completion not yet seen: not done.
  EXPECT_FALSE(ch.done(r.ca()));
  EXPECT_EQ(ch.reset(r.ca()), Errc::kState);
  ASSERT_TRUE(r.pump([&] { return ch.done(r.ca()); }));
  EXPECT_TRUE(r.device_free(seg.handle));
  EXPECT_EQ(ch.reset(r.ca()), Errc::kOk);
  // The responder can no longer reach the call's memory.
  EXPECT_EQ(r.server_write(seg, 16, 0x99), kRemAccess);
  EXPECT_EQ(r.arena_a()[100], 0x3c);
  r.recover();
  r.expect_no_checker_reports();
}

// A SEND_WITH_INV reply naming the chunk (remote invalidation agreed): the window is already
// invalid on the device, nothing is posted, and the reply may go up at once.
TEST(RpcRdmaChunks, RemoteInvalidationPostsNothing) {
  RpcRig r;
  r.post_receives();
  CallChunks ch;
  ChunkStats st;
  Segment seg;
  const uint64_t pages[2] = {r.a_page(3), r.a_page(4)};
  ASSERT_EQ(ch.map(r.ca(), pages, kRw, 0, 8192, &seg, st), Errc::kOk);
  r.settle(r.ca());
  const Header got = r.call(call_with(&seg, 1, nullptr));
  ASSERT_EQ(r.server_write(got.writes[0].segments[0], 8192, 0x5a), 0);
  const Completion c = r.reply(true, got.writes[0].segments[0].handle);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_SEND_INV);
  EXPECT_TRUE(r.device_free(seg.handle));
  const uint64_t pi = r.ca().qp().sq().pi();
  const uint64_t unmaps = r.ca().stats().unmaps;
  ASSERT_EQ(ch.retire(r.ca(), &c, true, st), Errc::kOk);
  EXPECT_EQ(r.ca().qp().sq().pi(), pi) << "posted an invalidate for a remotely invalidated window";
  EXPECT_EQ(r.ca().stats().unmaps, unmaps);
  EXPECT_EQ(st.remote_invalidations, 1u);
  EXPECT_EQ(st.local_invalidations, 0u);
  EXPECT_EQ(st.unagreed_remote_invalidations, 0u);
  EXPECT_TRUE(ch.done(r.ca()));
  EXPECT_EQ(ch.reset(r.ca()), Errc::kOk);
  r.expect_no_checker_reports();
}

// Two chunks, the reply invalidates one: the other is invalidated locally (frwr_reminv, then
// frwr_unmap_sync for the rest).
TEST(RpcRdmaChunks, MixedRemoteAndLocal) {
  RpcRig r;
  r.post_receives();
  CallChunks ch;
  ChunkStats st;
  Segment w, rep;
  const uint64_t p1[1] = {r.a_page(5)};
  const uint64_t p2[2] = {r.a_page(6), r.a_page(7)};
  ASSERT_EQ(ch.map(r.ca(), p1, kRw, 0, 4096, &w, st), Errc::kOk);
  ASSERT_EQ(ch.map(r.ca(), p2, kRw, 0, 8192, &rep, st), Errc::kOk);
  EXPECT_EQ(ch.n_windows(), 2u);
  r.settle(r.ca());
  const Header got = r.call(call_with(&w, 1, &rep));
  ASSERT_TRUE(got.has_reply);
  const Completion c = r.reply(true, got.reply.segments[0].handle);
  ASSERT_EQ(ch.retire(r.ca(), &c, true, st), Errc::kOk);
  EXPECT_EQ(st.remote_invalidations, 1u);
  EXPECT_EQ(st.local_invalidations, 1u);
  EXPECT_FALSE(ch.done(r.ca()));
  ASSERT_TRUE(r.pump([&] { return ch.done(r.ca()); }));
  EXPECT_TRUE(r.device_free(w.handle));
  EXPECT_TRUE(r.device_free(rep.handle));
  r.expect_no_checker_reports();
}

// The peer invalidates although remote invalidation was not agreed: the device freed the window
// and the core took it back, so a local invalidate would hit whatever the window maps next. It
// is counted as the peer's error and left alone; the next call's mapping of the same window
// survives.
TEST(RpcRdmaChunks, UnagreedRemoteInvalidationLeavesTheNextMappingAlone) {
  RpcRig r;
  CallChunks ch, next;
  ChunkStats st;
  Segment seg, seg2;
  // Before the first call retires, the next call gets its window.
  const Completion c = r.invalidate_then_reuse(ch, next, st, 8, &seg, &seg2);
  ASSERT_EQ(ch.retire(r.ca(), &c, false, st), Errc::kOk);
  EXPECT_EQ(st.remote_invalidations, 1u);
  EXPECT_EQ(st.unagreed_remote_invalidations, 1u);
  EXPECT_EQ(st.local_invalidations, 0u);
  EXPECT_TRUE(ch.done(r.ca()));
  EXPECT_FALSE(r.device_free(seg2.handle));
  EXPECT_EQ(r.server_write(seg2, 64, 0x11), 0);
  r.expect_no_checker_reports();
}

// A call abandoned without a reply (nullptr) is retired locally; a reply that names some other
// rkey does not spare the call's windows.
TEST(RpcRdmaChunks, AbandonedCallAndForeignRkey) {
  RpcRig r;
  CallChunks ch;
  ChunkStats st;
  Segment seg;
  const uint64_t pages[1] = {r.a_page(10)};
  ASSERT_EQ(ch.map(r.ca(), pages, kRw, 0, 4096, &seg, st), Errc::kOk);
  r.settle(r.ca());
  ASSERT_EQ(ch.retire(r.ca(), nullptr, true, st), Errc::kOk);
  EXPECT_EQ(st.local_invalidations, 1u);
  ASSERT_TRUE(r.pump([&] { return ch.done(r.ca()); }));
  EXPECT_TRUE(r.device_free(seg.handle));
  ASSERT_EQ(ch.reset(r.ca()), Errc::kOk);

  ASSERT_EQ(ch.map(r.ca(), pages, kRw, 0, 4096, &seg, st), Errc::kOk);
  r.settle(r.ca());
  Completion other;
  other.recv = true;
  other.cqe_opcode = MLX5_CQE_RESP_SEND_INV;
  other.imm = seg.handle ^ 0x100;  // another window's rkey
  ASSERT_EQ(ch.retire(r.ca(), &other, true, st), Errc::kOk);
  EXPECT_EQ(st.local_invalidations, 2u);
  EXPECT_EQ(st.remote_invalidations, 0u);
  ASSERT_TRUE(r.pump([&] { return ch.done(r.ca()); }));
  EXPECT_TRUE(r.device_free(seg.handle));
}

// The peer invalidated a chunk with an earlier message (not the reply) and the window went on to
// the next call under a new key: the reply is a plain SEND, and retiring the first call must not
// invalidate the second call's mapping.
TEST(RpcRdmaChunks, AlreadyInvalidWindowIsLeftAlone) {
  RpcRig r;
  CallChunks ch, next;
  ChunkStats st;
  Segment seg, seg2;
  (void)r.invalidate_then_reuse(ch, next, st, 11, &seg, &seg2);  // an early SEND_WITH_INV
  Completion plain;                                              // the reply proper: a plain SEND
  plain.recv = true;
  plain.cqe_opcode = MLX5_CQE_RESP_SEND;
  ASSERT_EQ(ch.retire(r.ca(), &plain, true, st), Errc::kOk);
  EXPECT_EQ(st.already_invalid, 1u);
  EXPECT_EQ(st.local_invalidations, 0u);
  EXPECT_TRUE(ch.done(r.ca()));
  EXPECT_FALSE(r.device_free(seg2.handle));
  EXPECT_EQ(r.server_write(seg2, 64, 0x22), 0);
  r.expect_no_checker_reports();
}

// A QP error between the call and its retirement: retire() reports it and stops; after the core's
// recover() (which invalidated every window) it resumes, finds the window no longer mapped under
// the call's rkey, and the call is done.
TEST(RpcRdmaChunks, RetireAcrossRecovery) {
  RpcRig r;
  CallChunks ch;
  ChunkStats st;
  Segment seg;
  const uint64_t pages[1] = {r.a_page(13)};
  ASSERT_EQ(ch.map(r.ca(), pages, kRw, 0, 4096, &seg, st), Errc::kOk);
  r.settle(r.ca());
  // A's own WRITE with a key B never handed out fails: A's QP goes to error.
  const Sge l{r.a_page(14), 16, r.a.arena().lkey()};
  ASSERT_EQ(r.ca().post_write({&l, 1}, 0, 0x7fffff00, 9, true), Errc::kOk);
  r.ca().flush();
  ASSERT_TRUE(r.pump([&] { return r.find(r.a_done, 9, false) != nullptr; }));
  EXPECT_NE(r.find(r.a_done, 9, false)->status, 0);
  ASSERT_TRUE(r.ca().qp().in_error());
  EXPECT_EQ(ch.retire(r.ca(), nullptr, true, st), Errc::kQpError);
  EXPECT_FALSE(ch.done(r.ca()));
  r.recover();
  EXPECT_TRUE(r.device_free(seg.handle));
  EXPECT_EQ(ch.retire(r.ca(), nullptr, true, st), Errc::kOk);
  EXPECT_EQ(st.already_invalid, 1u);
  EXPECT_EQ(st.local_invalidations, 0u);
  EXPECT_TRUE(ch.done(r.ca()));
  EXPECT_EQ(ch.reset(r.ca()), Errc::kOk);
  r.expect_no_checker_reports();
}

// An interleaved window as a chunk: 4 blocks of 512 data bytes and 8 metadata bytes behind one
// rkey, written by the responder in one RDMA WRITE, retired like any other.
TEST(RpcRdmaChunks, InterleavedChunk) {
  RpcRig r;
  r.post_receives();
  CallChunks ch;
  ChunkStats st;
  Segment seg;
  const uint64_t data = r.a_page(15), meta = r.a_page(16);
  const InterleavedPart parts[2] = {{data, 512, 0}, {meta, 8, 0}};
  ASSERT_EQ(ch.map_interleaved(r.ca(), parts, 4, kRw, &seg, st), Errc::kOk);
  EXPECT_EQ(seg.length, 4u * 520);
  r.settle(r.ca());
  const Header got = r.call(call_with(&seg, 1, nullptr));
  ASSERT_EQ(got.n_writes, 1u);
  ASSERT_EQ(r.server_write(got.writes[0].segments[0], 4 * 520, 0x6b), 0);
  for (uint32_t b = 0; b < 4; ++b) {
    EXPECT_EQ(reinterpret_cast<uint8_t*>(data)[b * 512 + 511], 0x6b) << b;
    EXPECT_EQ(reinterpret_cast<uint8_t*>(meta)[b * 8 + 7], 0x6b) << b;
  }
  const Completion c = r.reply(false, 0);
  ASSERT_EQ(ch.retire(r.ca(), &c, true, st), Errc::kOk);
  EXPECT_EQ(st.local_invalidations, 1u);
  ASSERT_TRUE(r.pump([&] { return ch.done(r.ca()); }));
  EXPECT_TRUE(r.device_free(seg.handle));
  // Past the 32-bit segment length: refused before anything is mapped.
  const InterleavedPart huge[1] = {{data, 65535, 0}};
  CallChunks other;
  EXPECT_EQ(other.map_interleaved(r.ca(), huge, 70000, kRw, &seg, st), Errc::kOutOfRange);
  EXPECT_EQ(other.n_windows(), 0u);
  r.expect_no_checker_reports();
}

TEST(RpcRdmaChunks, Limits) {
  RpcRig r;
  CallChunks ch;
  ChunkStats st;
  Segment seg;
  for (uint32_t i = 0; i < kMaxCallWindows; ++i) {
    const uint64_t p[1] = {r.a_page(20 + i)};
    ASSERT_EQ(ch.map(r.ca(), p, kRw, 0, 4096, &seg, st), Errc::kOk);
  }
  const uint64_t p[1] = {r.a_page(40)};
  EXPECT_EQ(ch.map(r.ca(), p, kRw, 0, 4096, &seg, st), Errc::kNoRoom);
  // A map refused by the window layer maps nothing.
  CallChunks other;
  EXPECT_EQ(other.map(r.ca(), p, kRw, 0, 0, &seg, st), Errc::kInvalidArgument);
  EXPECT_EQ(other.n_windows(), 0u);
  ASSERT_EQ(ch.retire(r.ca(), nullptr, false, st), Errc::kOk);
  EXPECT_EQ(ch.map(r.ca(), p, kRw, 0, 4096, &seg, st), Errc::kState);
  EXPECT_EQ(st.local_invalidations, kMaxCallWindows);
  ASSERT_TRUE(r.pump([&] { return ch.done(r.ca()); }));
  r.expect_no_checker_reports();
}
