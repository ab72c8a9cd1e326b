// --fwd rpc: NFSv3 READ and WRITE over RPC-over-RDMA version 1 (RFC 8166, lib/rpcrdma), bound
// as RFC 8267 says, each message an ONC RPC v2 call or reply (engines/nfs_wire.hpp).
//
// Client (core c), per call: take a slot, map its chunk pages into a window (one UMR) as the
// call's chunk (rpcrdma::CallChunks), SEND the call on the same SQ (ordered after the UMR).
// Calls alternate: a READ offers the window as a Write chunk (the server RDMA-WRITEs the file's
// bytes into it), a WRITE as a Read chunk at the data's XDR position (the server RDMA-READs
// them). xid = the call's sequence number (low 32 bits); credits asked = io-depth; the client
// never has more calls without a reply than the server granted (RFC 8166 3.3.1: one until the
// first reply). On the reply: decode, match the xid to its slot, retire the call's windows
// (CallChunks::retire: nothing to post when the reply came as SEND_WITH_INV naming the window,
// a local invalidate otherwise), and complete the I/O only once they are invalid on the device
// (CallChunks::done): until then the server could still reach the slot's memory.
//
// Server (core p): the "file" is its memory, a client slot s at offset s x io bytes (READ reads
// its source buffers, WRITE lands in its destination buffers). A call's transport header is
// decoded (Role::kCall); one the codec refuses is answered with RDMA_ERROR (ERR_VERS for another
// version, ERR_CHUNK otherwise) and the client served on; so is a call with another file handle
// than the one the server handed out at setup, answered NFS3ERR_BADHANDLE; a call that breaks
// peer_checks.hpp's other rules drops the client. The server moves exactly count (+ metadata)
// bytes between the file and the client's segment, and replies, as SEND_WITH_INV naming the
// segment's handle when the client offered remote invalidation (RFC 8797; setup.cpp carries
// both sides' private data), granting credits from its receive slots posted.
//
// Verification (unless --no-verify): each payload's first kHdr bytes (outside the checksum)
// carry the sequence number and the checksum of the rest: the client's for a WRITE (the server
// checks what it read, and answers NFS3ERR_IO on a mismatch), the server's for a READ (the
// client checks what landed). --corrupt-every N (tests) makes the server flip one payload byte
// every N calls.
//
// --metadata BYTES: every page-sized block of a slot carries BYTES of metadata kept in an array
// of its own (as a storage target keeps protection information). The client maps the slot's data
// and metadata into one interleaved window (block, its metadata, next block, ...) as one chunk
// segment; the server maps its own buffers the same way and moves both with the one WRITE or
// READ. The metadata of block r is tagged {r, seq} (and a pattern): the server checks what it
// read, the client what the server wrote.
#include <algorithm>
#include <array>
#include <cstring>

#include <infiniband/mlx5dv.h>

#include <rdmx/endpoint/session.hpp>
#include <rdmx/rpcrdma/cm_private.hpp>

#include "common.hpp"
#include "nfs_wire.hpp"
#include "peer_checks.hpp"

