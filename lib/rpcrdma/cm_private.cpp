// RFC 8797 connection private data (rdmx/rpcrdma/cm_private.hpp).
#include <rdmx/rpcrdma/cm_private.hpp>

#include <algorithm>

namespace rdmx::rpcrdma {

namespace {

bool size_ok(uint32_t bytes) noexcept {
  return bytes >= kCmSizeUnit && bytes <= kCmMaxSize && bytes % kCmSizeUnit == 0;
}

}  // namespace

bool encode_cm_private(const CmPrivate& p, std::span<uint8_t, kCmPrivateBytes> out) noexcept {
  if (!size_ok(p.inline_send) || !size_ok(p.inline_recv)) return false;
  out[0] = static_cast<uint8_t>(kCmPrivateMagic >> 24);
  out[1] = static_cast<uint8_t>(kCmPrivateMagic >> 16);
  out[2] = static_cast<uint8_t>(kCmPrivateMagic >> 8);
  out[3] = static_cast<uint8_t>(kCmPrivateMagic);
  out[4] = kCmPrivateVersion;
  out[5] = p.remote_invalidation ? kCmRemoteInvalidation : 0;
  out[6] = static_cast<uint8_t>(p.inline_send / kCmSizeUnit - 1);
  out[7] = static_cast<uint8_t>(p.inline_recv / kCmSizeUnit - 1);
  return true;
}

CmPrivate decode_cm_private(std::span<const uint8_t> in) noexcept {
  CmPrivate p;
  if (in.size() < kCmPrivateBytes) return p;
  const uint32_t magic =
      uint32_t{in[0]} << 24 | uint32_t{in[1]} << 16 | uint32_t{in[2]} << 8 | uint32_t{in[3]};
  if (magic != kCmPrivateMagic || in[4] != kCmPrivateVersion) return p;
  p.present = true;
  p.remote_invalidation = (in[5] & kCmRemoteInvalidation) != 0;  // other flag bits: ignored
  p.inline_send = (uint32_t{in[6]} + 1) * kCmSizeUnit;
  p.inline_recv = (uint32_t{in[7]} + 1) * kCmSizeUnit;
  return p;
}

CmAgreement agree(const CmPrivate& local, const CmPrivate& peer) noexcept {
  CmAgreement a;
  a.inline_send = std::min(local.inline_send, peer.inline_recv);
  a.inline_recv = std::min(local.inline_recv, peer.inline_send);
  // The peer learns from this side's data that it may invalidate this side's memory.
  a.peer_may_invalidate = local.remote_invalidation;
  // And this side may invalidate the peer's when the peer said so (Linux's server sets
  // sc_snd_w_inv from the client's flag alone: svc_rdma_parse_connect_private).
  a.may_invalidate_peer = peer.remote_invalidation;
  return a;
}

}  // namespace rdmx::rpcrdma
