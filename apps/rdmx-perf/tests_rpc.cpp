// `rpc_lat` / `rpc_bw`: NFSv3 READ and WRITE calls over RPC-over-RDMA version 1 (RFC 8166)
// between a client and a server over the threaded emu, one RC QP each, depth 1 (latency) or 32
// (throughput). Two ways to offer the client's memory, alternated round by round:
//
//   window         per call the client maps a window over the call's pages (CallChunks::map),
//                  names it in the call; the server RDMA READs (WRITE) or WRITEs (READ) it and
//                  replies with SEND_WITH_INV naming it; the client retires the chunk
//                  (CallChunks::retire: the remote invalidation took the window, nothing to post)
//                  before the RPC counts as complete
//   register_once  the chunk is the client arena's own MR (rkey, virtual address): no map, no
//                  invalidation, a plain SEND reply: the Linux NFS client's persistent
//                  registration (the ALLPHYSICAL mode removed in Linux 4.20), every byte exposed
//                  for as long as the MR lives
//
// The client and the server are two poll cores of this one measuring thread: it issues a call,
// then polls the server's core and the client's in turn until the RPC is complete, so an RPC's
// time is the client's work, the server's and the emulated devices' round trips (as in io_lat,
// where the peer is the passive device alone). Every payload byte is checked on the side that
// received it (memcmp against the pattern the call's xid selects, in both modes); a mismatch
// fails the run.
//
// The RPC message is NFSv3-shaped: an ONC RPC call (RFC 5531, AUTH_NONE) of NFSPROC3_READ or
// NFSPROC3_WRITE (RFC 1813) with a 32-byte file handle, offset and count; a WRITE's data is a Read
// chunk at its XDR position and a READ's result a Write chunk (RFC 8267 section 4.1).
#include <cstring>
#include <span>

#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/rpcrdma/chunks.hpp>
#include <rdmx/rpcrdma/codec.hpp>

#include "node.hpp"
#include "tests.hpp"