namespace rdmafwd {
namespace {

namespace rr = rdmx::rpcrdma;

constexpr uint32_t kRpcAccess =
    mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead;

// RFC 8797: each side's view of the agreement (Lane::rpc) comes from setup.cpp, which carries
// both sides' private data in the session's hello and welcome (in one process: both offers):
// l.rpc.client on the client's core, l.rpc.server on the server's.

// What a finished call's reply said (Lane::Slot::expect_a on the client).
// kReplyBadHandle: a call sent with a forged file handle (--forge-handle-every, tests) was
// answered NFS3ERR_BADHANDLE, as it must be.
constexpr uint8_t kReplyGood = 0, kReplyNfsError = 1, kReplyBad = 2, kCallAbandoned = 3,
                  kReplyBadHandle = 4;
static_assert(sizeof(RpcAgreed::fh) == nfs::kFhMaxBytes);

uint64_t req_buf(const Lane& l, uint32_t slot) {
  return l.c_small + uint64_t{slot} * kSmall;
}
uint64_t reply_recv_buf(const Lane& l, uint32_t k) {
  return l.c_small + uint64_t{l.depth + k} * kSmall;
}
// --forge-twin-every (tests): the second request of a slot's call.
uint64_t twin_req_buf(const Lane& l, uint32_t slot) {
  return l.c_small + uint64_t{2 * l.depth + slot} * kSmall;
}
uint64_t srv_reply_buf(const Lane& l, uint32_t slot) {
  return l.p_small + uint64_t{slot} * kSmall;
}
// A reply that belongs to no slot (RDMA_ERROR, NFS3ERR_BADHANDLE, the goodbye's): the second
// half of p_small, by the receive slot k of the call it answers (k < p_recv_n = depth: an rpc
// lane's receive slots). See hold_extra: one such reply per receive slot at a time.
uint64_t srv_extra_buf(const Lane& l, uint32_t k) {
  return l.p_small + uint64_t{l.depth + k} * kSmall;
}
std::span<uint8_t> small_span(uint64_t addr) {
  return {reinterpret_cast<uint8_t*>(addr), kSmall};
}

// ---- metadata (--metadata) ----------------------------------------------------------------------
// Block r's metadata: {u32 r, u32 seq}, then bytes (seq + r + i) for the rest.
void md_fill(uint64_t addr, uint32_t md, uint32_t blocks, uint64_t seq) {
  auto* p = reinterpret_cast<uint8_t*>(addr);
  for (uint32_t r = 0; r < blocks; ++r, p += md) {
    const uint32_t tag[2] = {r, static_cast<uint32_t>(seq)};
    std::memcpy(p, tag, sizeof tag);
    for (uint32_t i = sizeof tag; i < md; ++i) p[i] = static_cast<uint8_t>(seq + r + i);
  }
}

bool md_ok(uint64_t addr, uint32_t md, uint32_t blocks, uint64_t seq) {
  const auto* p = reinterpret_cast<const uint8_t*>(addr);
  for (uint32_t r = 0; r < blocks; ++r, p += md) {
    uint32_t tag[2];
    std::memcpy(tag, p, sizeof tag);
    if (tag[0] != r || tag[1] != static_cast<uint32_t>(seq)) return false;
    for (uint32_t i = sizeof tag; i < md; ++i)
      if (p[i] != static_cast<uint8_t>(seq + r + i)) return false;
  }
  return true;
}

// An interleaved window over `blocks` page-sized blocks of contiguous data at `data` and their
// metadata at `meta`.
// `access`: the client's window is the peer's target; the server's is its own local key only.
win::MapResult map_with_md(win::PollCore& c, uint64_t data, uint64_t meta, uint32_t page_size,
                           uint32_t md, uint32_t blocks, uint32_t access) {
  const win::InterleavedPart parts[2] = {{data, page_size, 0}, {meta, md, 0}};
  return c.map_interleaved(parts, blocks, access);
}

// Client: each slot's source checksum, its call chunks, no call outstanding, one credit.
void client_start(Lane& l) {
  RpcClientState& cs = l.rpc_client;
  for (uint32_t i = 0; i < l.depth; ++i)
    l.csums[i] = csum_pages(l.c_src.slot(i), l.page_size, io_len(l));
  cs.calls.assign(l.depth, rr::CallChunks{});  // setup path: allocates on the first run only
  cs.retiring.assign(l.depth, 0);
  cs.retiring_head = cs.retiring_n = 0;
  cs.granted = 1;  // RFC 8166 3.3.1: one call until the server's first grant
  cs.outstanding = 0;
}

// Server: each slot's source checksum, no call outstanding or waiting, nothing held.
void server_start(Lane& l) {
  RpcServerState& ss = l.rpc_server;
  for (uint32_t i = 0; i < l.depth; ++i)
    l.csums[l.depth + i] = csum_range(l.p_src.slot(i)[0], io_len(l));
  ss.outstanding = 0;
  ss.granted = 1;                   // RFC 8166 3.3.1: one call until the first reply's grant
  ss.p_recv_held = 0;               // every receive slot was posted (setup, recovery)
  ss.extra_end.assign(l.depth, 0);  // setup path: allocates on the first run only
  ss.reply_end.assign(l.depth, 0);
  ss.waiting.assign(l.depth, RpcServerState::WaitingCall{});
  ss.waiting_for.assign(l.depth, 0);
  ss.waiting_head = ss.n_waiting = 0;
}

bool start(Lane& l) {
  reset_slots(l);
  if (l.c) client_start(l);
  if (l.p) server_start(l);
  return true;
}

// ---- server ------------------------------------------------------------------------------------
// --corrupt-every: one byte of the payload, or with --metadata of its metadata (so that the
// metadata check is what must catch it).
void flip(Lane& l, uint32_t s, bool dst) {
  const uint32_t len = l.srv[s].len;
  const uint32_t md_len = len / l.page_size * l.cfg.metadata;
  auto* b =
      l.cfg.metadata
          ? reinterpret_cast<uint8_t*>((dst ? l.p_md_dst : l.p_md_src).slot(s)[0]) + md_len / 2
          : reinterpret_cast<uint8_t*>((dst ? l.p_dst : l.p_src).slot(s)[0]) + len / 2;
  *b ^= 0x5a;
}

// Slot s's reply buffer is still being sent: its last reply's SEND has not completed (the
// device may read it again, to send it again after a lost acknowledgement).
bool reply_in_flight(const Lane& l, uint32_t s) {
  return l.p->qp().sq().ci() < l.rpc_server.reply_end[s];
}

// The credits the server grants in a reply: its receive slots posted for the client (RFC 8166
// 3.3.1): io-depth, less those held under a reply that belongs to no slot (hold_extra). Calls
// are checked against the grant the client goes by: the one in the last reply (RFC 8166 3.3.1:
// credits are granted in each reply; one until the first), not what the server could grant
// now, and a grant of 0 counted as 1 as the client counts it (Linux net/sunrpc/xprtrdma/
// rpc_rdma.c, rpcrdma_reply_handler: "don't deadlock").
uint32_t grant(Lane& l) {
  const uint32_t credits = std::min(l.depth, l.p_recv_n - l.rpc_server.p_recv_held);
  l.rpc_server.granted = std::max(credits, 1u);
  return credits;
}

// A reply that belongs to no slot is written into the extra buffer of the receive slot k its
// call came in, and k is posted again only once that reply's SEND completed (release_extra,
// from server_poll): until then no call can land in k, so no later reply is written into the
// buffer while the device may still read it (to send, or to send again after a lost
// acknowledgement). Without the hold it could: the client may send its next call as soon as it
// has this reply, before this side polled the SEND's completion; a client that ignores its
// credits, sooner still, while the SEND is not even sent. Returns the buffer; a buffer written
// while its previous SEND had not completed is counted as an I/O error (never, with the hold).
std::span<uint8_t> hold_extra(Lane& l, uint32_t k) {
  ++l.rpc_server.p_recv_held;
  if (l.p->qp().sq().ci() < l.rpc_server.extra_end[k]) l.st.io_errors.add(1);
  return small_span(srv_extra_buf(l, k));
}
void release_extra(Lane& l, uint32_t k) {
  --l.rpc_server.p_recv_held;
  if (Errc e = post_slot_recv(*l.p, l.p_recv, k, l.page_size, l.lkey_b, kCkReqRecv); e != Errc::kOk)
    note_reject(l, e);
}
// Sends `bytes` of slot k's extra buffer, signaled (its completion releases k).
void send_extra(Lane& l, uint32_t k, uint32_t bytes) {
  const mlx5::prm::Sge sg = sge(srv_extra_buf(l, k), bytes, l.lkey_b);
  const Errc e = l.p->post_send({&sg, 1}, cookie(kCkSrvReply, l.depth + k), true);
  if (e != Errc::kOk) {
    note_reject(l, e);
    io_failed(l);
    release_extra(l, k);
    return;
  }
  l.rpc_server.extra_end[k] = l.p->qp().sq().pi();
}

// SENDs `bytes` of `buf`, signaled (its completion frees the buffer, reply_in_flight): as
// SEND_WITH_INV naming `inv_rkey` when it is not 0.
bool server_send(Lane& l, uint64_t buf, uint32_t bytes, uint32_t inv_rkey, uint64_t ck) {
  const mlx5::prm::Sge sg = sge(buf, bytes, l.lkey_b);
  const Errc e = inv_rkey ? l.p->post_send_inv({&sg, 1}, inv_rkey, ck, true)
                          : l.p->post_send({&sg, 1}, ck, true);
  if (e != Errc::kOk) {
    note_reject(l, e);
    io_failed(l);
    return false;
  }
  return true;
}

// The reply to slot s's call: RDMA_MSG echoing the Write chunk with the bytes written (READ,
// RFC 8166 3.6), the ONC RPC accepted reply and the NFSv3 results.
void server_reply(Lane& l, uint32_t s, uint32_t status, const rr::Segment* written) {
  Lane::Slot& v = l.srv[s];
  if (reply_in_flight(l, s)) l.st.io_errors.add(1);  // never: server_request holds such a call
  rr::Header h;
  h.xid = static_cast<uint32_t>(v.seq);
  h.credits = grant(l);
  h.proc = rr::Proc::kMsg;
  if (written) {
    h.n_writes = 1;
    h.writes[0].n_segments = 1;
    h.writes[0].segments[0] = *written;
  }
  const std::span<uint8_t> buf = small_span(srv_reply_buf(l, s));
  const rr::CodecResult r = rr::encode(h, buf, rr::Role::kReply, l.rpc.server.inline_send);
  nfs::Reply rep;
  rep.xid = h.xid;
  rep.status = status;
  rep.count = v.len;
  rep.eof = false;
  rep.data_len = v.len;
  rep.committed = nfs::kFileSync;
  const uint32_t m = r.ok() ? nfs::encode_reply(v.op, rep, buf.subspan(r.length)) : 0;
  --l.rpc_server.outstanding;
  if (m == 0) {  // the sizes are fixed (kSmall fits every reply): never here
    l.st.io_errors.add(1);
    return;
  }
  // The segment's handle names the client's window: invalidated by the reply when the client
  // offered its memory to remote invalidation (RFC 8797 section 4); a plain SEND otherwise, and
  // the client invalidates its window itself.
  const uint32_t inv = l.rpc.server.may_invalidate_peer ? v.rkey : 0;
  if (!server_send(l, srv_reply_buf(l, s), r.length + m, inv, cookie(kCkSrvReply, s))) return;
  l.rpc_server.reply_end[s] = l.p->qp().sq().pi();
  if (l.remote_client) io_done(l, v.tsc, rte_rdtsc(), v.len);  // served (two-process server)
}

bool corrupt_now(Lane& l) {
  return l.cfg.corrupt_every && (++l.rpc_server.count % l.cfg.corrupt_every) == 0;
}

// A call that breaks peer_checks.hpp's rules: counted and the lane serves its client no more
// (it stops reposting receives and reading calls); the main thread names the client in one
// line and cuts its QP off (main.cpp, police_peers).
void refuse_request(Lane& l, RpcVerdict v) {
  l.st.refused_requests.add(1);
  l.st.refused_why.set(static_cast<uint64_t>(v));
  l.refusing = true;
}

// A header the codec refused (RFC 8166 4.5): RDMA_ERROR to its xid, ERR_VERS for another
// version, ERR_CHUNK for anything else; the client is served on.
void server_error_reply(Lane& l, uint32_t k, std::span<const uint8_t> msg, rr::Error why) {
  uint32_t xid = 0;
  if (!rr::peek_xid(msg, &xid)) {  // not even an xid to answer
    refuse_request(l, RpcVerdict::kRpc);
    return;
  }
  const std::span<uint8_t> buf = hold_extra(l, k);
  const rr::Header h = rr::error_reply(
      xid, grant(l), why == rr::Error::kBadVersion ? rr::ErrCode::kVers : rr::ErrCode::kChunk);
  const rr::CodecResult r = rr::encode(h, buf, rr::Role::kReply);
  if (!r.ok()) {  // never: an error reply is 28 bytes
    release_extra(l, k);
    return;
  }
  send_extra(l, k, r.length);
}

// A call with another file handle than the one this server handed out: NFS3ERR_BADHANDLE in a
// well-formed reply (RDMA_MSG without chunks, the accepted RPC reply, the procedure's failed
// result), and the client served on: as for an NFS server, a handle it does not know is the
// caller's error, not a breach of the protocol. Nothing of the call's chunks is touched, so the
// reply is a plain SEND: the client invalidates its windows itself.
void server_bad_handle(Lane& l, uint32_t k, const nfs::Call& call) {
  l.st.bad_handles.add(1);
  const std::span<uint8_t> buf = hold_extra(l, k);
  rr::Header rh;
  rh.xid = call.xid;
  rh.credits = grant(l);
  const rr::CodecResult e = rr::encode(rh, buf, rr::Role::kReply, l.rpc.server.inline_send);
  nfs::Reply rep;
  rep.xid = call.xid;
  rep.status = nfs::kNfs3ErrBadHandle;
  const uint32_t m = e.ok() ? nfs::encode_reply(call.proc, rep, buf.subspan(e.length)) : 0;
  if (m == 0) {  // never: kSmall holds it
    release_extra(l, k);
    return;
  }
  send_extra(l, k, e.length + m);
}

// NULL's reply (the client's goodbye): the accepted header, no results.
void server_bye_reply(Lane& l, uint32_t k, uint32_t xid) {
  l.st.peer_bye.set(1);
  rr::Header rh;
  rh.xid = xid;
  rh.credits = grant(l);
  const std::span<uint8_t> buf = hold_extra(l, k);
  const rr::CodecResult e = rr::encode(rh, buf, rr::Role::kReply);
  nfs::Reply rep;
  rep.xid = xid;
  const uint32_t m = e.ok() ? nfs::encode_reply(nfs::kProcNull, rep, buf.subspan(e.length)) : 0;
  if (m)
    send_extra(l, k, e.length + m);
  else
    release_extra(l, k);
}

// A call accepted that cannot be served (its window or its RDMA WRITE / READ refused): it gets
// no reply, so it is no longer outstanding, and the lane fails (the runner recovers it).
void call_failed(Lane& l, Errc e) {
  note_reject(l, e);
  --l.rpc_server.outstanding;
  io_failed(l);
}

// With metadata, the local side: the slot's data and metadata behind one window of this core.
bool server_map_md(Lane& l, uint32_t s, bool rd, uint32_t xid, uint32_t blocks) {
  win::PollCore& p = *l.p;
  const uint32_t md = l.cfg.metadata;
  if (rd)
    md_fill(l.p_md_src.slot(s)[0], md, blocks, xid);
  else
    std::memset(reinterpret_cast<void*>(l.p_md_dst.slot(s)[0]), 0, size_t{blocks} * md);
  const win::MapResult m =
      map_with_md(p, (rd ? l.p_src : l.p_dst).slot(s)[0], (rd ? l.p_md_src : l.p_md_dst).slot(s)[0],
                  l.page_size, md, blocks, mlx5::kAccessLocalWrite);
  if (!m.ok()) {
    call_failed(l, m.errc);
    return false;
  }
  l.srv[s].w = m.window;
  return true;
}

// READ: the payload written into the client's Write chunk, then the reply.
void server_read(Lane& l, uint32_t s, const rr::Segment& seg, uint32_t xid, uint32_t count,
                 const mlx5::prm::Sge& sg, uint32_t wire) {
  win::PollCore& p = *l.p;
  Lane::Slot& v = l.srv[s];
  auto* ph = reinterpret_cast<PayloadHdr*>(l.p_src.slot(s)[0]);
  ph->magic = kPayloadMagic;
  ph->seq = xid;
  ph->slot = s;
  ph->len = count;
  const Csum cs = count == io_len(l) ? l.csums[l.depth + s] : csum_range(l.p_src.slot(s)[0], count);
  ph->csum_a = cs.a;
  ph->csum_b = cs.b;
  if (corrupt_now(l)) {
    flip(l, s, false);
    v.op = 0xff;
    l.st.corrupted.add(1);
  }
  const Errc e = p.post_write({&sg, 1}, seg.offset, seg.handle, cookie(kCkSrvWrite, s));
  if (e != Errc::kOk) {
    call_failed(l, e);
    return;
  }
  const uint8_t op = v.op;
  v.op = nfs::kProcRead;
  rr::Segment written = seg;
  written.length = wire;
  server_reply(l, s, nfs::kNfs3Ok, &written);  // same SQ: ordered after the payload
  v.op = op;  // 0xff: the source is corrupted (undone before the slot's next call)
  // The window may go at once: its invalidate waits (fenced) for the WRITE that gathers
  // from it (PollCore::unmap).
  if (v.w && p.unmap(v.w) != Errc::kOk) io_failed(l);
  v.w = nullptr;
}

// WRITE: the client's Read chunk read into the slot; the reply when the READ completed.
void server_write(Lane& l, uint32_t s, const rr::Segment& seg, const mlx5::prm::Sge& sg) {
  win::PollCore& p = *l.p;
  Lane::Slot& v = l.srv[s];
  const Errc e = p.post_read({&sg, 1}, seg.offset, seg.handle, cookie(kCkSrvRead, s), true);
  if (e != Errc::kOk) {
    call_failed(l, e);
    return;
  }
  v.busy = true;  // until its READ completed (server_read_done): the slot is in use
}

// Slot s can take a call: no WRITE's RDMA READ into it runs, its reply buffer is not being sent.
bool slot_free(const Lane& l, uint32_t s) {
  return !l.srv[s].busy && !reply_in_flight(l, s);
}

// Queues a call for a slot in service. The FIFO holds io-depth: calls received and not answered
// are fewer than the credits granted (check_rpc_call), so it is never full.
void wait_call(Lane& l, const RpcServerState::WaitingCall& w) {
  if (l.rpc_server.n_waiting == l.depth) {  // never
    refuse_request(l, RpcVerdict::kCredits);
    return;
  }
  l.rpc_server.waiting[(l.rpc_server.waiting_head + l.rpc_server.n_waiting++) % l.depth] = w;
  ++l.rpc_server.waiting_for[w.slot];
  l.st.calls_waited.add(1);
}

// Serves a call accepted for slot s (server_request, or serve_waiting once the slot's last reply
// was sent): moves the payload and replies.
void serve_call(Lane& l, uint32_t s, const rr::Segment& seg, uint32_t xid, uint32_t count,
                uint32_t proc, uint64_t now) {
  Lane::Slot& v = l.srv[s];
  if (v.op == 0xff) flip(l, s, false);  // undo the previous corruption of this slot's source
  const bool rd = proc == nfs::kProcRead;
  v.seq = xid;
  v.rkey = seg.handle;
  v.len = count;
  v.op = static_cast<uint8_t>(proc);
  v.tsc = now;
  // Two processes: a request accepted is the server's I/O (served by server_reply), so that
  // issued = completed + failed + abandoned holds on this side too.
  if (l.remote_client) ++l.issued;
  const uint32_t md = l.cfg.metadata;
  const uint32_t blocks = count / l.page_size;
  v.w = nullptr;
  if (md && !server_map_md(l, s, rd, xid, blocks)) return;
  // With metadata the local SGE is the window (iova 0, data + metadata interleaved).
  const RpcLimits lim{l.depth, io_len(l), l.page_size, md, 0, {}};
  const uint32_t wire = static_cast<uint32_t>(rpc_wire_bytes(count, lim));
  auto local = [&](const SlotBufs& b) {
    return v.w ? sge(0, wire, v.w->lkey()) : sge(b.slot(s)[0], count, l.lkey_b);
  };
  if (rd)
    server_read(l, s, seg, xid, count, local(l.p_src), wire);
  else
    server_write(l, s, seg, local(l.p_dst));
}

void server_request(Lane& l, uint32_t k, uint32_t byte_len, uint64_t now) {
  win::PollCore& p = *l.p;
  if (l.refusing) return;  // its client is being dropped: nothing more of it is read
  const std::span<const uint8_t> msg(reinterpret_cast<const uint8_t*>(l.p_recv.slot(k)[0]),
                                     std::min(byte_len, l.p_recv.per_slot * l.page_size));
  rr::Header h;
  const rr::CodecResult r = rr::decode(msg, h, rr::Role::kCall, l.rpc.server.inline_recv);
  if (!r.ok()) {
    server_error_reply(l, k, msg, r.error);
    return;
  }
  const uint32_t credits = l.rpc_server.granted;  // what the client goes by (grant)
  const RpcLimits lim{l.depth,        io_len(l), l.page_size,
                      l.cfg.metadata, credits,   {l.rpc.fh.data(), l.rpc.fh_len}};
  nfs::Call call;
  uint32_t s = 0;
  // A call for a slot still in service waits for it (slot_free): nothing is refused as busy.
  const RpcVerdict verdict = check_rpc_call(
      h, msg.subspan(r.length), lim, l.rpc_server.outstanding, [](uint32_t) { return false; }, call,
      s);
  if (verdict == RpcVerdict::kHandle) {
    server_bad_handle(l, k, call);
    return;
  }
  if (verdict != RpcVerdict::kOk && verdict != RpcVerdict::kBye) {
    refuse_request(l, verdict);
    return;
  }
  if (verdict == RpcVerdict::kBye) {
    server_bye_reply(l, k, h.xid);
    return;
  }
  // The receive slot is free again: the call is decoded (what it asks is copied out).
  if (Errc e = post_slot_recv(p, l.p_recv, k, l.page_size, l.lkey_b, kCkReqRecv); e != Errc::kOk)
    note_reject(l, e);
  ++l.rpc_server.outstanding;  // until its reply: counted against the credits while it waits too
  const rr::Segment seg = call.proc == nfs::kProcRead ? h.writes[0].segments[0] : h.reads[0].target;
  // The slot is still in service: its WRITE's RDMA READ runs, or its reply buffer (and a READ's
  // source header) is still being sent, or an earlier call waits for it. A client may send a
  // call for a slot as soon as it has the previous reply (the acknowledgement of that SEND may
  // come later, or be lost), or, ignoring the protocol, sooner; rewriting the buffers now would
  // change what the device sends. The call waits (counted) and the others are served. Linux's
  // server: svc_rdma_send_ctxt_get (net/sunrpc/xprtrdma/svc_rdma_sendto.c) only hands out a send
  // buffer that svc_rdma_wc_send returned, once its SEND completed.
  if (!slot_free(l, s) || l.rpc_server.waiting_for[s] != 0) {
    wait_call(l, {seg, now, s, call.xid, call.count, call.proc});
    return;
  }
  serve_call(l, s, seg, call.xid, call.count, call.proc, now);
}

// The calls that waited for their slot, in arrival order, while the first one's slot is free.
bool serve_waiting(Lane& l) {
  bool any = false;
  while (l.rpc_server.n_waiting &&
         slot_free(l, l.rpc_server.waiting[l.rpc_server.waiting_head].slot)) {
    const RpcServerState::WaitingCall w = l.rpc_server.waiting[l.rpc_server.waiting_head];
    l.rpc_server.waiting_head = (l.rpc_server.waiting_head + 1) % l.depth;
    --l.rpc_server.n_waiting;
    --l.rpc_server.waiting_for[w.slot];
    serve_call(l, w.slot, w.seg, w.xid, w.count, w.proc, w.tsc);
    any = true;
  }
  return any;
}

void server_read_done(Lane& l, uint32_t s) {
  Lane::Slot& v = l.srv[s];
  v.busy = false;
  uint32_t status = nfs::kNfs3Ok;
  if (l.cfg.verify) {
    if (corrupt_now(l)) {
      flip(l, s, true);
      l.st.corrupted.add(1);
    }
    // The client's payload header names the call and the checksum of the rest.
    const auto* h = reinterpret_cast<const PayloadHdr*>(l.p_dst.slot(s)[0]);
    const Csum cs = csum_range(l.p_dst.slot(s)[0], v.len);
    if (h->magic != kPayloadMagic || static_cast<uint32_t>(h->seq) != v.seq || cs.a != h->csum_a ||
        cs.b != h->csum_b)
      status = nfs::kNfs3ErrIo;
    if (v.w && !md_ok(l.p_md_dst.slot(s)[0], l.cfg.metadata, v.len / l.page_size, v.seq))
      status = nfs::kNfs3ErrIo;
  }
  // The READ that scattered into the window completed: its invalidate needs no fence.
  if (v.w && l.p->unmap(v.w) != Errc::kOk) io_failed(l);
  v.w = nullptr;
  server_reply(l, s, status, nullptr);
}

bool server_poll(Lane& l, uint64_t now) {
  win::PollCore& p = *l.p;
  // After the client's goodbye a QP error ends the session, it is not a failure of the lane
  // (the session's rule: rdmx/endpoint/session.hpp qp_error_is_failure).
  const bool failure = endpoint::qp_error_is_failure(l.st.peer_bye.get() != 0);
  const uint32_t n = p.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
    if (!x.ok()) {
      if (failure) io_failed(l);
      return;
    }
    const uint8_t kind = cookie_kind(x.cookie);
    const uint32_t s = cookie_slot(x.cookie);
    if (x.recv) {
      if (kind == kCkReqRecv) server_request(l, s, x.byte_len, now);
    } else if (kind == kCkSrvRead) {
      server_read_done(l, s);
    } else if (kind == kCkSrvReply && s >= l.depth) {
      release_extra(l, s - l.depth);  // a reply of no slot was sent (hold_extra)
    }
  });
  if (p.qp().in_error() && !l.failed && endpoint::qp_error_is_failure(l.st.peer_bye.get() != 0))
    io_failed(l);
  const bool served = l.rpc_server.n_waiting && serve_waiting(l);
  if (n || served) p.flush();
  return n > 0 || served;
}

