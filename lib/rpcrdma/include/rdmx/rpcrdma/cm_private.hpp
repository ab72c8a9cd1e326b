// RFC 8797: the RDMA-CM private data RPC-over-RDMA version 1 peers exchange when they connect
// (rdma_connect's and rdma_accept's private_data), as Linux defines it (include/linux/sunrpc/
// rpc_rdma.h, struct rpcrdma_connect_private) and both its client (xprtrdma/verbs.c) and server
// (svc_rdma_transport.c, svc_rdma_parse_connect_private) use it:
//
//    0       4         5       6           7
//   +-------+---------+-------+-----------+--------------+
//   | magic | version | flags | send size | receive size |      8 bytes, magic big-endian
//   +-------+---------+-------+-----------+--------------+
//   magic 0xf6ab0e18; version 1; flags bit 0: the sender accepts SEND_WITH_INV (Remote
//   Invalidation); sizes: the sender's inline send / receive threshold as (bytes / 1024) - 1.
//
// A peer that sends no such data (too short, another magic or version) is assumed to use
// RFC 8166's 1024-byte thresholds and not to accept remote invalidation. Pure functions,
// noexcept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <rdmx/rpcrdma/codec.hpp>

namespace rdmx::rpcrdma {

inline constexpr uint32_t kCmPrivateMagic = 0xf6ab0e18;
inline constexpr uint8_t kCmPrivateVersion = 1;
inline constexpr size_t kCmPrivateBytes = 8;
inline constexpr uint8_t kCmRemoteInvalidation = 1;  // flags bit 0
inline constexpr uint32_t kCmSizeUnit = 1024;
inline constexpr uint32_t kCmMaxSize = 256 * kCmSizeUnit;  // an 8-bit (bytes / 1024) - 1

struct CmPrivate {
  bool present = false;              // decode: the peer sent RFC 8797 private data
  bool remote_invalidation = false;  // the sender accepts SEND_WITH_INV naming its memory
  uint32_t inline_send = kDefaultInlineThreshold;  // bytes
  uint32_t inline_recv = kDefaultInlineThreshold;
};

// Writes `p` as 8 bytes. False (nothing written) when a size is not a multiple of 1024 in
// [1024, 256 KiB].
bool encode_cm_private(const CmPrivate& p, std::span<uint8_t, kCmPrivateBytes> out) noexcept;

// Reads a peer's private data (any length; extra bytes are ignored, as the format only grows at
// its end). Not RFC 8797 data: present = false and the defaults.
CmPrivate decode_cm_private(std::span<const uint8_t> in) noexcept;

// What a connection runs with, from each side's point of view: the most this side may send
// inline (its send threshold, capped by the peer's receive threshold), the most it must be able
// to receive, and whether the peer may invalidate this side's memory with SEND_WITH_INV: this
// side offered it (the requester offers, the responder decides from that flag alone, as Linux's
// svc_rdma_parse_connect_private does). The requester passes peer_may_invalidate to
// CallChunks::retire. The other way round, may_invalidate_peer: the peer offered its memory
// (its flag), so this side may answer with SEND_WITH_INV naming the peer's chunks; the
// responder replies with a plain SEND otherwise (RFC 8797 section 4, Remote Invalidation).
struct CmAgreement {
  uint32_t inline_send = kDefaultInlineThreshold;
  uint32_t inline_recv = kDefaultInlineThreshold;
  bool peer_may_invalidate = false;
  bool may_invalidate_peer = false;
};
CmAgreement agree(const CmPrivate& local, const CmPrivate& peer) noexcept;

}  // namespace rdmx::rpcrdma
