// What rdmafwd's server-side engines accept from a client, one function per protocol (rpc
// requests, relay messages): every field the server reads from a peer, checked before any of it
// is used (the engines, the unit test and the fuzzer call these).
//
// ---- rpc (engines/rpc.cpp): check_rpc_call ---- Hot path: no allocation, no system call;
// every comparison on the field's own width, nothing computed from a peer's value before it
// passed (no sum or product that could wrap). The RPC-over-RDMA transport header was decoded
// first (rpcrdma::decode, Role::kCall: a header it refuses is answered with RDMA_ERROR, not
// checked here); this checks the RPC message and the chunks against what the server serves:
//
//   what                rule                                                  verdict
//   outstanding calls   < the credits the server granted (RFC 8166 3.3.1)     kCredits
//   RPC message         an ONC RPC v2 call of NFSv3, AUTH_NONE, whole, with   kRpc
//                       the transport header's xid (RFC 8166 4.1)
//   proc                NULL (the client's goodbye: nothing else read),       kOp
//                       READ or WRITE
//   file handle         the one the server handed out at setup; another is    kHandle
//                       answered NFS3ERR_BADHANDLE and the client served on
//                       (the only verdict that does not drop it)
//   offset              a slot's start: a multiple of max_len, slot < depth   kSlot
//   slot                not waiting for the RDMA READ of an earlier WRITE     kSlotBusy
//                       (when `busy` says so: rdmafwd's rpc server never
//                       does, it queues such a call until the slot is free)
//   count               1 .. max_len; with metadata whole page-sized blocks   kLen
//   READ chunks         no Read list, no Reply chunk, one Write chunk of one  kChunk
//                       segment at least count + blocks x metadata long
//   WRITE chunks        no Write list, no Reply chunk, one Read segment at    kChunk
//                       write_data_position(handle) exactly count + blocks x metadata
//                       long; the data's XDR length == count
//   segment handle, offset: not the server's to check. They name the client's own window, and
//             the client's device refuses what they do not open (the responder checks the
//             rkey, the IOVA range and the access); the server moves exactly the bytes above.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include <rdmx/rpcrdma/codec.hpp>

#include "common.hpp"
#include "nfs_wire.hpp"