// ---- client ------------------------------------------------------------------------------------
// The slot whose call has `xid` and no reply yet (Slot::first_due), or (`twin`) whose second
// call of --forge-twin-every has it (Slot::twin_due); -1 when none. At most io-depth slots to
// look at.
int find_call(const Lane& l, uint32_t xid, bool& twin) {
  for (uint32_t s = 0; s < l.depth; ++s) {
    const Lane::Slot& sl = l.slots[s];
    if (!sl.busy) continue;
    twin = sl.twin_due && sl.twin_xid == xid;
    if (twin || (sl.first_due && static_cast<uint32_t>(sl.seq) == xid)) return static_cast<int>(s);
  }
  return -1;
}

// Once slot s's retire() has posted everything (it returned kOk): records, apart from
// CallChunks' own bookkeeping, what finish_call checks: the SQ producer past the last
// invalidate when any was posted for the call, and whether a window is still mapped under the
// call's rkey although the reply did not invalidate it (nothing was posted for it).
void note_retired(Lane& l, uint32_t s) {
  Lane::Slot& sl = l.slots[s];
  if (sl.inv_posted) return;
  const rr::CallChunks& ch = l.rpc_client.calls[s];
  sl.inv_posted = true;
  sl.inv_fence =
      l.rpc_client.chunk_stats.local_invalidations != sl.inv_base ? l.c->qp().sq().pi() : 0;
  sl.left_mapped = false;
  for (uint32_t i = 0; i < ch.n_windows(); ++i) {
    const win::Window* w = ch.window(i);
    if (ch.rkey(i) != sl.inv_rkey && w->state() == win::WindowState::kMapped &&
        w->rkey() == ch.rkey(i))
      sl.left_mapped = true;
  }
}