namespace rdmx::perf {

namespace {

using mlx5::Completion;
using mlx5::prm::Sge;
using rpcrdma::CallChunks;
using rpcrdma::ChunkStats;
using rpcrdma::Header;
using rpcrdma::Role;
using rpcrdma::Segment;

constexpr uint32_t kMaxSlots = 32;  // calls in flight at most (rpc_bw's depth)
constexpr uint32_t kMsgBytes = rpcrdma::kDefaultInlineThreshold;  // one call or reply, inline
constexpr uint32_t kPage = 4096;
constexpr uint32_t kPatternStep = 64;  // bytes between two payload patterns in the reference
constexpr uint32_t kPatterns = 2 * kMaxSlots;

// ONC RPC (RFC 5531) and NFSv3 (RFC 1813) constants.
constexpr uint32_t kRpcCall = 0, kRpcReply = 1, kRpcVersion = 2, kMsgAccepted = 0, kSuccess = 0;
constexpr uint32_t kNfsProgram = 100003, kNfsVersion = 3, kNfsRead = 6, kNfsWrite = 7;
constexpr uint32_t kNfs3Ok = 0, kFileSync = 2, kFhBytes = 32;
// The call: RPC header (10 words with AUTH_NONE credential and verifier), file handle (length +
// 32 bytes), offset (hyper), count; a WRITE adds stable_how and the data's length: its bytes,
// at XDR position 96, travel in the Read chunk.
constexpr uint32_t kCallRpcBytes = 40;
constexpr uint32_t kReadArgsBytes = kCallRpcBytes + 4 + kFhBytes + 8 + 4;
constexpr uint32_t kWriteArgsBytes = kReadArgsBytes + 8;
constexpr uint32_t kWriteDataPosition = kWriteArgsBytes;
static_assert(kWriteDataPosition % 4 == 0);
// The reply: RPC accepted reply (6 words), nfsstat3, then READ3resok (post_op_attr FALSE,
// count, eof, the data's length; the data in the Write chunk) or WRITE3resok (wcc_data with both
// attributes FALSE, count, committed, an 8-byte verifier).
constexpr uint32_t kReplyRpcBytes = 24;
constexpr uint32_t kReadResBytes = kReplyRpcBytes + 4 + 16;
constexpr uint32_t kWriteResBytes = kReplyRpcBytes + 4 + 24;

// Cookie kinds (bits 32..39; bit 63 stays clear: PollCore's own).
enum : uint64_t { kCallSend = 1, kReplyRecv, kCallRecv, kSrvRead, kSrvWrite, kSrvReply };
constexpr uint64_t cookie(uint64_t kind, uint32_t i) noexcept {
  return kind << 32 | i;
}

void put32(uint8_t*& p, uint32_t v) noexcept {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
  p += 4;
}
void put64(uint8_t*& p, uint64_t v) noexcept {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p, static_cast<uint32_t>(v));
}
uint32_t get32(const uint8_t* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}

// One measured case: direction and how the memory is offered.
struct Case {
  bool read = false;
  bool window = false;
};
struct CaseCounts {
  uint64_t issued = 0, completed = 0, bytes_verified = 0;
  ChunkStats chunks;
};

// Client side of a call in flight.
struct ClientSlot {
  CallChunks chunks;
  uint32_t gen = 0;
  uint32_t kase = 0;
  uint32_t pages = 0;
  bool busy = false;
  bool retiring = false;
};
// Server side: what the reply needs once the data moved.
struct ServerSlot {
  uint32_t xid = 0;
  uint32_t bytes = 0;
  Segment seg;
  bool read = false;
  bool window = false;
};

class RpcRig {
 public:
  RpcRig(Ctx& ctx, uint32_t depth, uint32_t max_pages) : depth_(depth), max_pages_(max_pages) {
    endpoint::DeviceOptions oa, ob;
    oa.emu.prm_checker = ob.emu.prm_checker = false;
    oa.emu.idle_spin = ob.emu.idle_spin = 1u << 30;  // device threads poll like a NIC
    oa.emu_name = "perf_rpc_client";
    ob.emu_name = "perf_rpc_server";
    set_affinity(ctx.device_cpu);  // both device threads inherit it
    auto pair = endpoint::open_device_pair(ctx.device, oa, ob);
    set_affinity(ctx.measure_cpu);
    auto devs = need(std::move(pair), ctx.device.c_str());

    const size_t max_bytes = size_t{max_pages} * kPage;
    // Client: call and reply buffers, then per slot three page sets of max_pages: a WRITE's
    // source for even and odd generations (filled once with their patterns), a READ's sink.
    NodeConfig nc;
    nc.max_pages = max_pages;
    nc.n_windows = 256;
    nc.data_bytes = msg_pages() * size_t{kPage} + size_t{kMaxSlots} * 3 * max_bytes;
    // register_once hands the arena's own rkey to the server.
    nc.arena_access = mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead;
    client_ = std::make_unique<Node>(std::move(devs[0]), nc);
    // Server: receive and reply buffers, a sink per slot, the pattern reference and a scratch
    // copy of it (--corrupt). It maps nothing.
    NodeConfig ns;
    ns.max_pages = 1;
    ns.n_windows = 64;
    ref_bytes_ = max_bytes + kPatterns * kPatternStep;
    ns.data_bytes = msg_pages() * size_t{kPage} * 2 + size_t{kMaxSlots} * max_bytes +
                    2 * ((ref_bytes_ + kPage - 1) / kPage * kPage);
    server_ = std::make_unique<Node>(std::move(devs[1]), ns);
    need(mlx5::connect_qps(client_->ep.device(), client_->core().qp_handle(), server_->ep.device(),
                           server_->core().qp_handle()),
         "connect");

    // The payload patterns: pattern k is ref[k * kPatternStep ...], pseudo-random bytes.
    srv_base_ = server_->ep.arena().base();
    srv_sink_ = srv_base_ + msg_pages() * uint64_t{kPage} * 2;
    srv_ref_ = srv_sink_ + uint64_t{kMaxSlots} * max_bytes;
    srv_scratch_ = srv_ref_ + (ref_bytes_ + kPage - 1) / kPage * kPage;
    ref_.resize(ref_bytes_);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (auto& b : ref_) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      b = static_cast<uint8_t>(x >> 24);
    }
    std::memcpy(ptr(srv_ref_), ref_.data(), ref_bytes_);
    for (uint32_t s = 0; s < kMaxSlots; ++s)
      for (uint32_t parity = 0; parity < 2; ++parity)
        std::memcpy(ptr(client_->pages[set_page(s, parity)]), pattern(s, parity), max_bytes);

