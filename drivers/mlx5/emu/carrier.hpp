// A carrier moves encoded RoCE v2 packets (IPv4 header through ICRC, as roce::encode writes them)
// between the RC links of two emu devices. It knows nothing of RC: PSNs, ACKs, retransmission
// and the responder rules are the link's (roce_link.hpp). A carrier may lose, reorder or
// duplicate packets; the link above it recovers, as an RC QP does over a real Ethernet.
//
// UdpCarrier: raw IPv4 sockets (UDP port 4791) with injected impairments and an optional pcap.
// RingCarrier: a lossless SPSC ring of packet slots per direction, in memory the caller maps (the
// heap, or a /dev/shm mapping two processes share): the wire of two emu devices with no network.
//
// Everything runs in the device thread under the engine's mutex; the buffers are sized at open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include <rdmx/emu/emu.hpp>

#include "roce.hpp"
#include "wire.hpp"

namespace rdmx::emu::detail {

// One received packet: a view valid until the next recv_burst.
struct RxPkt {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
  bool truncated = false;  // longer than the receive buffer: not a packet this stack sent
};

// What the carrier counts (EmuStats::Roce's fields of the same names).
struct CarrierStats {
  uint64_t tx_packets = 0;
  uint64_t injected_loss = 0, injected_reorder = 0, injected_dup = 0;
  uint64_t ring_full = 0;  // RingCarrier: packets refused for lack of a free slot (not sent)
};

class Carrier {
 public:
  static constexpr unsigned kRxBatch = 16;  // the most packets one recv_burst returns