// Retires slot s's windows (`reply`: the reply's receive completion, nullptr for a call
// abandoned) and queues the slot until they are invalid on the device.
void retire_call(Lane& l, uint32_t s, const mlx5::Completion* reply) {
  Lane::Slot& sl = l.slots[s];
  sl.done_seq = sl.seq;
  sl.inv_posted = false;
  sl.inv_base = l.rpc_client.chunk_stats.local_invalidations;
  // The window the reply's SEND_WITH_INV freed on receipt (frwr_reminv looks at the same).
  sl.inv_rkey =
      reply && reply->ok() && reply->cqe_opcode == MLX5_CQE_RESP_SEND_INV ? reply->imm : 0;
  const Errc e = l.rpc_client.calls[s].retire(*l.c, reply, l.rpc.client.peer_may_invalidate,
                                              l.rpc_client.chunk_stats);  // kNoRoom: later
  if (e == Errc::kOk) note_retired(l, s);
  if (e != Errc::kOk && e != Errc::kNoRoom) note_reject(l, e);
  l.st.local_invalidations.set(l.rpc_client.chunk_stats.local_invalidations);
  l.rpc_client.retiring[(l.rpc_client.retiring_head + l.rpc_client.retiring_n++) % l.depth] = s;
}

// What the reply to slot s's call says (kReply*); `written`: a READ's bytes in the Write chunk.
uint8_t check_reply(const Lane& l, uint32_t s, const rr::Header& h, std::span<const uint8_t> msg) {
  const Lane::Slot& sl = l.slots[s];
  if (h.proc != rr::Proc::kMsg) return kReplyBad;  // RDMA_ERROR (or a NOMSG we never ask for)
  nfs::Reply rep;
  if (!nfs::decode_reply(sl.op, msg, rep) || rep.xid != h.xid) return kReplyBad;
  if (sl.forged)  // the handle was not the server's: refused, with nothing written
    return rep.status == nfs::kNfs3ErrBadHandle && h.n_writes == 0 ? kReplyBadHandle : kReplyBad;
  if (rep.status != nfs::kNfs3Ok) return kReplyNfsError;
  const uint32_t wire = sl.len + sl.len / l.page_size * l.cfg.metadata;
  if (sl.op == nfs::kProcRead) {
    // The Write chunk echoed (RFC 8166 3.6): our window, with every byte written.
    if (h.n_writes != 1 || h.writes[0].n_segments != 1 ||
        h.writes[0].segments[0].handle != l.rpc_client.calls[s].rkey(0) ||
        h.writes[0].segments[0].length != wire || rep.count != sl.len || rep.data_len != sl.len)
      return kReplyBad;
  } else if (h.n_writes != 0 || rep.count != sl.len) {
    return kReplyBad;
  }
  return kReplyGood;
}

