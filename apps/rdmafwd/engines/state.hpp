// The state each forwarding engine owns in a Lane (rdmafwd.hpp): preallocated at setup, reset
// by the engine's start(), read and written by its poll lcore only. The Lane keeps what every
// engine shares (its cores, buffers, slot tables, counters); what one engine alone uses is here.
#pragma once

#include <cstdint>
#include <vector>

#include <rdmx/rpcrdma/chunks.hpp>
#include <rdmx/win/poll_core.hpp>

namespace rdmafwd {

struct Csum {
  uint64_t a = 0, b = 0;
  bool operator==(const Csum&) const = default;
};

// Unmaps a core refused for lack of SQ room, retried in order (engines/common.hpp,
// unmap_or_queue and retry_unmaps): umr, write/read and relay's source.
struct UnmapQueue {
  std::vector<rdmx::win::Window*> q;
  uint32_t n = 0;
};

// --fwd umr (engines/umr.cpp): the issue TSC of each I/O in flight, by I/O number modulo
// io-depth, and the client core's UMR completion counter when I/O number 0 was issued (two UMRs
// per I/O complete in SQ order: the counter tells how many I/Os completed).
struct UmrState {
  std::vector<uint64_t> issue_tsc;
  uint64_t umr_base = 0;
};

// --fwd write / read (engines/onesided.cpp): the peer's persistent windows over its slots (one
// process), unmapped once at stop; two-process client: the server's window over each of its
// slots (mapped by the server at the rendezvous), and for read the checksum of what each holds.
struct OneSidedState {
  std::vector<rdmx::win::Window*> targets;
  bool targets_unmapped = false;
  std::vector<uint32_t> remote_rkeys;
  std::vector<Csum> remote_csums;
};

// --fwd relay (engines/relay.cpp): messages the source may still inject; the window of each
// relay-in receive slot being forwarded; the receive slots waiting for a window or SQ room (a
// FIFO of p_recv_n); the sequence number the sink saw last.
struct RelayState {
  int64_t credits = 0;
  std::vector<rdmx::win::Window*> relay_w;
  std::vector<uint32_t> backlog;
  uint32_t backlog_head = 0, backlog_n = 0;
  uint64_t sink_seq = 0;
};

// --fwd rpc client (engines/rpc.cpp): each slot's call chunks and their counters; the slots
// whose reply came, their windows being retired (FIFO, `retiring_n` from `retiring_head`); the
// credits the server granted and the calls sent without a reply yet.
struct RpcClientState {
  std::vector<rdmx::rpcrdma::CallChunks> calls;
  rdmx::rpcrdma::ChunkStats chunk_stats;
  std::vector<uint32_t> retiring;
  uint32_t retiring_head = 0, retiring_n = 0;
  uint32_t granted = 1, outstanding = 0;
};

// --fwd rpc server (engines/rpc.cpp): calls received and not answered yet, and the credits the
// last reply granted (what the client goes by); receive slots held under a reply that belongs
// to no slot until its SEND completed, and the SQ producer past each one's last such SEND
// (hold_extra); by client slot, the SQ producer past the slot's last reply SEND (signaled); the
// calls for a slot still in service (its WRITE's RDMA READ running, its last reply's SEND not
// completed, an earlier call waiting), served in arrival order once it is free (serve_waiting):
// a FIFO of io-depth (the credits bound it), `waiting_for` counts each slot's.
struct RpcServerState {
  struct WaitingCall {
    rdmx::rpcrdma::Segment seg;
    uint64_t tsc = 0;
    uint32_t slot = 0, xid = 0, count = 0, proc = 0;
  };
  uint32_t outstanding = 0, granted = 1;
  uint32_t p_recv_held = 0;
  std::vector<uint64_t> extra_end;
  std::vector<uint64_t> reply_end;
  std::vector<WaitingCall> waiting;
  std::vector<uint32_t> waiting_for;
  uint32_t waiting_head = 0, n_waiting = 0;
  uint64_t count = 0;  // calls served (--corrupt-every counts them)
};

}  // namespace rdmafwd