    for (uint32_t r = 0; r < kMaxSlots; ++r) client_post_recv(r);
    for (uint32_t r = 0; r < 2 * kMaxSlots; ++r) server_post_recv(r);
    client().flush();
    server().flush();
  }

  win::PollCore& client() noexcept { return client_->core(); }
  win::PollCore& server() noexcept { return server_->core(); }
  uint64_t server_bytes_verified() const noexcept { return server_bytes_verified_; }

  // Setup path (before the group's run).
  uint32_t add_case(bool read, bool window) {
    cases_.push_back(Case{read, window});
    counts_.emplace_back();
    return static_cast<uint32_t>(cases_.size() - 1);
  }
  const CaseCounts& counts(uint32_t k) const noexcept { return counts_[k]; }
  bool broken() const noexcept { return broken_ != nullptr; }
  std::string why() const {
    return std::string(broken_) + " (xid " + std::to_string(broken_xid_) + ")";
  }
  // --corrupt: the first WRITE (read = false) or READ moves one wrong byte, the last.
  void corrupt_first(bool read) noexcept {
    corrupt_read_ = read;
    corrupt_armed_ = true;
  }

  // One RPC of case k over `pages` pages: waits for a free slot (depth), then issues it; at
  // depth 1, also waits for its completion.
  void op(uint32_t k, uint32_t pages) noexcept {
    // The first op of a case's turn waits for the previous case's RPCs: each case's figures are
    // its own RPCs (the wait falls in the warm-up, or in one chunk of the round).
    if (k != last_case_) {
      drain();
      last_case_ = k;
    }
    while (inflight_ >= depth_ && !broken()) pump();
    if (broken()) return;
    issue(k, pages);
    if (depth_ == 1)
      while (inflight_ > 0 && !broken()) pump();
  }
  void drain() noexcept {
    while (inflight_ > 0 && !broken()) pump();
  }

 private:
  static void* ptr(uint64_t a) noexcept { return reinterpret_cast<void*>(a); }
  uint32_t msg_pages() const noexcept { return 2 * kMaxSlots * kMsgBytes / kPage; }
  // The client's page set of slot s: 0/1 a WRITE's source by generation parity, 2 a READ's sink.
  uint32_t set_page(uint32_t s, uint32_t set) const noexcept {
    return msg_pages() + (s * 3 + set) * max_pages_;
  }
  // The pattern of slot s, generation parity `parity` (the client's copy).
  const uint8_t* pattern(uint32_t s, uint32_t parity) const noexcept {
    return ref_.data() + (parity * kMaxSlots + s) * kPatternStep;
  }
  static uint32_t slot_of(uint32_t xid) noexcept { return xid % kMaxSlots; }
  static uint32_t parity_of(uint32_t xid) noexcept { return (xid / kMaxSlots) & 1; }
  [[gnu::cold]] void fail(const char* why, uint32_t xid) noexcept {
    if (!broken_) {
      broken_ = why;
      broken_xid_ = xid;
    }
  }

  void client_post_recv(uint32_t r) noexcept {
    const Sge s{client_->ep.arena().base() + (kMaxSlots + r) * uint64_t{kMsgBytes}, kMsgBytes,
                client_->ep.arena().lkey()};
    if (client().post_recv({&s, 1}, cookie(kReplyRecv, r)) != Errc::kOk)
      fail("client receive refused", 0);
  }
  void server_post_recv(uint32_t r) noexcept {
    const Sge s{srv_base_ + r * uint64_t{kMsgBytes}, kMsgBytes, server_->ep.arena().lkey()};
    if (server().post_recv({&s, 1}, cookie(kCallRecv, r)) != Errc::kOk)
      fail("server receive refused", 0);
  }

