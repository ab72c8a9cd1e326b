// --fwd rpc: the 2006 NFS/RDMA scenario.
//
// Client (core c), per RPC: take a slot, map its chunk pages into a window (one UMR), SEND a
// request carrying {rkey, iova, length, op} on the same SQ (ordered after the UMR). Operations
// alternate: a READ request asks the server to RDMA-WRITE a payload into the window, a WRITE
// request asks it to RDMA-READ the client's payload out of it. The server answers with
// SEND_WITH_INV naming the window's rkey: the client's NIC frees the window on receipt and the
// window layer puts it back in the core's cache while polling that receive — no unmap WQE.
//
// Server (core p): receives requests into its receive slots, moves the payload between its
// registered per-slot buffers (parent lkey) and the client's window, replies.
//
// Verification (unless --no-verify): the payload header carries the sequence number and the
// rest is checksummed: the server puts the checksum of what it wrote in the reply, the client
// puts the checksum of what the server must read in the request; a mismatch on the client side
// or a failure status in the reply counts as a verification failure. --corrupt-every N (tests)
// makes the server flip one payload byte every N requests.
//
// --metadata BYTES: every page-sized block of a slot carries BYTES of metadata kept in an array
// of its own (as a storage target keeps protection information). The client maps the slot's data
// and metadata into one interleaved window (block, its metadata, next block, ...); the server
// maps its own buffers the same way and moves both with the one WRITE or READ. The metadata of
// block r is tagged {r, seq} (and a pattern): the server checks what it read, the client what the
// server wrote.
#include <cstring>

#include "common.hpp"
#include "peer_checks.hpp"

