// Windows as RPC-over-RDMA chunks (rdmx/rpcrdma/chunks.hpp).
#include <rdmx/rpcrdma/chunks.hpp>

#include <infiniband/mlx5dv.h>

namespace rdmx::rpcrdma {

Errc CallChunks::map(win::PollCore& core, std::span<const uint64_t> pages, uint32_t access,
                     uint32_t first_byte_offset, uint64_t length, Segment* out,
                     ChunkStats& stats) noexcept {
  if (Errc e = can_map(length); e != Errc::kOk) return e;
  return hold(core.map(pages, access, first_byte_offset, length), out, stats);
}

Errc CallChunks::map_interleaved(win::PollCore& core, std::span<const win::InterleavedPart> parts,
                                 uint32_t blocks, uint32_t access, Segment* out,
                                 ChunkStats& stats) noexcept {
  uint64_t per_block = 0;
  for (const win::InterleavedPart& p : parts) per_block += p.bytes;
  if (Errc e = can_map(per_block * blocks); e != Errc::kOk) return e;
  return hold(core.map_interleaved(parts, blocks, access), out, stats);
}

Errc CallChunks::can_map(uint64_t length) const noexcept {
  if (retiring_) return Errc::kState;
  if (n_ == kMaxCallWindows) return Errc::kNoRoom;
  if (length > UINT32_MAX) return Errc::kOutOfRange;
  return Errc::kOk;
}

Errc CallChunks::hold(const win::MapResult& m, Segment* out, ChunkStats& stats) noexcept {
  if (!m.ok()) return m.errc;
  windows_[n_] = m.window;
  rkeys_[n_] = m.rkey;
  ++n_;
  ++stats.maps;
  out->handle = m.rkey;
  out->length = static_cast<uint32_t>(m.length);
  out->offset = m.iova;
  return Errc::kOk;
}

Errc CallChunks::retire(win::PollCore& core, const mlx5::Completion* reply,
                        bool remote_invalidation, ChunkStats& stats) noexcept {
  if (!retiring_) {
    retiring_ = true;
    agreed_ = remote_invalidation;
    // What frwr_reminv looks at: a successful receive that carried an invalidation (the CQE
    // opcode RESP_SEND_INV; the rkey in the immediate field).
    invalidated_ =
        reply && reply->recv && reply->ok() && reply->cqe_opcode == MLX5_CQE_RESP_SEND_INV;
    inv_rkey_ = invalidated_ ? reply->imm : 0;
  }
  bool posted = false;
  Errc e = Errc::kOk;
  for (; next_ < n_; ++next_) {
    win::Window* w = windows_[next_];
    const uint32_t rkey = rkeys_[next_];
    if (invalidated_ && rkey == inv_rkey_) {
      // The peer's NIC freed it on receipt (PollCore::poll took it back into the cache, where
      // it may already serve another map): it must not be touched.
      ++stats.remote_invalidations;
      if (!agreed_) ++stats.unagreed_remote_invalidations;
      continue;
    }
    if (w->state() != win::WindowState::kMapped || w->rkey() != rkey) {
      ++stats.already_invalid;
      continue;
    }
    e = core.unmap(w);
    if (e != Errc::kOk) break;
    posted = true;
    ++stats.local_invalidations;
  }
  if (posted) {
    core.flush();  // the doorbell makes the last invalidate signaled
    fence_ = core.qp().sq().pi();
  }
  return e;
}

Errc CallChunks::reset(const win::PollCore& core) noexcept {
  if (n_ && !done(core)) return Errc::kState;
  n_ = next_ = 0;
  retiring_ = invalidated_ = agreed_ = false;
  inv_rkey_ = 0;
  fence_ = 0;
  return Errc::kOk;
}

}  // namespace rdmx::rpcrdma