  // ---- Client ----------------------------------------------------------------------------------
  void issue(uint32_t k, uint32_t pages) noexcept {
    const Case c = cases_[k];
    uint32_t s = 0;
    while (slots_[s].busy) ++s;  // inflight_ < depth_ <= kMaxSlots: one is free
    ClientSlot& cs = slots_[s];
    cs.busy = true;
    cs.retiring = false;
    cs.kase = k;
    cs.pages = pages;
    const uint32_t gen = ++cs.gen;
    const uint32_t xid = gen * kMaxSlots + s;
    const uint32_t bytes = pages * kPage;
    const uint32_t first = set_page(s, c.read ? 2 : parity_of(xid));
    Segment seg;
    if (c.window) {
      const uint32_t access =
          c.read ? mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite : mlx5::kAccessRemoteRead;
      std::span<const uint64_t> pg(client_->pages.data() + first, pages);
      for (;;) {
        const Errc e = cs.chunks.map(client(), pg, access, 0, bytes, &seg, counts_[k].chunks);
        if (e == Errc::kOk) break;
        if (e != Errc::kNoRoom && e != Errc::kBusy && e != Errc::kNoWindow) {
          fail("window map refused", xid);
          return;
        }
        pump();  // room, or a window, comes back with completions
        if (broken()) return;
      }
    } else {
      seg = Segment{client_->ep.arena().mr().rkey, bytes, client_->pages[first]};
    }
    // The transport header, then the NFSv3 call (the Header is reused: only the fields its
    // counts select are encoded).
    Header& h = out_;
    h.xid = xid;
    h.credits = depth_;
    h.proc = rpcrdma::Proc::kMsg;
    h.n_reads = h.n_writes = 0;
    h.has_reply = false;
    if (c.read) {
      h.n_writes = 1;
      h.writes[0].n_segments = 1;
      h.writes[0].segments[0] = seg;
    } else {
      h.n_reads = 1;
      h.reads[0] = rpcrdma::ReadSegment{kWriteDataPosition, seg};
    }
    uint8_t* buf = static_cast<uint8_t*>(ptr(client_->ep.arena().base() + s * uint64_t{kMsgBytes}));
    const rpcrdma::CodecResult e = rpcrdma::encode(h, {buf, kMsgBytes}, Role::kCall);
    if (!e.ok()) {
      fail("call header refused by encode", xid);
      return;
    }
    uint8_t* p = buf + e.length;
    for (uint32_t w : {xid, kRpcCall, kRpcVersion, kNfsProgram, kNfsVersion,
                       c.read ? kNfsRead : kNfsWrite, 0u, 0u, 0u, 0u})
      put32(p, w);
    put32(p, kFhBytes);
    std::memset(p, 0xfa, kFhBytes);  // the file handle
    p += kFhBytes;
    put64(p, uint64_t{gen} * bytes);  // offset
    put32(p, bytes);                  // count
    if (!c.read) {
      put32(p, kFileSync);
      put32(p, bytes);  // data<>: its length here, its bytes in the Read chunk
    }
    const Sge sge{reinterpret_cast<uint64_t>(buf), static_cast<uint32_t>(p - buf),
                  client_->ep.arena().lkey()};
    if (client().post_send({&sge, 1}, cookie(kCallSend, s)) != Errc::kOk) {
      fail("call send refused", xid);
      return;
    }
    client().flush();
    ++inflight_;
    ++counts_[k].issued;
  }

