// libFuzzer target: a hostile client against rdmafwd's server-side handling of what clients send,
// driven without a poll loop. The first input byte picks the part:
//
// even: the engines' requests (apps/rdmafwd/engines/peer_checks.hpp, what rpc.cpp and relay.cpp
//   run on every message). A server with two clients (lane 0 and lane 1; limits from the next
//   four bytes: io-depth, pages-per-io, page size, metadata) receives a sequence of events, each
//   one byte of kind and lane, then its fields:
//     0 rpc call: 1 byte n, then n bytes of message (RPC-over-RDMA header, ONC RPC call, NFSv3
//       arguments), decoded as rpc.cpp's server_request does: a header rpcrdma::decode refuses
//       is answered with RDMA_ERROR (the client served on; dropped only without an xid), the
//       rest goes through check_rpc_call
//     1 completion of the RDMA READ of slot N (1 byte): only when that READ is in flight
//     2, 3 relay message: 4 bytes byte_len (little-endian)
//   (kind: the event byte & 3, lane: bit 4)
//   For each accepted call the target does what server_request does with the values (the data
//   bytes [slot base, + count) of the sender's lane, its metadata [md base, + blocks x md), the
//   bytes moved through the client's segment) and checks each against an independent model:
//   the bytes a client may touch are its own lane's slots, one slot per call, never a slot whose
//   READ is still in flight; the server moves no more than the segment holds (a READ) and
//   exactly what it holds (a WRITE); a client never has more calls unanswered than the credits
//   granted (a READ is answered at once, a WRITE when its RDMA READ completed). A refused call
//   drops its sender (its later events are ignored, as the lane does); the other lane must go on
//   being served.
// odd: the rendezvous (lib/endpoint/rendezvous.cpp) as rdmafwd's server runs it: the rest of the
//   input arrives on a TCP-like socket (a socketpair) as the client's bytes; the server expects a
//   HELLO, then the INFO of (byte 0 >> 1) % 4 + 1 QPs (recv_info(expected)), then reads frames
//   until the bytes end. An INFO list it accepts must satisfy the model of a connectable list
//   (count, 24-bit QPN not 0/1/0xffffff, distinct QPNs, 24-bit PSN, unicast LID, no multicast
//   GID, MTU code <= 5), written here apart from the code under test.
// Any crash, sanitizer report, exit or model mismatch is a failure (__builtin_trap).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <rdmx/endpoint/rendezvous.hpp>
#include <rdmx/rpcrdma/codec.hpp>

#include "engines/peer_checks.hpp"

