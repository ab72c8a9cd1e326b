// The wire between two emulated ports. Each side has an engine, a set of four private
// single-producer/single-consumer rings of fixed-size slots between that engine and its RC link
// (per direction: requests and responses, so draining responses never needs ring space), and the
// link (roce_link.hpp), which owns every RC rule: PSNs, ACK/NAK and coalescing, retransmission,
// RNR, READ responses. The links speak RoCE v2 packets over a carrier: on an in-process or
// shared-memory wire a lossless packet ring per direction (RingCarrier) in the heap or in a
// /dev/shm mapping two processes share; on a RoCE wire the network (UdpCarrier). Slots hold
// RC-shaped messages with their payload copied in, or, from the link to the engine, pointing at
// a received packet's payload in the carrier's packet ring (WireSlot::ext). The rings are the
// process's own: no pointer ever crosses a process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <rdmx/emu/emu.hpp>

namespace rdmx::emu {

namespace detail {
class Engine;
class RoceLink;
}  // namespace detail

// Packet kinds and operations.
enum class PktOp : uint8_t {
  // requests
  kWrite = 1,
  kWriteImm,
  kRead,
  kSend,
  kSendImm,
  kSendInv,
  // responses
  kAck = 16,
  kNak,       // syndrome = the requester's CQE syndrome (remote access, invalid request, ...)
  kRnrNak,    // receiver not ready: retry later
  kReadResp,  // read-response data
  kDrop,      // engine -> its link: the request is not taken (no such QP, wrong state); the link
              // drops it and expects it again, so the requester's retry timer runs out
};
inline constexpr uint8_t kPktFirst = 1;
inline constexpr uint8_t kPktLast = 2;
inline constexpr uint8_t kPktSolicited = 4;
// Engine -> link request: the payload is not in the slot; the link gathers it from memory
// through the WQE (Engine::regather) straight into the packet it encodes, as a NIC's DMA reads
// host memory when it builds the packet. The engine has checked that the gather succeeds.
inline constexpr uint8_t kPktInMemory = 8;

struct PktHdr {
  PktOp op;
  uint8_t flags;
  uint8_t syndrome;
  uint8_t pad0;
  uint32_t dst_qpn;
  uint32_t src_qpn;
  uint32_t msn;  // message sequence number of the requester's SQ (the link maps it to PSNs)
  uint32_t imm;  // immediate data or the key to invalidate
  uint32_t rkey;
  uint32_t len;      // payload bytes in this packet
  uint64_t raddr;    // remote address of this packet's first byte
  uint64_t offset;   // offset of this packet in the message
  uint64_t msg_len;  // total message length (read: bytes requested)
};
static_assert(sizeof(PktHdr) <= 64);

inline constexpr uint32_t kWireMtu = 4096;
inline constexpr uint32_t kWireSlots = 64;  // per ring, power of two

struct alignas(64) WireSlot {
  PktHdr h;
  // Link -> engine: when set, the payload is a received packet's own bytes in the carrier's
  // packet ring (Carrier::rx_keeps), valid until the engine pops this slot; else `payload`.
  // Rings::tx_slot clears it.
  const uint8_t* ext;
  alignas(64) uint8_t payload[kWireMtu];
  const uint8_t* data() const noexcept { return ext ? ext : payload; }
};
static_assert(offsetof(WireSlot, payload) == 64);

struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;  // producer
  uint8_t pad0[64 - 8];
  std::atomic<uint64_t> tail;  // consumer
  uint8_t pad1[64 - 8];
};

inline constexpr uint64_t kWireMagic = 0x726d64782d776972ull;  // "rdmx-wir"
// 2: creator_pid; 3: the mapping holds only the two links' packet rings (a RingCarrier each way).
// 4: 256 packet slots per direction.
inline constexpr uint32_t kWireVersion = 4;
// The link's window (unacknowledged request packets per QP) on an in-process or shared-memory
// wire: 32 I/Os of 16 pages in flight, as many as the message-level wire had. The link keeps
// only headers per packet, so a window costs 72 bytes a packet.
inline constexpr uint32_t kRingWindow = 512;

struct WireShared;  // the (possibly shared) mapping: wire.cpp

enum class WireClass : int { kReq = 0, kResp = 1 };

// The four rings between one side's engine (end 0) and its link (end 1), in process memory.
class Rings {
 public:
  Rings() noexcept;
  // Producer at `end`: a slot to fill, or nullptr when the ring is full.
  WireSlot* tx_slot(int end, WireClass c) noexcept;
  uint32_t tx_free(int end, WireClass c) const noexcept;
  void tx_commit(int end, WireClass c) noexcept;
  // Consumer at `end`: the next message for it, or nullptr.
  const WireSlot* rx_slot(int end, WireClass c) noexcept;
  void rx_pop(int end, WireClass c) noexcept;
  // Producer at `end`: the free-running index of the slot tx_slot() gives, and how many of
  // the messages it produced the consumer has popped (a message at index i is popped when
  // popped() > i).
  uint64_t produced(int end, WireClass c) const noexcept;
  uint64_t popped(int end, WireClass c) const noexcept;
  // Control path, with neither end running (the engine's mutex): every message still queued
  // for or from QP `qpn` (its source on the way to the link, its destination on the way to the
  // engine) is voided (QPN 0, which no QP has), so that its consumer drops it. A QP that is
  // connected again has nothing of its earlier connection left between engine and link, as
  // rxe drains a QP's work and packet queues when it resets it (Linux
  // drivers/infiniband/sw/rxe/rxe_qp.c rxe_qp_reset).
  void cancel(uint32_t qpn) noexcept;