  // The reply landed in receive buffer r.
  void on_reply(const Completion& c) noexcept {
    const uint32_t r = static_cast<uint32_t>(c.cookie);
    const uint8_t* buf = static_cast<const uint8_t*>(
        ptr(client_->ep.arena().base() + (kMaxSlots + r) * uint64_t{kMsgBytes}));
    const rpcrdma::CodecResult d = rpcrdma::decode({buf, c.byte_len}, reply_, Role::kReply);
    if (!d.ok()) return fail("reply header refused by decode", 0);
    const uint32_t xid = reply_.xid;
    ClientSlot& cs = slots_[slot_of(xid)];
    if (!cs.busy || cs.retiring || xid != cs.gen * kMaxSlots + slot_of(xid))
      return fail("reply to no call in flight", xid);
    const Case k = cases_[cs.kase];
    const uint32_t bytes = cs.pages * kPage;
    const uint8_t* b = buf + d.length;
    const uint32_t want = k.read ? kReadResBytes : kWriteResBytes;
    if (reply_.proc != rpcrdma::Proc::kMsg || c.byte_len - d.length != want || get32(b) != xid ||
        get32(b + 4) != kRpcReply || get32(b + 8) != kMsgAccepted || get32(b + 20) != kSuccess ||
        get32(b + 24) != kNfs3Ok)
      return fail("malformed NFSv3 reply", xid);
    if (k.read ? (reply_.n_writes != 1 || reply_.writes[0].bytes() != bytes ||
                  get32(b + 32) != bytes || get32(b + 40) != bytes)
               : (reply_.n_writes != 0 || get32(b + 36) != bytes))
      return fail("the reply's count or Write chunk is not the call's", xid);
    // A SEND_WITH_INV must come exactly when a window was offered, naming it.
    const bool inv = c.cqe_opcode == MLX5_CQE_RESP_SEND_INV;
    if (inv != k.window || (inv && c.imm != cs.chunks.rkey(0)))
      return fail("the reply's invalidation does not name the call's window", xid);
    client_post_recv(r);
    client().flush();
    if (k.window) {
      // Remote invalidation agreed (RFC 8797): the window is free already, nothing posted.
      if (cs.chunks.retire(client(), &c, true, counts_[cs.kase].chunks) != Errc::kOk)
        return fail("retire refused", xid);
    }
    cs.retiring = true;
  }

  // A call whose reply came: complete once its chunk is retired (CallChunks::done), and the data
  // of a READ checked.
  void try_complete(uint32_t s) noexcept {
    ClientSlot& cs = slots_[s];
    const Case k = cases_[cs.kase];
    if (k.window) {
      if (!cs.chunks.done(client())) return;
      (void)cs.chunks.reset(client());
    }
    const uint32_t xid = cs.gen * kMaxSlots + s;
    const uint32_t bytes = cs.pages * kPage;
    if (k.read) {
      if (std::memcmp(ptr(client_->pages[set_page(s, 2)]), pattern(s, parity_of(xid)), bytes))
        return fail("data mismatch: a READ's payload differs from the server's", xid);
      counts_[cs.kase].bytes_verified += bytes;
    }
    cs.busy = cs.retiring = false;
    ++counts_[cs.kase].completed;
    --inflight_;
  }