namespace rdmafwd {
namespace {

constexpr uint32_t kRpcAccess =
    mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead;

uint64_t req_buf(const Lane& l, uint32_t slot) {
  return l.c_small + uint64_t{slot} * kSmall;
}
uint64_t reply_recv_buf(const Lane& l, uint32_t k) {
  return l.c_small + uint64_t{l.depth + k} * kSmall;
}
uint64_t srv_reply_buf(const Lane& l, uint32_t slot) {
  return l.p_small + uint64_t{slot} * kSmall;
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

bool start(Lane& l) {
  reset_slots(l);
  const uint32_t len = io_len(l);
  if (l.c) {
    for (uint32_t i = 0; i < l.depth; ++i)
      l.csums[i] = csum_pages(l.c_src.slot(i), l.page_size, len);
  }
  if (l.p) {
    for (uint32_t i = 0; i < l.depth; ++i)
      l.csums[l.depth + i] = csum_range(l.p_src.slot(i)[0], len);
  }
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

void server_reply(Lane& l, uint32_t s, uint8_t status, Csum cs) {
  Lane::Slot& v = l.srv[s];
  auto* rep = reinterpret_cast<RpcReply*>(srv_reply_buf(l, s));
  rep->magic = kReplyMagic;
  rep->seq = v.seq;
  rep->slot = s;
  rep->status = status;
  rep->csum_a = cs.a;
  rep->csum_b = cs.b;
  const mlx5::prm::Sge sg = sge(srv_reply_buf(l, s), kSmall, l.lkey_b);
  const Errc e = l.p->post_send_inv({&sg, 1}, v.rkey, cookie(kCkSrvReply, s));
  if (e != Errc::kOk) {
    note_reject(l, e);
    io_failed(l);
    return;
  }
  if (l.remote_client) io_done(l, v.tsc, rte_rdtsc(), v.len);  // served (two-process server)
}

bool corrupt_now(Lane& l) {
  return l.cfg.corrupt_every && (++l.srv_count % l.cfg.corrupt_every) == 0;
}

// A request that breaks peer_checks.hpp's rules: counted and the lane serves its client no more
// (it stops reposting receives and reading requests); the main thread names the client in one
// line and cuts its QP off (main.cpp, police_peers).
void refuse_request(Lane& l, RpcVerdict v) {
  l.st.refused_requests.add(1);
  l.st.refused_why.set(static_cast<uint64_t>(v));
  l.refusing = true;
}

void server_request(Lane& l, uint32_t k, uint32_t byte_len, uint64_t now) {
  win::PollCore& p = *l.p;
  if (l.refusing) return;  // its client is being dropped: nothing more of it is read
  RpcReq req = *reinterpret_cast<const RpcReq*>(l.p_recv.slot(k)[0]);
  const RpcLimits lim{l.depth, io_len(l), l.page_size, l.cfg.metadata};
  const RpcVerdict verdict =
      check_rpc_request(req, byte_len, lim, [&](uint32_t s) { return l.srv[s].busy; });
  if (verdict != RpcVerdict::kOk && verdict != RpcVerdict::kBye) {
    refuse_request(l, verdict);
    return;
  }
  // The receive slot is free again: the request is copied.
  if (Errc e = post_slot_recv(p, l.p_recv, k, l.page_size, l.lkey_b, kCkReqRecv); e != Errc::kOk)
    note_reject(l, e);
  if (verdict == RpcVerdict::kBye) {
    l.st.peer_bye.set(1);
    return;
  }
  const uint32_t s = req.slot;
  Lane::Slot& v = l.srv[s];
  if (v.op == 0xff) flip(l, s, false);  // undo the previous corruption of this slot's source
  v.seq = req.seq;
  v.rkey = req.rkey;
  v.len = req.len;
  v.op = req.op;
  v.tsc = now;
  // Two processes: a request accepted is the server's I/O (served by server_reply), so that
  // issued = completed + failed + abandoned holds on this side too.
  if (l.remote_client) ++l.issued;
  v.expect_a = req.csum_a;
  v.expect_b = req.csum_b;
  const uint32_t md = l.cfg.metadata;  // req.md == md (check_rpc_request)
  const uint32_t blocks = req.len / l.page_size;
  v.w = nullptr;
  if (md) {  // the local side: the slot's data and metadata behind one window of this core
    if (req.op == kOpRead)
      md_fill(l.p_md_src.slot(s)[0], md, blocks, req.seq);
    else
      std::memset(reinterpret_cast<void*>(l.p_md_dst.slot(s)[0]), 0, size_t{blocks} * md);
    const bool rd = req.op == kOpRead;
    const win::MapResult m = map_with_md(p, (rd ? l.p_src : l.p_dst).slot(s)[0],
                                         (rd ? l.p_md_src : l.p_md_dst).slot(s)[0], l.page_size, md,
                                         blocks, mlx5::kAccessLocalWrite);
    if (!m.ok()) {
      note_reject(l, m.errc);
      io_failed(l);
      return;
    }
    v.w = m.window;
  }
  // With metadata the local SGE is the window (iova 0, data + metadata interleaved).
  const uint32_t wire = req.len + blocks * md;
  auto local = [&](const SlotBufs& b) {
    return v.w ? sge(0, wire, v.w->lkey()) : sge(b.slot(s)[0], req.len, l.lkey_b);
  };
  if (req.op == kOpRead) {
    auto* h = reinterpret_cast<PayloadHdr*>(l.p_src.slot(s)[0]);
    h->magic = kPayloadMagic;
    h->seq = req.seq;
    h->slot = s;
    h->len = req.len;
    const Csum cs =
        req.len == io_len(l) ? l.csums[l.depth + s] : csum_range(l.p_src.slot(s)[0], req.len);
    if (corrupt_now(l)) {
      flip(l, s, false);
      v.op = 0xff;
      l.st.corrupted.add(1);
    }
    const mlx5::prm::Sge sg = local(l.p_src);
    const Errc e = p.post_write({&sg, 1}, req.iova, req.rkey, cookie(kCkSrvWrite, s));
    if (e != Errc::kOk) {
      note_reject(l, e);
      io_failed(l);
      return;
    }
    server_reply(l, s, 0, cs);  // same SQ: the reply is ordered after the payload
    // The window may go at once: its invalidate waits (fenced) for the WRITE that gathers
    // from it (PollCore::unmap).
    if (v.w && p.unmap(v.w) != Errc::kOk) io_failed(l);
    v.w = nullptr;
  } else {
    const mlx5::prm::Sge sg = local(l.p_dst);
    const Errc e = p.post_read({&sg, 1}, req.iova, req.rkey, cookie(kCkSrvRead, s), true);
    if (e != Errc::kOk) {
      note_reject(l, e);
      io_failed(l);
      return;
    }
    v.busy = true;  // until its READ completed (server_read_done): the slot is in use
  }
}

void server_read_done(Lane& l, uint32_t s) {
  Lane::Slot& v = l.srv[s];
  v.busy = false;
  uint8_t status = 0;
  if (l.cfg.verify) {
    if (corrupt_now(l)) {
      flip(l, s, true);
      l.st.corrupted.add(1);
    }
    const auto* h = reinterpret_cast<const PayloadHdr*>(l.p_dst.slot(s)[0]);
    const Csum cs = csum_range(l.p_dst.slot(s)[0], v.len);
    if (h->seq != v.seq || cs.a != v.expect_a || cs.b != v.expect_b) status = 1;
    if (v.w && !md_ok(l.p_md_dst.slot(s)[0], l.cfg.metadata, v.len / l.page_size, v.seq))
      status = 1;
  }
  // The READ that scattered into the window completed: its invalidate needs no fence.
  if (v.w && l.p->unmap(v.w) != Errc::kOk) io_failed(l);
  v.w = nullptr;
  server_reply(l, s, status, Csum{});
}

bool server_poll(Lane& l, uint64_t now) {
  win::PollCore& p = *l.p;
  const uint32_t n = p.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
    if (!x.ok()) {
      io_failed(l);
      return;
    }
    const uint8_t kind = cookie_kind(x.cookie);
    const uint32_t s = cookie_slot(x.cookie);
    if (x.recv) {
      if (kind == kCkReqRecv) server_request(l, s, x.byte_len, now);
    } else if (kind == kCkSrvRead) {
      server_read_done(l, s);
    }
  });
  if (p.qp().in_error() && !l.failed) io_failed(l);
  if (n) p.flush();
  return n > 0;
}

// ---- client ------------------------------------------------------------------------------------
void client_reply(Lane& l, const mlx5::Completion& x, uint64_t now) {
  win::PollCore& c = *l.c;
  const uint32_t k = cookie_slot(x.cookie);
  const RpcReply rep = *reinterpret_cast<const RpcReply*>(reply_recv_buf(l, k));
  const mlx5::prm::Sge rs = sge(reply_recv_buf(l, k), kSmall, l.lkey_a);
  if (Errc e = c.post_recv({&rs, 1}, cookie(kCkReplyRecv, k)); e != Errc::kOk) note_reject(l, e);
  if (rep.magic != kReplyMagic || rep.slot >= l.depth || !l.slots[rep.slot].busy ||
      l.slots[rep.slot].seq != rep.seq) {
    l.st.rejected.add(1);
    return;
  }
  const uint32_t s = rep.slot;
  Lane::Slot& sl = l.slots[s];
  // The reply must have invalidated the window (SEND_WITH_INV with its rkey); otherwise the
  // client unmaps it itself and counts an error.
  if (x.cqe_opcode != MLX5_CQE_RESP_SEND_INV || x.imm != sl.rkey) {
    l.st.io_errors.add(1);
    unmap_or_queue(c, l, sl.w);
  }
  if (l.cfg.verify) {
    bool good;
    if (sl.op == kOpRead) {
      const auto* h = reinterpret_cast<const PayloadHdr*>(l.c_dst.slot(s)[0]);
      const Csum cs = csum_pages(l.c_dst.slot(s), l.page_size, sl.len);
      good = h->seq == sl.seq && cs.a == rep.csum_a && cs.b == rep.csum_b;
      if (l.cfg.metadata)
        good = good && md_ok(l.c_md_dst.slot(s)[0], l.cfg.metadata, sl.len / l.page_size, sl.seq);
    } else {
      good = rep.status == 0;
    }
    if (!good) l.st.verify_fail.add(1);
  }
  io_done(l, sl.tsc, now, sl.len);
  push_slot(l, s);
}

bool client_poll(Lane& l, uint64_t now) {
  win::PollCore& c = *l.c;
  const uint32_t n = c.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
    if (!x.ok()) {
      io_failed(l);
      return;
    }
    if (x.recv && cookie_kind(x.cookie) == kCkReplyRecv) client_reply(l, x, now);
  });
  if (c.qp().in_error() && !l.failed) io_failed(l);
  return n > 0;
}