void client_reply(Lane& l, const mlx5::Completion& x) {
  win::PollCore& c = *l.c;
  const uint32_t k = cookie_slot(x.cookie);
  const std::span<const uint8_t> msg(reinterpret_cast<const uint8_t*>(reply_recv_buf(l, k)),
                                     std::min(x.byte_len, kSmall));
  rr::Header h;
  const rr::CodecResult r = rr::decode(msg, h, rr::Role::kReply, l.rpc.client.inline_recv);
  bool twin = false;
  const int found = r.ok() ? find_call(l, h.xid, twin) : -1;
  const uint8_t verdict =
      found < 0 ? kReplyBad
                : check_reply(l, static_cast<uint32_t>(found), h, msg.subspan(r.length));
  // Everything needed is read: the receive buffer goes back.
  const mlx5::prm::Sge rs = sge(reply_recv_buf(l, k), kSmall, l.lkey_a);
  if (Errc e = c.post_recv({&rs, 1}, cookie(kCkReplyRecv, k)); e != Errc::kOk) note_reject(l, e);
  if (found < 0) {  // no call of ours: nothing to retire
    l.st.rejected.add(1);
    return;
  }
  const uint32_t s = static_cast<uint32_t>(found);
  --l.rpc_client.outstanding;
  l.rpc_client.granted =
      std::clamp(h.credits, 1u, l.depth);  // a grant of 0 would stall: at least one
  Lane::Slot& sl = l.slots[s];
  if (twin) {
    sl.twin_due = false;
    sl.twin_bad = verdict != kReplyGood;
  } else {
    sl.first_due = false;
    sl.expect_a = verdict;
  }
  if (sl.first_due || sl.twin_due) return;  // --forge-twin-every: the other reply is due
  if (sl.twin_bad && sl.expect_a == kReplyGood) sl.expect_a = kReplyBad;
  retire_call(l, s, &x);
}