namespace {

using namespace rdmafwd;

struct Cursor {
  const uint8_t* p;
  size_t n;
  bool take(void* out, size_t k) {
    if (n < k) return false;
    std::memcpy(out, p, k);
    p += k;
    n -= k;
    return true;
  }
  bool byte(uint8_t& b) { return take(&b, 1); }
};

// ---- engines
// --------------------------------------------------------------------------------------
constexpr unsigned kLanes = 2;

struct Server {
  uint32_t depth, pages, page_size, md, slot_bytes, md_slot_bytes, recv_slot_bytes;
  // The model: each lane's data region is [lane * depth * slot_bytes, +depth * slot_bytes), its
  // metadata region likewise; byte offsets in 64 bits (no product of two 32-bit values wraps).
  std::array<std::vector<bool>, kLanes> reading;  // a WRITE's RDMA READ in flight, by slot
  std::array<bool, kLanes> dropped{};
  std::array<uint64_t, kLanes> served{}, errors{};
  std::array<uint32_t, kLanes> outstanding{};  // calls accepted and not answered
};

[[noreturn]] void fail() {
  __builtin_trap();
}

// `[off, off + len)` must lie inside `[lo, hi)`; 64-bit, len <= 2^32.
void within(uint64_t off, uint64_t len, uint64_t lo, uint64_t hi) {
  if (off < lo || off > hi || len > hi - off) fail();
}

void rpc_call(Server& s, unsigned lane, std::span<const uint8_t> msg) {
  namespace rr = rdmx::rpcrdma;
  rr::Header h;
  const rr::CodecResult r = rr::decode(msg, h, rr::Role::kCall);
  if (!r.ok()) {  // RDMA_ERROR to the xid, or dropped when there is none
    uint32_t xid = 0;
    if (rr::peek_xid(msg, &xid))
      ++s.errors[lane];
    else
      s.dropped[lane] = true;
    return;
  }
  // The handle the server handed out (the corpus's calls carry it); another is kHandle.
  static constexpr uint8_t kFh[8] = {'r', 'd', 'm', 'x', 'f', 'i', 'l', 'e'};
  const RpcLimits lim{s.depth, s.pages * s.page_size, s.page_size, s.md, s.depth, kFh};
  nfs::Call call;
  uint32_t slot = UINT32_MAX;
  const RpcVerdict v = check_rpc_call(
      h, msg.subspan(r.length), lim, s.outstanding[lane],
      [&](uint32_t k) { return s.reading[lane][k]; }, call, slot);
  if (v == RpcVerdict::kBye) return;
  if (v == RpcVerdict::kHandle) {  // answered NFS3ERR_BADHANDLE: nothing touched, served on
    if (call.fh.size() == sizeof kFh && std::equal(call.fh.begin(), call.fh.end(), kFh)) fail();
    return;
  }
  if (v != RpcVerdict::kOk) {
    s.dropped[lane] = true;
    return;
  }
  // Accepted: what server_request touches, against the model of what this client may touch.
  if (s.outstanding[lane] >= s.depth) fail();  // past the credits granted
  if (call.proc != nfs::kProcRead && call.proc != nfs::kProcWrite) fail();
  const uint64_t lane_data = uint64_t{lane} * s.depth * s.slot_bytes;
  const uint64_t lane_md = uint64_t{lane} * s.depth * s.md_slot_bytes;
  if (slot >= s.depth || s.reading[lane][slot]) fail();
  if (call.offset != uint64_t{slot} * s.slot_bytes) fail();
  const uint64_t slot_lo = lane_data + uint64_t{slot} * s.slot_bytes;
  if (call.count == 0) fail();
  within(slot_lo, call.count, slot_lo, slot_lo + s.slot_bytes);          // payload
  within(slot_lo, sizeof(PayloadHdr), slot_lo, slot_lo + s.slot_bytes);  // its header
  within(lane_data, uint64_t{slot + 1} * s.slot_bytes, lane_data,        // the lane
         lane_data + uint64_t{s.depth} * s.slot_bytes);
  uint64_t md_bytes = 0;
  if (s.md) {
    if (call.count % s.page_size != 0) fail();
    md_bytes = uint64_t{call.count / s.page_size} * s.md;
    const uint64_t md_lo = lane_md + uint64_t{slot} * s.md_slot_bytes;
    within(md_lo, md_bytes, md_lo, md_lo + s.md_slot_bytes);
  }
  // The bytes moved through the client's segment: count and its metadata.
  const uint64_t wire = call.count + md_bytes;
  if (call.proc == nfs::kProcRead) {
    if (h.n_writes != 1 || h.writes[0].n_segments != 1 || wire > h.writes[0].segments[0].length)
      fail();
  } else {
    if (h.n_reads != 1 || wire != h.reads[0].target.length ||
        h.reads[0].position != nfs::write_data_position(sizeof kFh))
      fail();
    s.reading[lane][slot] = true;
    ++s.outstanding[lane];  // answered when its READ completes
  }
  ++s.served[lane];
}

void engines(Cursor c) {
  uint8_t b[4];
  if (!c.take(b, 4)) return;
  Server s;
  s.depth = 1 + b[0] % 64;
  s.pages = 1 + b[1] % 32;
  s.page_size = 512u << (b[2] % 4);
  static constexpr uint32_t kMd[5] = {0, 8, 16, 64, 128};
  s.md = kMd[b[3] % 5];
  s.slot_bytes = s.pages * s.page_size;
  s.md_slot_bytes = metadata_pages(s.pages, s.md, s.page_size) * s.page_size;
  s.recv_slot_bytes = std::min<uint32_t>(s.pages, 16) * s.page_size;
  for (auto& r : s.reading) r.assign(s.depth, false);
  uint8_t ev = 0;
  while (c.byte(ev)) {
    const unsigned lane = (ev >> 4) % kLanes;
    switch (ev & 3) {
      case 0: {
        uint8_t len = 0;
        if (!c.byte(len) || c.n < len) return;
        const std::span<const uint8_t> msg(c.p, len);
        c.p += len;
        c.n -= len;
        if (!s.dropped[lane]) rpc_call(s, lane, msg);
        break;
      }
      case 1: {
        uint8_t slot = 0;
        if (!c.byte(slot)) return;
        if (!s.dropped[lane] && slot < s.depth && s.reading[lane][slot]) {
          s.reading[lane][slot] = false;  // server_read_done: the reply goes
          --s.outstanding[lane];
        }
        break;
      }
      default: {
        uint32_t len = 0;
        if (!c.take(&len, 4)) return;
        if (s.dropped[lane]) break;
        if (!check_relay_message(len, s.recv_slot_bytes)) {
          s.dropped[lane] = true;
          break;
        }
        // relay_forward maps ceil(len / page) pages of the receive slot.
        const uint64_t n_pages = (uint64_t{len} + s.page_size - 1) / s.page_size;
        if (n_pages == 0 || n_pages * s.page_size > s.recv_slot_bytes) fail();
        break;
      }
    }
  }
}

// ---- rendezvous
// -----------------------------------------------------------------------------------
bool connectable(const std::vector<rdmx::mlx5::ConnectInfo>& v, size_t expected) {
  if (v.size() != expected) return false;
  for (size_t i = 0; i < v.size(); ++i) {
    const auto& ci = v[i];
    if (ci.qpn < 2 || ci.qpn >= 0xffffff || ci.psn > 0xffffff || ci.lid >= 0xc000 ||
        ci.gid[0] == 0xff || ci.path_mtu > 5)
      return false;
    for (size_t j = i + 1; j < v.size(); ++j)
      if (v[j].qpn == ci.qpn) return false;
  }
  return true;
}

void rendezvous(uint8_t mode, Cursor c) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fail();
  ::fcntl(sv[0], F_SETFL, O_NONBLOCK);
  ::fcntl(sv[1], F_SETFL, O_NONBLOCK);
  size_t off = 0;
  while (off < c.n) {  // a socketpair holds far more than -max_len
    const ssize_t k = ::write(sv[1], c.p + off, c.n - off);
    if (k <= 0) break;
    off += static_cast<size_t>(k);
  }
  ::shutdown(sv[1], SHUT_WR);
  rdmx::endpoint::Channel ch(sv[0], "fuzz-client");
  const rdmx::endpoint::Wait w{std::chrono::milliseconds(20)};
  const size_t expected = (mode >> 1) % 4 + 1;
  if (ch.expect(rdmx::endpoint::FrameType::kHello, w)) {
    auto infos = ch.recv_info(expected, w);
    if (infos && !connectable(infos.value(), expected)) fail();
    // What follows (a second INFO, anything) is read frame by frame until the bytes end.
    for (int i = 0; i < 64 && ch.recv(w); ++i) {
    }
  }
  ::close(sv[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Cursor c{data + 1, size - 1};
  if (data[0] & 1)
    rendezvous(data[0], c);
  else
    engines(c);
  return 0;
}