namespace rdmafwd {

struct RpcLimits {
  uint32_t depth = 0;           // server slots
  uint32_t max_len = 0;         // bytes a slot holds (pages-per-io x page size)
  uint32_t page_size = 0;       // a block of --metadata
  uint32_t metadata = 0;        // bytes of metadata per block (0: none)
  uint32_t credits = 0;         // calls the server granted the client
  std::span<const uint8_t> fh;  // the file handle the server handed out
};

enum class RpcVerdict : uint8_t {
  kOk,
  kBye,
  kCredits,
  kRpc,
  kOp,
  kHandle,
  kSlot,
  kSlotBusy,
  kLen,
  kChunk
};

inline const char* rpc_verdict_name(RpcVerdict v) noexcept {
  switch (v) {
    case RpcVerdict::kOk:
      return "ok";
    case RpcVerdict::kBye:
      return "goodbye";
    case RpcVerdict::kCredits:
      return "more calls than the credits granted";
    case RpcVerdict::kRpc:
      return "not an NFSv3 ONC RPC call with AUTH_NONE and the header's xid";
    case RpcVerdict::kOp:
      return "an NFSv3 procedure other than NULL, READ or WRITE";
    case RpcVerdict::kHandle:
      return "another file handle than the one the server handed out";
    case RpcVerdict::kSlot:
      return "an offset that is not a slot within the server's io-depth";
    case RpcVerdict::kSlotBusy:
      return "a slot whose previous request is still in progress";
    case RpcVerdict::kLen:
      return "a count outside the slot";
    case RpcVerdict::kChunk:
      return "chunks that do not carry the data as RFC 8267 binds it";
  }
  return "unknown";
}

// Bytes a call's segment moves for `count` data bytes: with metadata each page-sized block's too
// (count already checked: <= max_len, whole blocks).
inline uint64_t rpc_wire_bytes(uint32_t count, const RpcLimits& lim) noexcept {
  return lim.metadata ? uint64_t{count} + uint64_t{count / lim.page_size} * lim.metadata : count;
}

// `h`: the decoded transport header; `msg`: the RPC message after it; `outstanding`: the
// client's calls the server has received and not yet answered, this one excluded; `busy(slot)`:
// is the server slot still serving an earlier request (only asked for slot < depth). On kOk,
// `call` holds the decoded call and `slot` its slot.
template <class Busy>
inline RpcVerdict check_rpc_call(const rpcrdma::Header& h, std::span<const uint8_t> msg,
                                 const RpcLimits& lim, uint32_t outstanding, Busy&& busy,
                                 nfs::Call& call, uint32_t& slot) noexcept {
  if (outstanding >= lim.credits) return RpcVerdict::kCredits;
  if (h.proc != rpcrdma::Proc::kMsg || !nfs::decode_call(msg, call) || call.xid != h.xid)
    return RpcVerdict::kRpc;
  if (call.proc == nfs::kProcNull) return RpcVerdict::kBye;
  if (call.proc != nfs::kProcRead && call.proc != nfs::kProcWrite) return RpcVerdict::kOp;
  if (call.fh.size() != lim.fh.size() ||
      !std::equal(call.fh.begin(), call.fh.end(), lim.fh.begin()))
    return RpcVerdict::kHandle;
  if (lim.max_len == 0 || call.offset % lim.max_len != 0 || call.offset / lim.max_len >= lim.depth)
    return RpcVerdict::kSlot;
  slot = static_cast<uint32_t>(call.offset / lim.max_len);
  if (busy(slot)) return RpcVerdict::kSlotBusy;
  if (call.count == 0 || call.count > lim.max_len) return RpcVerdict::kLen;
  if (lim.metadata && (lim.page_size == 0 || call.count % lim.page_size != 0))
    return RpcVerdict::kLen;
  const uint64_t wire = rpc_wire_bytes(call.count, lim);
  if (h.has_reply) return RpcVerdict::kChunk;
  if (call.proc == nfs::kProcRead) {
    if (h.n_reads != 0 || h.n_writes != 1 || h.writes[0].n_segments != 1 ||
        h.writes[0].segments[0].length < wire)
      return RpcVerdict::kChunk;
  } else {
    if (h.n_writes != 0 || h.n_reads != 1 ||
        h.reads[0].position != nfs::write_data_position(static_cast<uint32_t>(call.fh.size())) ||
        h.reads[0].target.length != wire || call.data_len != call.count)
      return RpcVerdict::kChunk;
  }
  return RpcVerdict::kOk;
}

// The two-process client's goodbye (engines/rpc.cpp, rpc_send_bye): an NFSv3 NULL call in an
// RDMA_MSG without chunks. Any engine's server lane recognises it (relay too).
inline bool rpc_goodbye(std::span<const uint8_t> msg) noexcept {
  rpcrdma::Header h;
  const rpcrdma::CodecResult r = rpcrdma::decode(msg, h, rpcrdma::Role::kCall);
  nfs::Call c;
  return r.ok() && h.proc == rpcrdma::Proc::kMsg && h.n_reads == 0 && h.n_writes == 0 &&
         !h.has_reply && nfs::decode_call(msg.subspan(r.length), c) && c.xid == h.xid &&
         c.proc == nfs::kProcNull;
}

// ---- relay (engines/relay.cpp): check_relay_message ----
//   byte_len  1 .. slot_bytes (the receive slot: the device refuses more, a local length error;
//             a zero-length SEND would map an empty window, which the window layer refuses, and
//             stall relay-out behind it)
// The payload itself is the client's: relayed to its own sink untouched, never read by the
// server but for the goodbye (rpc_goodbye) and the byte count.
inline bool check_relay_message(uint32_t byte_len, uint32_t slot_bytes) noexcept {
  return byte_len != 0 && byte_len <= slot_bytes;
}

}  // namespace rdmafwd