// The reply came and the call's windows are invalid: the I/O completes. The reply is handed
// on only now (Linux xprtrdma: frwr_unmap_sync waits for the last LOCAL_INV's completion before
// the reply goes up): checked here against the device's progress, not CallChunks' own state.
// A window the reply did not invalidate must have had its invalidate posted and the SQ consumer
// must have passed it; otherwise the peer could still reach the call's memory, and the reply is
// counted in early_replies (an error).
void finish_call(Lane& l, uint32_t s, uint64_t now) {
  Lane::Slot& sl = l.slots[s];
  if (!sl.inv_posted || sl.left_mapped || l.c->qp().sq().ci() < sl.inv_fence)
    l.st.early_replies.add(1);
  (void)l.rpc_client.calls[s].reset(*l.c);
  if (sl.expect_a == kCallAbandoned) {
    push_slot(l, s);
    return;
  }
  if (sl.expect_a == kReplyBadHandle) {  // answered as it had to be: nothing moved
    io_done(l, sl.tsc, now, 0);
    push_slot(l, s);
    return;
  }
  if (sl.expect_a == kReplyBad) l.st.io_errors.add(1);
  if (l.cfg.verify) {
    bool good = sl.expect_a == kReplyGood;
    if (good && sl.op == nfs::kProcRead) {
      // Twice called (--forge-twin-every): the second call's payload landed last.
      const uint32_t xid = sl.twin_xid ? sl.twin_xid : static_cast<uint32_t>(sl.seq);
      const auto* h = reinterpret_cast<const PayloadHdr*>(l.c_dst.slot(s)[0]);
      const Csum cs = csum_pages(l.c_dst.slot(s), l.page_size, sl.len);
      good = h->magic == kPayloadMagic && h->seq == xid && cs.a == h->csum_a && cs.b == h->csum_b;
      if (l.cfg.metadata)
        good = good && md_ok(l.c_md_dst.slot(s)[0], l.cfg.metadata, sl.len / l.page_size, xid);
    }
    if (!good && sl.expect_a != kReplyBad) l.st.verify_fail.add(1);
  }
  io_done(l, sl.tsc, now, sl.len);
  push_slot(l, s);
}

