// The wire between two emulated ports: four single-producer/single-consumer rings of fixed-size
// slots (per direction: requests and responses, so draining responses never needs ring space and
// two devices cannot deadlock each other). The same layout serves one process (heap) and two
// processes (a shared mapping under /dev/shm). Slots hold RC-shaped packets with their payload
// copied in; no pointer ever crosses the wire.
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
  kDrop,      // no response will come (no such QP / wrong state): models the retry timer firing
};
inline constexpr uint8_t kPktFirst = 1;
inline constexpr uint8_t kPktLast = 2;
inline constexpr uint8_t kPktSolicited = 4;

struct PktHdr {
  PktOp op;
  uint8_t flags;
  uint8_t syndrome;
  uint8_t pad0;
  uint32_t dst_qpn;
  uint32_t src_qpn;
  uint32_t msn;  // message sequence number of the requester's SQ (PSN of the message)
  uint32_t gen;  // requester retransmission generation (echoed in responses)
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
  uint8_t pad[64 - sizeof(PktHdr)];
  uint8_t payload[kWireMtu];
};

struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;  // producer
  uint8_t pad0[64 - 8];
  std::atomic<uint64_t> tail;  // consumer
  uint8_t pad1[64 - 8];
};

inline constexpr uint64_t kWireMagic = 0x726d64782d776972ull;  // "rdmx-wir"
inline constexpr uint32_t kWireVersion = 2;                    // 2: creator_pid

// Lives at the start of the (possibly shared) mapping.
struct WireShared {
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t n_slots;
  int32_t creator_pid;  // the process that created the wire: a later one removes it once it died
  std::atomic<uint32_t> side_open[2];
  RingCtl ctl[4];  // ring r = dir * 2 + cls; dir 0 = side 0 -> side 1
  WireSlot slots[4][kWireSlots];
};

enum class WireClass : int { kReq = 0, kResp = 1 };

class Wire {
 public:
  ~Wire();
  Wire(const Wire&) = delete;
  Wire& operator=(const Wire&) = delete;

  static std::shared_ptr<Wire> make_local();
  static Result<std::shared_ptr<Wire>> create_shm(const std::string& name);
  static Result<std::shared_ptr<Wire>> attach_shm(const std::string& name);
  // RoCE v2 over the network (roce_link.hpp): the rings of an in-process wire whose side 1 is
  // played by the link, which the device thread pumps.
  static Result<std::shared_ptr<Wire>> make_roce(const RoceOptions& opt);
  // Two RoCE wires in one process whose links meet on a lossless packet ring per direction
  // (RingCarrier) instead of the network: RoCE v2 packets, the link's RC rules, no sockets.
  // `a` and `b` give each side's address (any; nothing is routed) and window and MTU.
  static Result<std::pair<std::shared_ptr<Wire>, std::shared_ptr<Wire>>> make_roce_ring_pair(
      const RoceOptions& a, const RoceOptions& b);
  detail::RoceLink* roce() noexcept { return link_.get(); }
  // A link below the rings owns loss: it resends (timeouts, sequence and RNR NAKs) and hands
  // the engine only each message's final verdict, so the engine sends every message once. The
  // in-process and shared-memory rings lose nothing and resend nothing: there the engine's
  // requester keeps its message-level recovery (Engine::go_back, Engine::timeouts).
  bool link_owns_loss() const noexcept { return link_ != nullptr; }
  // Largest payload per packet this wire carries (the RoCE wire's path MTU).
  uint32_t mtu_cap() const noexcept { return mtu_cap_; }

  bool shared_memory() const noexcept { return shm_; }
  uint64_t token() const noexcept { return token_; }

  // Producer side (device on `side`): a slot to fill, or nullptr when the ring is full.
  WireSlot* tx_slot(int side, WireClass c) noexcept;
  uint32_t tx_free(int side, WireClass c) const noexcept;
  void tx_commit(int side, WireClass c) noexcept;
  // Consumer side: the next packet for `side`, or nullptr.
  const WireSlot* rx_slot(int side, WireClass c) noexcept;
  void rx_pop(int side, WireClass c) noexcept;

  bool peer_open(int side) const noexcept;

  // Side registration (EmuDevice::open / destructor).
  Status attach(int side, detail::Engine* eng, Mode mode);
  void detach(int side) noexcept;
  // In-process only: the engine on a side (for inline pumping), or nullptr.
  detail::Engine* engine(int side) noexcept;
  std::mutex& reg_mu() noexcept { return mu_; }

 private:
  Wire() = default;
  static std::shared_ptr<Wire> over_link(std::unique_ptr<detail::RoceLink> link,
                                         const RoceOptions& opt);
  RingCtl& ctl(int r) noexcept { return sh_->ctl[r]; }

  WireShared* sh_ = nullptr;
  size_t map_len_ = 0;
  bool shm_ = false;
  bool creator_ = false;
  std::string shm_name_;
  uint64_t token_ = 0;
  std::mutex mu_;
  detail::Engine* eng_[2] = {nullptr, nullptr};
  std::shared_ptr<void> carrier_mem_;  // a ring pair's packet rings (outlive link_)
  std::unique_ptr<detail::RoceLink> link_;
  uint32_t mtu_cap_ = kWireMtu;
  Mode mode_[2] = {Mode::kInline, Mode::kInline};
};

}  // namespace rdmx::emu