  // ---- Server ----------------------------------------------------------------------------------
  void on_call(const Completion& c) noexcept {
    const uint32_t r = static_cast<uint32_t>(c.cookie);
    const uint8_t* buf = static_cast<const uint8_t*>(ptr(srv_base_ + r * uint64_t{kMsgBytes}));
    const rpcrdma::CodecResult d = rpcrdma::decode({buf, c.byte_len}, call_, Role::kCall);
    if (!d.ok()) return fail("call header refused by decode", 0);
    const uint32_t xid = call_.xid;
    const uint8_t* b = buf + d.length;
    const uint32_t len = c.byte_len - d.length;
    if (call_.proc != rpcrdma::Proc::kMsg || len < kReadArgsBytes || get32(b) != xid ||
        get32(b + 4) != kRpcCall || get32(b + 8) != kRpcVersion || get32(b + 12) != kNfsProgram ||
        get32(b + 16) != kNfsVersion)
      return fail("malformed NFSv3 call", xid);
    const uint32_t proc = get32(b + 20);
    const uint32_t count = get32(b + kReadArgsBytes - 4);
    ServerSlot& ss = srv_[slot_of(xid)];
    ss.xid = xid;
    ss.bytes = count;
    if (proc == kNfsWrite && len == kWriteArgsBytes && call_.n_reads == 1 && call_.n_writes == 0 &&
        call_.reads[0].position == kWriteDataPosition && call_.reads[0].target.length == count &&
        get32(b + kWriteArgsBytes - 4) == count && count <= max_pages_ * kPage) {
      ss.read = false;
      ss.seg = call_.reads[0].target;
    } else if (proc == kNfsRead && len == kReadArgsBytes && call_.n_reads == 0 &&
               call_.n_writes == 1 && call_.writes[0].n_segments == 1 &&
               call_.writes[0].segments[0].length == count && count <= max_pages_ * kPage) {
      ss.read = true;
      ss.seg = call_.writes[0].segments[0];
    } else {
      return fail("an NFSv3 call this server does not serve", xid);
    }
    // A window's rkey differs from the arena's: that is how the server knows to invalidate it
    // (a real server remembers the handles of the call it is answering).
    ss.window = ss.seg.handle != client_->ep.arena().mr().rkey;
    server_post_recv(r);
    const uint32_t s = slot_of(xid);
    uint64_t src = srv_ref_ + (parity_of(xid) * kMaxSlots + s) * uint64_t{kPatternStep};
    if (ss.read) {
      if (corrupt_armed_ && corrupt_read_) {  // --corrupt read: one wrong byte, the last
        corrupt_armed_ = false;
        std::memcpy(ptr(srv_scratch_), ptr(src), count);
        static_cast<uint8_t*>(ptr(srv_scratch_))[count - 1] ^= 0x01;
        src = srv_scratch_;
      }
      // The data, then the reply on the same QP: RC delivers them in order (RFC 8166 section
      // 3.4.6; Linux svc_rdma_sendto posts the Write chunk's WRITEs before the reply).
      const Sge l{src, count, server_->ep.arena().lkey()};
      if (server().post_write({&l, 1}, ss.seg.offset, ss.seg.handle, cookie(kSrvWrite, s)) !=
          Errc::kOk)
        return fail("server RDMA WRITE refused", xid);
      send_reply(s);
    } else {
      const Sge l{srv_sink_ + s * uint64_t{max_pages_} * kPage, count, server_->ep.arena().lkey()};
      if (server().post_read({&l, 1}, ss.seg.offset, ss.seg.handle, cookie(kSrvRead, s), true) !=
          Errc::kOk)
        return fail("server RDMA READ refused", xid);
    }
    server().flush();
  }

  // A WRITE's data arrived in the server's sink: check it, then reply.
  void on_read_done(uint32_t s) noexcept {
    ServerSlot& ss = srv_[s];
    uint8_t* sink = static_cast<uint8_t*>(ptr(srv_sink_ + s * uint64_t{max_pages_} * kPage));
    if (corrupt_armed_ && !corrupt_read_) {  // --corrupt write: as if one byte changed in flight
      corrupt_armed_ = false;
      sink[ss.bytes - 1] ^= 0x01;
    }
    const uint8_t* want = static_cast<const uint8_t*>(
        ptr(srv_ref_ + (parity_of(ss.xid) * kMaxSlots + s) * uint64_t{kPatternStep}));
    if (std::memcmp(sink, want, ss.bytes))
      return fail("data mismatch: a WRITE's payload differs from the client's", ss.xid);
    server_bytes_verified_ += ss.bytes;
    send_reply(s);
    server().flush();
  }