  virtual ~Carrier() = default;
  // Device thread. Puts one encoded packet on the wire toward `dst_ip` (host order); best
  // effort: a lossy carrier may drop, hold back or duplicate it. `now_ns` stamps the pcap.
  virtual void send(const uint8_t* pkt, size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept = 0;
  // Device thread. The producer's buffer for the next packet, to encode into in place: its
  // capacity in *cap; nullptr when the carrier takes no packet now (counted ring_full). A
  // send_buf() commits it; nothing else may be sent in between.
  virtual uint8_t* tx_buf(size_t* cap) noexcept = 0;
  // Device thread. Sends the `len` bytes encoded into the last tx_buf(), as send() would.
  virtual void send_buf(size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept = 0;
  // Device thread. Ends a round of sends: a packet held back for reordering goes now.
  virtual void flush(uint64_t now_ns) noexcept = 0;
  // Device thread. Receives up to `max` (<= kRxBatch) packets into `out`; returns how many.
  // Unless rx_keeps(), a packet is valid until the next recv_burst. With rx_keeps(), received
  // packets stay in place, and are not received again, until rx_release() frees them.
  virtual unsigned recv_burst(RxPkt* out, unsigned max) noexcept = 0;
  // Device thread. The last `n` packets of the last recv_burst were not taken: a packet ring
  // keeps them for the next recv_burst; a socket cannot (they are dropped, as a NIC drops what
  // it has no receive buffer for, and the peer's RC resends them).
  virtual void unread(unsigned n) noexcept { (void)n; }
  // Whether received packets stay valid until rx_release() (then the receiver may hand a
  // payload on in place instead of copying it out).
  virtual bool rx_keeps() const noexcept { return false; }
  // With rx_keeps(): the `n` oldest received packets not yet released are free again.
  virtual void rx_release(unsigned n) noexcept { (void)n; }
  // Device thread. How many packets send() takes now without refusing one (UINT32_MAX: no
  // limit the caller can see, as a socket's).
  virtual uint32_t tx_room() const noexcept = 0;
  // Whether packets cross a medium that can corrupt them, so that the ICRC is generated and
  // checked (IBTA vol. 1 Annex A17.4.1; a NIC does both in hardware, rxe_icrc.c in software).
  // A packet ring in memory has none: its packets are the encoder's own bytes, and computing a
  // CRC-32 over each byte twice in software would be the ring's largest cost.
  virtual bool icrc() const noexcept = 0;
  const CarrierStats& stats() const noexcept { return st_; }

 protected:
  CarrierStats st_;
};

class UdpCarrier final : public Carrier {
 public:
  // Opens the sockets on opt.local_ipv4 (needs CAP_NET_RAW) and the pcap; checks the
  // impairment fractions. Errors carry the address and the failing call.
  static Result<std::unique_ptr<UdpCarrier>> open(const RoceOptions& opt);
  ~UdpCarrier() override;
  UdpCarrier(const UdpCarrier&) = delete;
  UdpCarrier& operator=(const UdpCarrier&) = delete;

  void send(const uint8_t* pkt, size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept override;
  // A buffer of the carrier's own (a socket copies it anyway).
  uint8_t* tx_buf(size_t* cap) noexcept override {
    *cap = tx_buf_.size();
    return tx_buf_.data();
  }
  void send_buf(size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept override {
    send(tx_buf_.data(), len, dst_ip, now_ns);
  }
  void flush(uint64_t now_ns) noexcept override;
  unsigned recv_burst(RxPkt* out, unsigned max) noexcept override;
  uint32_t tx_room() const noexcept override { return UINT32_MAX; }
  bool icrc() const noexcept override { return true; }

 private:
  explicit UdpCarrier(const RoceOptions& opt) : opt_(opt), rng_(opt.seed) {}
  void xmit(const uint8_t* pkt, size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept;
  double uniform() noexcept { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  static constexpr size_t kRxBuf = 9216;
  RoceOptions opt_;
  int tx_fd_ = -1, rx_fd_ = -1, port_fd_ = -1;
  std::mt19937_64 rng_;  // impairments (seeded: reproducible)
  roce::Pcap pcap_;
  std::vector<uint8_t> tx_buf_;  // tx_buf(): one packet of the path MTU
  std::vector<uint8_t> held_;    // reordering: a packet held back behind the next one
  uint32_t held_len_ = 0, held_dst_ = 0;
  std::vector<uint8_t> rx_bufs_;
};

// One direction of a RingCarrier. No pointers and a fixed size, so that it can live in a mapping
// two processes share; a slot holds one packet of the largest path MTU with every header.
// Per direction. The sender stops at a full ring (tx_room), so a QP's window may exceed it.
inline constexpr uint32_t kPktSlots = 256;
static_assert((kPktSlots & (kPktSlots - 1)) == 0, "a power of two");
struct alignas(64) PktSlot {
  uint32_t len;
  uint32_t dst_ip;
  uint8_t pad[56];
  uint8_t bytes[(kWireMtu + roce::kMaxOverhead + 63) / 64 * 64];
};
struct PktRing {
  RingCtl ctl;  // head: the sender's, tail: the receiver's (free-running, acquire/release)
  PktSlot slots[kPktSlots];
};
// Sets an unused ring empty (before either side uses it).
void init_pkt_ring(PktRing* r) noexcept;

class RingCarrier final : public Carrier {
 public:
  // Sends on `tx`, receives from `rx`; the peer's carrier has them the other way round. The
  // rings outlive the carrier.
  RingCarrier(PktRing* tx, PktRing* rx) noexcept : tx_(tx), rx_(rx) {}
  // Copies the packet into the next free slot; with none free it is refused (counted
  // ring_full) and the RC link above resends it after its timer, as it would a packet an
  // Ethernet port dropped. The link sends only while tx_room() keeps a headroom, so that this
  // stays 0 in practice (roce_link.hpp, kHeadroom).
  void send(const uint8_t* pkt, size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept override;
  // The next free slot itself: the link encodes into the ring, no copy.
  uint8_t* tx_buf(size_t* cap) noexcept override;
  void send_buf(size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept override;
  void flush(uint64_t) noexcept override {}
  // The packets stay in their slots (no copy) until rx_release() gives the slots back.
  unsigned recv_burst(RxPkt* out, unsigned max) noexcept override;
  void unread(unsigned n) noexcept override { held_ -= n < held_ ? n : held_; }
  bool rx_keeps() const noexcept override { return true; }
  void rx_release(unsigned n) noexcept override;
  uint32_t tx_room() const noexcept override;
  bool icrc() const noexcept override { return false; }

 private:
  PktRing* tx_;
  PktRing* rx_;
  uint32_t held_ = 0;  // slots received and not yet released (from the ring's tail)
};

}  // namespace rdmx::emu::detail