 private:
  RingCtl ctl_[4];  // ring r = dir * 2 + cls; dir 0 = end 0 -> end 1
  WireSlot slots_[4][kWireSlots];
};

class Wire {
 public:
  ~Wire();
  Wire(const Wire&) = delete;
  Wire& operator=(const Wire&) = delete;

  static std::shared_ptr<Wire> make_local();
  static Result<std::shared_ptr<Wire>> create_shm(const std::string& name);
  static Result<std::shared_ptr<Wire>> attach_shm(const std::string& name);
  // RoCE v2 over the network: one device, on side 0, whose link's carrier is the UdpCarrier;
  // the device thread pumps it.
  static Result<std::shared_ptr<Wire>> make_roce(const RoceOptions& opt);
  // Two RoCE wires in one process whose links meet on a lossless packet ring per direction
  // (RingCarrier) instead of the network: RoCE v2 packets, the link's RC rules, no sockets.
  // `a` and `b` give each side's address (any; nothing is routed) and window and MTU.
  static Result<std::pair<std::shared_ptr<Wire>, std::shared_ptr<Wire>>> make_roce_ring_pair(
      const RoceOptions& a, const RoceOptions& b);
  // The RC link of `side` (every wire has one per side it serves).
  detail::RoceLink* link(int side) noexcept { return link_[side].get(); }
  // The engine<->link rings of `side`.
  Rings& rings(int side) noexcept { return *rings_[side]; }
  // A RoCE wire: peers are named by IPv4-mapped GIDs. Otherwise the two sides of this wire
  // name each other by its port token and their links' addresses are nominal (ring_ip).
  bool roce() const noexcept { return roce_; }
  // The nominal address of `side`'s link on an in-process or shared-memory wire: 192.0.2.1
  // and .2 (RFC 5737 documentation addresses); the packet rings route nothing.
  static constexpr uint32_t ring_ip(int side) noexcept {
    return 0xC0000201u + static_cast<uint32_t>(side);
  }
  // Largest payload per packet this wire carries (the RoCE wire's path MTU).
  uint32_t mtu_cap() const noexcept { return mtu_cap_; }

  bool shared_memory() const noexcept { return shm_; }
  uint64_t token() const noexcept { return token_; }

  // Engine side (device on `side`, end 0 of its rings): a slot to fill, or nullptr when full.
  WireSlot* tx_slot(int side, WireClass c) noexcept { return rings_[side]->tx_slot(0, c); }
  uint32_t tx_free(int side, WireClass c) const noexcept { return rings_[side]->tx_free(0, c); }
  void tx_commit(int side, WireClass c) noexcept { rings_[side]->tx_commit(0, c); }
  // The next message from the link for the engine on `side`, or nullptr.
  const WireSlot* rx_slot(int side, WireClass c) noexcept { return rings_[side]->rx_slot(0, c); }
  void rx_pop(int side, WireClass c) noexcept { rings_[side]->rx_pop(0, c); }

  bool peer_open(int side) const noexcept;

  // Side registration (EmuDevice::open / destructor).
  Status attach(int side, detail::Engine* eng, Mode mode);
  void detach(int side) noexcept;
  // In-process only: the engine on a side (for inline pumping), or nullptr.
  detail::Engine* engine(int side) noexcept;
  std::mutex& reg_mu() noexcept { return mu_; }

 private:
  Wire();
  static Result<std::shared_ptr<Wire>> over_rings(std::shared_ptr<Wire> w);
  static std::shared_ptr<Wire> over_link(std::unique_ptr<detail::RoceLink> link,
                                         const RoceOptions& opt);

  WireShared* sh_ = nullptr;
  size_t map_len_ = 0;
  bool shm_ = false;
  bool creator_ = false;
  bool roce_ = false;
  std::string shm_name_;
  uint64_t token_ = 0;
  std::mutex mu_;
  detail::Engine* eng_[2] = {nullptr, nullptr};
  std::unique_ptr<Rings> rings_[2];
  std::shared_ptr<void> carrier_mem_;  // a ring pair's packet rings (outlive link_)
  std::unique_ptr<detail::RoceLink> link_[2];
  uint32_t mtu_cap_ = kWireMtu;
  Mode mode_[2] = {Mode::kInline, Mode::kInline};
};

}  // namespace rdmx::emu