  void send_reply(uint32_t s) noexcept {
    ServerSlot& ss = srv_[s];
    Header& h = out_;
    h.xid = ss.xid;
    h.credits = depth_;
    h.proc = rpcrdma::Proc::kMsg;
    h.n_reads = h.n_writes = 0;
    h.has_reply = false;
    if (ss.read) {  // the Write chunk back, with the length written (RFC 8166 section 3.4.6)
      h.n_writes = 1;
      h.writes[0].n_segments = 1;
      h.writes[0].segments[0] = ss.seg;
      h.writes[0].segments[0].length = ss.bytes;
    }
    uint8_t* buf =
        static_cast<uint8_t*>(ptr(srv_base_ + (2 * kMaxSlots + s) * uint64_t{kMsgBytes}));
    const rpcrdma::CodecResult e = rpcrdma::encode(h, {buf, kMsgBytes}, Role::kReply);
    if (!e.ok()) return fail("reply header refused by encode", ss.xid);
    uint8_t* p = buf + e.length;
    for (uint32_t w : {ss.xid, kRpcReply, kMsgAccepted, 0u, 0u, kSuccess, kNfs3Ok}) put32(p, w);
    if (ss.read) {
      for (uint32_t w : {0u, ss.bytes, 0u, ss.bytes}) put32(p, w);  // attrs, count, eof, data<>
    } else {
      for (uint32_t w : {0u, 0u, ss.bytes, kFileSync}) put32(p, w);  // wcc_data, count, committed
      put64(p, 0x7264'6d78'7276'6572ull);                            // writeverf3
    }
    const Sge l{reinterpret_cast<uint64_t>(buf), static_cast<uint32_t>(p - buf),
                server_->ep.arena().lkey()};
    const Errc r = ss.window ? server().post_send_inv({&l, 1}, ss.seg.handle, cookie(kSrvReply, s))
                             : server().post_send({&l, 1}, cookie(kSrvReply, s));
    if (r != Errc::kOk) fail("server reply refused", ss.xid);
  }

  // Polls the server's core, then the client's, then completes what can be completed.
  void pump() noexcept {
    server().poll(32, [&](const Completion& c) {
      if (!c.ok()) return fail("a server completion in error", static_cast<uint32_t>(c.cookie));
      const uint64_t kind = c.cookie >> 32;
      if (kind == kCallRecv)
        on_call(c);
      else if (kind == kSrvRead)
        on_read_done(static_cast<uint32_t>(c.cookie));
    });
    client().poll(32, [&](const Completion& c) {
      if (!c.ok()) return fail("a client completion in error", static_cast<uint32_t>(c.cookie));
      if ((c.cookie >> 32) == kReplyRecv) on_reply(c);
    });
    for (uint32_t s = 0; s < kMaxSlots; ++s)
      if (slots_[s].retiring) try_complete(s);
  }

  uint32_t depth_;
  uint32_t max_pages_;
  std::unique_ptr<Node> client_, server_;
  std::vector<uint8_t> ref_;
  size_t ref_bytes_ = 0;
  uint64_t srv_base_ = 0, srv_sink_ = 0, srv_ref_ = 0, srv_scratch_ = 0;
  ClientSlot slots_[kMaxSlots];
  ServerSlot srv_[kMaxSlots];
  std::vector<Case> cases_;  // by case index (every size's group adds its four)
  std::vector<CaseCounts> counts_;
  uint32_t inflight_ = 0;
  uint32_t last_case_ = 0;
  // Decoded into and encoded from in place (about 1.7 KiB each: reused, not one per call).
  Header call_, reply_, out_;
  const char* broken_ = nullptr;
  uint32_t broken_xid_ = 0;
  uint64_t server_bytes_verified_ = 0;
  bool corrupt_armed_ = false, corrupt_read_ = false;
};

// One size's group: READ and WRITE, each through a window and register-once; ks gets the rig's
// case index of each bench, in order.
std::vector<std::unique_ptr<Bench>> rpc_group(RpcRig& rig, uint32_t pages, uint32_t depth,
                                              std::vector<uint32_t>& ks) {
  std::vector<std::unique_ptr<Bench>> g;
  for (int read = 0; read < 2; ++read)
    for (int window = 1; window >= 0; --window) {
      const uint32_t k = rig.add_case(read, window);
      ks.push_back(k);
      CaseResult m;
      m.name = std::string("rpc.") + (read ? "read" : "write") +
               (window ? ".window" : ".register_once") + ".p" + std::to_string(pages);
      m.role = window ? "rdmx" : "peer";
      m.unit = "RPC";
      m.pages = pages;
      m.bytes = uint64_t{pages} * kPage;
      m.depth = depth;
      g.push_back(make_bench(std::move(m), [&rig, k, pages] { rig.op(k, pages); }));
    }
  return g;
}

// res: write.window, write.register_once, read.window, read.register_once. Each case's RPC and
// chunk counts (every RPC issued must have completed), (bw) its bandwidth, and the window's
// overhead over register-once. Adds the RPCs to *issued and *completed.
void add_rpc_figures(std::vector<CaseResult>& res, RpcRig& rig, const std::vector<uint32_t>& ks,
                     uint64_t bytes, uint32_t depth, bool bw, uint64_t* issued,
                     uint64_t* completed) {
  for (size_t i = 0; i < res.size(); ++i) {
    const CaseCounts& n = rig.counts(ks[i]);
    if (n.completed != n.issued)
      throw std::runtime_error(res[i].name + ": " + std::to_string(n.issued) + " RPCs issued, " +
                               std::to_string(n.completed) + " completed");
    *issued += n.issued;
    *completed += n.completed;
    CaseResult& c = res[i];
    c.extra.push_back({"rpcs_issued", static_cast<double>(n.issued)});
    c.extra.push_back({"rpcs_completed", static_cast<double>(n.completed)});
    c.extra.push_back({"maps", static_cast<double>(n.chunks.maps)});
    c.extra.push_back({"remote_invalidations", static_cast<double>(n.chunks.remote_invalidations)});
    c.extra.push_back({"local_invalidations", static_cast<double>(n.chunks.local_invalidations)});
    if (bw) c.bw_mb_s = static_cast<double>(bytes) * c.ops_per_s / (1 << 20);
  }
  for (size_t k : {0, 2}) {
    // Depth 1: round trips, compared at p50 (the means carry the device threads'
    // preemptions); depth 32: throughput, by the median of the chunks' means.
    const bool p50 = depth == 1;
    add_ratio(res[k], res[k + 1], p50);
    const double ov = p50 ? res[k].lat.p50_ns - res[k + 1].lat.p50_ns : res[k].ns - res[k + 1].ns;
    res[k].extra.push_back({"window_overhead_ns", ov});
  }
}

}  // namespace

