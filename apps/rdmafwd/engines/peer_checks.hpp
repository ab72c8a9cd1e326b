// What rdmafwd's server-side engines accept from a client, one function per protocol (rpc
// requests, relay messages): every field the server reads from a peer, checked before any of it
// is used (the engines, the unit test and the fuzzer call these).
//
// ---- rpc (engines/rpc.cpp): check_rpc_request ---- Hot path:
// no allocation, no system call; every comparison on the field's own width, nothing computed
// from a peer's value before it passed (no sum or product that could wrap).
//
//   field     rule                                                  verdict when broken
//   byte_len  >= sizeof(RpcReq): the request was received whole     kShort
//             (a shorter SEND leaves the previous request's bytes
//             in the receive slot)
//   magic     kReqMagic                                             kMagic
//   op        kOpRead, kOpWrite or kOpBye (bye: nothing else read)  kOp
//   slot      < depth (the server's slots)                          kSlot
//   slot      not waiting for the RDMA READ of an earlier write     kSlotBusy
//             request (its window and buffer are in use)
//   len       1 .. max_len (the slot's bytes: pages-per-io pages)   kLen
//   md        == the server's metadata bytes per block              kMetadata
//   len       with metadata: a whole number of page-sized blocks    kLen
//   rkey, iova, seq, csum_a, csum_b: not the server's to check. The rkey and IOVA name the
//             client's own window, and the client's device refuses what they do not open (the
//             responder checks the rkey); seq and the checksums are echoed or compared, never
//             used as an index or a size.
#pragma once

#include <cstdint>

#include "common.hpp"

namespace rdmafwd {

struct RpcLimits {
  uint32_t depth = 0;      // server slots
  uint32_t max_len = 0;    // bytes a slot holds (pages-per-io x page size)
  uint32_t page_size = 0;  // a block of --metadata
  uint32_t metadata = 0;   // bytes of metadata per block (0: none)
};

enum class RpcVerdict : uint8_t {
  kOk,
  kBye,
  kShort,
  kMagic,
  kOp,
  kSlot,
  kSlotBusy,
  kLen,
  kMetadata
};

inline const char* rpc_verdict_name(RpcVerdict v) noexcept {
  switch (v) {
    case RpcVerdict::kOk:
      return "ok";
    case RpcVerdict::kBye:
      return "goodbye";
    case RpcVerdict::kShort:
      return "a request shorter than its header";
    case RpcVerdict::kMagic:
      return "no request magic";
    case RpcVerdict::kOp:
      return "an unknown operation";
    case RpcVerdict::kSlot:
      return "a slot beyond the server's io-depth";
    case RpcVerdict::kSlotBusy:
      return "a slot whose previous request is still in progress";
    case RpcVerdict::kLen:
      return "a length outside the slot";
    case RpcVerdict::kMetadata:
      return "another metadata size than the server's";
  }
  return "unknown";
}

// `busy(slot)`: is the server slot still serving an earlier request (only asked for slot <
// depth).
template <class Busy>
inline RpcVerdict check_rpc_request(const RpcReq& q, uint32_t byte_len, const RpcLimits& lim,
                                    Busy&& busy) noexcept {
  if (byte_len < sizeof(RpcReq)) return RpcVerdict::kShort;
  if (q.magic != kReqMagic) return RpcVerdict::kMagic;
  if (q.op == kOpBye) return RpcVerdict::kBye;
  if (q.op != kOpRead && q.op != kOpWrite) return RpcVerdict::kOp;
  if (q.slot >= lim.depth) return RpcVerdict::kSlot;
  if (busy(q.slot)) return RpcVerdict::kSlotBusy;
  if (q.len == 0 || q.len > lim.max_len) return RpcVerdict::kLen;
  if (q.md != lim.metadata) return RpcVerdict::kMetadata;
  if (lim.metadata && (lim.page_size == 0 || q.len % lim.page_size != 0)) return RpcVerdict::kLen;
  return RpcVerdict::kOk;
}

// ---- relay (engines/relay.cpp): check_relay_message ----
//   byte_len  1 .. slot_bytes (the receive slot: the device refuses more, a local length error;
//             a zero-length SEND would map an empty window, which the window layer refuses, and
//             stall relay-out behind it)
// The payload itself is the client's: relayed to its own sink untouched, never read by the
// server but for the goodbye (a whole RpcReq with kReqMagic and kOpBye) and the byte count.
inline bool check_relay_message(uint32_t byte_len, uint32_t slot_bytes) noexcept {
  return byte_len != 0 && byte_len <= slot_bytes;
}

}  // namespace rdmafwd