// Resumes the retirements (an unmap that found no SQ room) and completes, in order, the calls
// whose windows are invalid.
bool pump_retiring(Lane& l, uint64_t now) {
  bool any = false;
  while (l.rpc_client.retiring_n) {
    const uint32_t s = l.rpc_client.retiring[l.rpc_client.retiring_head];
    rr::CallChunks& ch = l.rpc_client.calls[s];
    if (ch.retire(*l.c, nullptr, l.rpc.client.peer_may_invalidate, l.rpc_client.chunk_stats) !=
        Errc::kOk)
      break;
    note_retired(l, s);
    l.st.local_invalidations.set(l.rpc_client.chunk_stats.local_invalidations);
    if (!ch.done(*l.c)) break;
    finish_call(l, s, now);
    l.rpc_client.retiring_head = (l.rpc_client.retiring_head + 1) % l.depth;
    --l.rpc_client.retiring_n;
    any = true;
  }
  return any;
}

bool client_poll(Lane& l, uint64_t now) {
  win::PollCore& c = *l.c;
  const uint32_t n = c.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
    if (!x.ok()) {
      io_failed(l);
      return;
    }
    if (x.recv && cookie_kind(x.cookie) == kCkReplyRecv) client_reply(l, x);
  });
  if (c.qp().in_error() && !l.failed) io_failed(l);
  const bool done = pump_retiring(l, now);
  return n > 0 || done;
}

// Encodes slot s's call `xid` (transport header with its chunk `seg`, ONC RPC call, NFSv3
// arguments) into the request buffer at `buf_addr`: the bytes, 0 if it did not fit (it always
// does: kSmall).
uint32_t encode_call(Lane& l, uint32_t s, uint32_t proc, uint64_t seq, const rr::Segment& seg,
                     uint64_t buf_addr, uint32_t xid) {
  rr::Header h;
  h.xid = xid;
  h.credits = l.depth;  // asked: as many as the client has slots
  h.proc = rr::Proc::kMsg;
  if (proc == nfs::kProcRead) {
    h.n_writes = 1;
    h.writes[0].n_segments = 1;
    h.writes[0].segments[0] = seg;
  } else if (proc == nfs::kProcWrite) {
    h.n_reads = 1;
    h.reads[0] = {nfs::write_data_position(l.rpc.fh_len), seg};  // RFC 8267 4: the data's position
  }
  const std::span<uint8_t> buf = small_span(buf_addr);
  const rr::CodecResult r = rr::encode(h, buf, rr::Role::kCall, l.rpc.client.inline_send);
  if (!r.ok()) return 0;
  // The file handle the server handed out; --forge-handle-every (tests): one byte flipped.
  nfs::Call call;
  call.fh = {l.rpc.fh.data(), l.rpc.fh_len};
  std::array<uint8_t, nfs::kFhMaxBytes> forged;
  l.slots[s].forged = l.cfg.forge_handle_every && proc != nfs::kProcNull &&
                      seq % l.cfg.forge_handle_every == 0 && l.rpc.fh_len;
  if (l.slots[s].forged) {
    forged = l.rpc.fh;
    forged[seq % l.rpc.fh_len] ^= 0x01;
    call.fh = {forged.data(), l.rpc.fh_len};
  }
  call.xid = h.xid;
  call.proc = proc;
  call.offset = uint64_t{s} * io_len(l);  // the slot's part of the server's file
  call.count = io_len(l);
  call.data_len = proc == nfs::kProcWrite ? call.count : 0;
  const uint32_t m = nfs::encode_call(call, buf.subspan(r.length));
  return m ? r.length + m : 0;
}

// --forge-twin-every (tests): a client ignoring the protocol sends slot s's READ call again
// right behind it, under another xid (~seq) and within its credits: the server gets a second
// call for the slot before the first reply's SEND completed. Both replies are awaited.
void send_twin(Lane& l, uint32_t s, const rr::Segment& seg) {
  Lane::Slot& sl = l.slots[s];
  if (l.rpc_client.outstanding >= l.rpc_client.granted) return;
  const uint32_t xid = ~static_cast<uint32_t>(sl.seq);
  const uint32_t bytes = encode_call(l, s, nfs::kProcRead, sl.seq, seg, twin_req_buf(l, s), xid);
  const mlx5::prm::Sge sg = sge(twin_req_buf(l, s), bytes, l.lkey_a);
  if (bytes == 0 || l.c->post_send({&sg, 1}, cookie(kCkReq, s)) != Errc::kOk) return;
  sl.twin_xid = xid;
  sl.twin_due = true;
  ++l.rpc_client.outstanding;
}

// The calls the client may have without a reply: the server's last grant. --forge-credits
// (tests): io-depth, and the first call a WRITE (its reply waits for the server's RDMA READ, so
// the calls behind it reach the server before any grant).
uint32_t credit_limit(const Lane& l) {
  return l.cfg.forge_credits ? l.depth : l.rpc_client.granted;
}
uint32_t next_proc(const Lane& l, uint64_t seq) {
  return ((seq + l.cfg.forge_credits) & 1) ? nfs::kProcRead : nfs::kProcWrite;
}