TestResult test_rpc(Ctx& ctx, bool bw) {
  TestResult t;
  t.test = bw ? "rpc_bw" : "rpc_lat";
  t.bandwidth = bw;
  const uint32_t depth = bw ? kMaxSlots : 1;
  const std::vector<uint32_t> sizes = ctx.pages.empty() ? std::vector<uint32_t>{1, 16} : ctx.pages;
  uint32_t max_pages = 1;
  for (uint32_t p : sizes) max_pages = std::max(max_pages, p);

  RpcRig rig(ctx, depth, max_pages);
  if (!ctx.corrupt.empty()) rig.corrupt_first(ctx.corrupt == "read");

  uint64_t total_issued = 0, total_completed = 0;
  for (uint32_t pages : sizes) {
    std::vector<uint32_t> ks;
    auto g = rpc_group(rig, pages, depth, ks);
    RunConfig rc = ctx.rc;  // an RPC costs about as much as an io_lat I/O: the same tenth
    rc.iterations = std::max<uint64_t>(1, rc.iterations / 10);
    rc.warmup = std::max<uint64_t>(1, rc.warmup / 10);
    auto res = run_group(rc, g);
    rig.drain();
    if (rig.broken()) throw std::runtime_error(rig.why() + "; no figure is reported");
    add_rpc_figures(res, rig, ks, uint64_t{pages} * kPage, depth, bw, &total_issued,
                    &total_completed);
    for (auto& c : res) t.cases.push_back(std::move(c));
  }
  rig.client().quiesce();
  const win::CoreCounts cs = win::snapshot(rig.client().stats());
  t.notes.push_back("depth " + std::to_string(depth) +
                    "; client and server are two poll cores of the measuring "
                    "lcore (CPU " +
                    std::to_string(ctx.measure_cpu) + "), both device threads on CPU " +
                    std::to_string(ctx.device_cpu) + "; " + std::to_string(total_issued) +
                    " RPCs issued, " + std::to_string(total_completed) +
                    " completed (warm-up and stamped phases included), client "
                    "maps " +
                    std::to_string(cs.maps) + ", unmaps " + std::to_string(cs.unmaps) +
                    ", payload bytes verified by the server " +
                    std::to_string(rig.server_bytes_verified()));
  t.notes.push_back(
      "one op = one NFSv3 READ or WRITE over RPC-over-RDMA v1, from the call to the reply handed "
      "up (window: its chunk retired by the reply's SEND_WITH_INV); window_overhead_ns = window - "
      "register_once; every payload byte is compared with the expected pattern in both modes "
      "(one memcmp per RPC, in the figures); the emulated devices move bytes with memcpy on "
      "another CPU, so absolute times are the emulator's, the difference is rdmx's");
  return t;
}

}  // namespace rdmx::perf