uint32_t client_issue(Lane& l, uint64_t now) {
  win::PollCore& c = *l.c;
  retry_unmaps(c, l);
  const uint32_t len = io_len(l);
  uint32_t n = 0, slot = 0;
  while (n < l.cfg.burst && may_issue(l) && pop_slot(l, slot)) {
    Lane::Slot& sl = l.slots[slot];
    const uint64_t seq = l.seq + 1;
    const uint8_t op = (seq & 1) ? kOpRead : kOpWrite;
    const SlotBufs& b = op == kOpRead ? l.c_dst : l.c_src;
    const uint32_t md = l.cfg.metadata;
    if (md) {  // write: the metadata the server must find; read: cleared, so stale tags fail
      if (op == kOpWrite)
        md_fill(l.c_md_src.slot(slot)[0], md, l.cfg.pages, seq);
      else
        std::memset(reinterpret_cast<void*>(l.c_md_dst.slot(slot)[0]), 0, size_t{l.cfg.pages} * md);
    }
    const win::MapResult m =
        md ? map_with_md(c, b.slot(slot)[0],
                         (op == kOpRead ? l.c_md_dst : l.c_md_src).slot(slot)[0], l.page_size, md,
                         l.cfg.pages, kRpcAccess)
           : c.map(std::span<const uint64_t>(b.slot(slot), l.cfg.pages), kRpcAccess, 0, len);
    if (!m.ok()) {
      note_reject(l, m.errc);
      push_slot(l, slot);
      break;
    }
    auto* h = reinterpret_cast<PayloadHdr*>(b.slot(slot)[0]);
    if (op == kOpWrite) {
      h->magic = kPayloadMagic;
      h->seq = seq;
      h->slot = slot;
      h->len = len;
    } else {
      h->seq = 0;  // a reply whose payload never landed cannot pass
    }
    auto* req = reinterpret_cast<RpcReq*>(req_buf(l, slot));
    req->magic = kReqMagic;
    req->seq = seq;
    req->iova = m.iova;
    req->rkey = m.rkey;
    req->len = len;
    req->slot = slot;
    req->op = op;
    req->md = static_cast<uint16_t>(md);
    req->csum_a = l.csums[slot].a;
    req->csum_b = l.csums[slot].b;
    const mlx5::prm::Sge sg = sge(req_buf(l, slot), kSmall, l.lkey_a);
    const Errc e = c.post_send({&sg, 1}, cookie(kCkReq, slot));
    if (e != Errc::kOk) {
      note_reject(l, e);
      unmap_or_queue(c, l, m.window);
      push_slot(l, slot);
      break;
    }
    l.seq = seq;
    sl.seq = seq;
    sl.op = op;
    sl.len = len;
    sl.w = m.window;
    sl.rkey = m.rkey;
    sl.tsc = now;
    sl.busy = true;
    ++l.issued;
    ++n;
  }
  c.flush();
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

bool idle(Lane& l) {
  if (l.failed) return true;
  if (l.c && (!all_slots_free(l) || l.unmap_n != 0)) return false;
  if (l.p) {
    // Undo a corruption still in place (the buffer's checksum was computed at start).
    for (uint32_t s = 0; s < l.depth; ++s) {
      if (l.srv[s].op == 0xff) {
        flip(l, s, false);
        l.srv[s].op = 0;
      }
    }
  }
  return true;
}

}  // namespace

// After a recovery: undoes a corruption still in place (the engine's start checksums the source).
bool rpc_undo_corruption(Lane& l) {
  bool any = false;
  for (uint32_t s = 0; s < l.depth; ++s) {
    if (l.srv[s].op == 0xff) {
      flip(l, s, false);
      l.srv[s].op = 0;
      any = true;
    }
  }
  return any;
}

// Two-process client: tells the server it is done (a request with op bye, no window).
bool rpc_send_bye(Lane& l) {
  auto* req = reinterpret_cast<RpcReq*>(req_buf(l, 0));
  *req = RpcReq{};
  req->magic = kReqMagic;
  req->op = kOpBye;
  const mlx5::prm::Sge sg = sge(req_buf(l, 0), kSmall, l.lkey_a);
  if (l.c->post_send({&sg, 1}, cookie(kCkBye, 0), true) != Errc::kOk) return false;
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
    "rpc", "client maps, SENDs the rkey; server RDMA-WRITEs/READs, replies SEND_WITH_INV",
    true,  true,
    start, fwd,
    idle};

}  // namespace rdmafwd