// Maps slot s's chunk (its pages, with --metadata interleaved with their metadata) into a
// window: the call's segment `seg`. A WRITE's metadata is what the server must find, a READ's
// is cleared so that stale tags fail.
Errc map_call(Lane& l, uint32_t s, bool rd, uint64_t seq, rr::Segment& seg) {
  RpcClientState& cs = l.rpc_client;
  const SlotBufs& b = rd ? l.c_dst : l.c_src;
  const uint32_t md = l.cfg.metadata;
  if (!md)
    return cs.calls[s].map(*l.c, std::span<const uint64_t>(b.slot(s), l.cfg.pages), kRpcAccess, 0,
                           io_len(l), &seg, cs.chunk_stats);
  const uint64_t meta = (rd ? l.c_md_dst : l.c_md_src).slot(s)[0];
  if (!rd)
    md_fill(meta, md, l.cfg.pages, seq);
  else
    std::memset(reinterpret_cast<void*>(meta), 0, size_t{l.cfg.pages} * md);
  const win::InterleavedPart parts[2] = {{b.slot(s)[0], l.page_size, 0}, {meta, md, 0}};
  return cs.calls[s].map_interleaved(*l.c, parts, l.cfg.pages, kRpcAccess, &seg, cs.chunk_stats);
}

// Slot s's payload header: a WRITE's names the call and the checksum of the rest; a READ's is
// cleared, so a reply whose payload never landed cannot pass.
void head_payload(Lane& l, uint32_t s, bool rd, uint64_t seq) {
  auto* h = reinterpret_cast<PayloadHdr*>((rd ? l.c_dst : l.c_src).slot(s)[0]);
  if (rd) {
    h->seq = 0;
    return;
  }
  h->magic = kPayloadMagic;
  h->seq = static_cast<uint32_t>(seq);
  h->slot = s;
  h->len = io_len(l);
  h->csum_a = l.csums[s].a;
  h->csum_b = l.csums[s].b;
}

// One call `seq` for slot s: its chunk mapped, its payload headed, the call SENT (ordered after
// the map's UMR on the same SQ). False when it could not go: the slot freed (map refused) or
// the call abandoned (its window retired, the slot freed after).
bool issue_call(Lane& l, uint32_t s, uint64_t seq, uint64_t now) {
  Lane::Slot& sl = l.slots[s];
  const uint32_t proc = next_proc(l, seq);
  const bool rd = proc == nfs::kProcRead;
  rr::Segment seg;
  Errc e = map_call(l, s, rd, seq, seg);
  if (e != Errc::kOk) {
    note_reject(l, e);
    push_slot(l, s);
    return false;
  }
  head_payload(l, s, rd, seq);
  sl.seq = seq;
  sl.done_seq = 0;
  sl.op = static_cast<uint8_t>(proc);
  sl.len = io_len(l);
  sl.tsc = now;
  sl.busy = true;
  sl.first_due = true;
  sl.twin_due = sl.twin_bad = false;
  sl.twin_xid = 0;
  const uint32_t bytes =
      encode_call(l, s, proc, seq, seg, req_buf(l, s), static_cast<uint32_t>(seq));
  const mlx5::prm::Sge sg = sge(req_buf(l, s), bytes, l.lkey_a);
  e = bytes ? l.c->post_send({&sg, 1}, cookie(kCkReq, s)) : Errc::kOutOfRange;
  if (e != Errc::kOk) {
    note_reject(l, e);
    sl.expect_a = kCallAbandoned;
    retire_call(l, s, nullptr);
    return false;
  }
  l.seq = seq;
  ++l.rpc_client.outstanding;
  ++l.issued;
  if (rd && l.cfg.forge_twin_every && seq % l.cfg.forge_twin_every == 0) send_twin(l, s, seg);
  return true;
}

// Calls while the burst, the credits and a free slot allow.
uint32_t client_issue(Lane& l, uint64_t now) {
  uint32_t n = 0, slot = 0;
  while (n < l.cfg.burst && may_issue(l) && l.rpc_client.outstanding < credit_limit(l) &&
         pop_slot(l, slot) && issue_call(l, slot, l.seq + 1, now))
    ++n;
  l.c->flush();
  return n;
}

bool fwd(Lane& l) {
  const uint64_t now = rte_rdtsc();
  bool busy = false;
  if (l.c) busy |= client_poll(l, now);
  if (l.p) busy |= server_poll(l, now);
  if (l.c) busy |= client_issue(l, now) > 0;
  return busy;
}

// Undoes a corruption still in place (--corrupt-every): start() checksums the source buffers.
void undo_corruption(Lane& l) {
  if (!l.p) return;
  for (uint32_t s = 0; s < l.depth; ++s) {
    if (l.srv[s].op == 0xff) {
      flip(l, s, false);
      l.srv[s].op = 0;
    }
  }
}

bool idle(Lane& l) {
  if (l.failed) return true;
  if (l.c && (!all_slots_free(l) || l.rpc_client.retiring_n != 0)) return false;
  undo_corruption(l);
  return true;
}

}  // namespace

// Two-process client: tells the server it is done, with an NFSv3 NULL call (no chunks, no
// window); any engine's server lane takes it as the goodbye (peer_checks.hpp, rpc_goodbye).
bool rpc_send_bye(Lane& l) {
  const uint32_t bytes = encode_call(l, 0, nfs::kProcNull, l.seq + 1, rr::Segment{}, req_buf(l, 0),
                                     static_cast<uint32_t>(l.seq + 1));
  const mlx5::prm::Sge sg = sge(req_buf(l, 0), bytes, l.lkey_a);
  if (bytes == 0 || l.c->post_send({&sg, 1}, cookie(kCkBye, 0), true) != Errc::kOk) return false;
  l.c->flush();
  bool done = false;
  for (uint64_t spins = 0; !done && spins < 100'000'000; ++spins) {
    l.c->poll(16, [&](const mlx5::Completion& x) {
      if (!x.recv && cookie_kind(x.cookie) == kCkBye) done = true;
    });
  }
  return done;
}

extern const Engine kRpcEngine = {
    "rpc",  "NFSv3 READ/WRITE over RPC-over-RDMA v1: chunks in windows, replies SEND_WITH_INV",
    true,   true,
    start,  fwd,
    idle,   undo_corruption,
    nullptr};

}  // namespace rdmafwd
