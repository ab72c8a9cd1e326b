// The RC link under an emu device, on every wire: it turns the engine's message-level packets
// (PktHdr) into RoCE v2 packets with per-packet PSNs, and back; a Carrier (carrier.hpp) moves
// the encoded packets (RingCarrier: a lossless packet ring per direction, in-process or in a
// /dev/shm mapping; UdpCarrier: raw IPv4 sockets, impairments, pcap). The engine speaks its own
// protocol (messages numbered by MSN, one verdict per message); this layer owns every RC rule:
// PSN sequencing from random initial PSNs, ACK coalescing, NAK PSN sequence error, duplicate
// detection, go-back-N retransmission on a timer with the QP's retry count, RNR retries with
// the QP's rnr_retry, "retry exceeded" when the peer is gone, READ responses and their
// duplicates, and the checks that make a blind forged packet harmless (source address, PSN
// against what is outstanding; doc/guides/security.md). The engine sends each message once and
// hears only its final verdict. RC rules modelled after IBTA vol. 1 9.7 (as implemented by Linux
// rxe: rxe_req.c, rxe_resp.c, rxe_comp.c); see doc/guides/emu.md "RoCEv2 wire".
//
// Everything runs in the device thread (inline mode: the posting thread's pump) under the
// engine's mutex: pump() drives the carrier (UDP: recvmmsg, sendto); poll cores never call it.
// Buffers are sized when a QP is connected.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include <rdmx/emu/emu.hpp>

#include "carrier.hpp"
#include "roce.hpp"
#include "wire.hpp"

namespace rdmx::emu {

class Wire;

namespace detail {

// A request opcode's shape: kind (0 send, 1 write, 2 read), first, last, the engine operation.
struct ReqShape {
  uint8_t kind;
  bool first, last;
  PktOp op;
};

// The packets a message of `len` bytes takes, at least one; for a READ, its responses' PSNs
// (rxe_req.c update_wqe_psn).
inline uint32_t read_psns(uint64_t len, uint32_t mtu) noexcept {
  return len == 0 ? 1 : static_cast<uint32_t>((len + mtu - 1) / mtu);
}

class Engine;

class RoceLink {
 public:
  // Over raw sockets (UdpCarrier), or over `carrier` when given (then opt's impairments and
  // pcap, which are the UdpCarrier's, must be unset).
  static Result<std::unique_ptr<RoceLink>> open(const RoceOptions& opt,
                                                std::unique_ptr<Carrier> carrier = nullptr);
  ~RoceLink() = default;
  RoceLink(const RoceLink&) = delete;
  RoceLink& operator=(const RoceLink&) = delete;

  uint32_t local_ip() const noexcept { return opt_.local_ipv4; }
  uint32_t mtu() const noexcept { return opt_.mtu; }
  // Control path (under the engine mutex).
  // The initial send PSN of QP `qpn`'s incarnation: drawn at random (24 bits) on the first call
  // and stated until forget() (a RESET, which also ends the old incarnation's transport), as
  // Linux rdma_cm (core/cma.c __rdma_create_id: a random 24-bit seq_num) and rdma-core's
  // libibverbs/examples/rc_pingpong.c (lrand48() & 0xffffff) choose the PSN a QP states
  // (ibv_modify_qp RTS sq_psn; the peer's RTR rq_psn), and as the dv backend does. A late packet
  // of an earlier incarnation thus falls, but for a 2^-24 chance, outside the next one's
  // expected PSN. Once the connection made with it carried a request, a reconnect without RESET
  // states the PSN after the last one sent: the old connection's packets are behind it.
  uint32_t sq_psn(uint32_t qpn);
  // rq_psn: the peer's initial send PSN (its ConnectInfo psn), the first PSN this QP expects;
  // first_msn: the engine's number for the first request message it will be handed (responder
  // side; the wire's MSN counts from 0 at connect, IBTA 9.7.5.1.x / rxe_qp.c resp.msn = 0).
  // `tm`: the QP's RC timers (retransmission timer, retries, RNR retries); `rnr_wait_ns`: how
  // long the requester waits after an RNR NAK before it sends the message again.
  void connect(uint32_t qpn, uint32_t peer_qpn, uint32_t peer_ip, uint32_t mtu, uint32_t rq_psn,
               uint32_t first_msn, const mlx5::RcTimers& tm, uint64_t rnr_wait_ns);
  void forget(uint32_t qpn);
  // A QP moved to error: it sends nothing more (no retransmission, no timer), in place.
  void stop(uint32_t qpn) noexcept;
  // Device thread (or the inline pump): moves messages between the engine's rings `w` (the
  // link is end 1) and the carrier. Returns true when it did work; *pending |= something
  // awaits an answer.
  bool pump(Rings& w, uint64_t now_ns, bool* pending) noexcept;
  // Inline mode: no wall-clock timers. The inline pump runs both devices and both links until a
  // round does no work; then nothing more can arrive, so each requester QP with packets
  // outstanding has its timer fire at once (fire_stalled: the RNR timer if it waits out an RNR
  // NAK, else the retransmission timer, counting its retries as a timeout would). The outcome
  // is the threaded one, independent of wall time.
  void set_stalled_only(bool on) noexcept { stalled_only_ = on; }
  // The engine whose messages this link sends: a retransmission gathers the payload again from
  // it (Engine::regather). nullptr while none is attached.
  void set_engine(Engine* e) noexcept { eng_ = e; }
  // Returns true when a timer fired.
  bool fire_stalled(Rings& w, uint64_t now_ns) noexcept;
  // Retransmission rounds (after a timeout or an RNR wait): EmuStats::retries.
  uint64_t retries() const noexcept { return retries_; }
  // Packets longer than their QP's path MTU, dropped: EmuStats::mtu_drops.
  uint64_t mtu_drops() const noexcept { return mtu_drops_; }
  // The link's counters with the carrier's (tx_packets, injected_*).
  EmuStats::Roce stats() const noexcept;

 private:
  static constexpr uint32_t kNoResend = 0xFFFFFFFF;
  // A sent, unacknowledged request packet: what rebuilds it, not its bytes. A retransmission
  // encodes it again and gathers its payload again from the engine (regather), as an mlx5
  // requester goes back to the WQE of the PSN (IBTA vol. 1 9.7.5; rxe_req.c req_retry).
  struct TxPkt {
    PktHdr h;  // the engine's message header of the packet (MSN, offset, length, keys)
    uint32_t psn = 0;
    bool ack_req = false;
  };
  struct Msg {  // a message of the requester awaiting its response
    uint32_t msn = 0;
    uint32_t first_psn = 0, last_psn = 0;  // READ: first .. first + N - 1
    bool read = false;
    uint32_t read_len = 0;
    uint32_t rd_pkts = 0;  // read-response packets delivered to the engine
  };
  struct RMsg {  // a message the responder handed to the engine, awaiting the engine's response
    uint32_t msn = 0, first_psn = 0, last_psn = 0;
    bool read = false;
    bool done = false;  // all its packets handed over
  };
  struct ReadRec {  // recent READs, for answering a duplicate (rxe_resp.c struct resp_res)
    uint32_t first_psn = 0, n = 0, msn = 0;
    uint64_t va = 0;  // the READ as first executed: a duplicate must ask for a part of it
    uint32_t len = 0, rkey = 0;
    uint32_t resp_psn = 0, resp_n = 0;  // the response stream in flight (a replay: from its PSN)
    bool valid = false;
  };
  struct Qp {
    uint32_t qpn = 0, peer_qpn = 0, peer_ip = 0, mtu = 0;
    uint32_t isn = 0;      // initial send PSN (what local_info stated)
    bool carried = false;  // a request was sent or executed on this connection
    uint16_t sport = 0;
    // requester
    uint32_t next_psn = 0;
    std::vector<TxPkt> tx;  // ring of sent, unacknowledged request packets (no payload)
    uint32_t tx_head = 0, tx_count = 0;
    std::vector<Msg> msgs;  // ring
    uint32_t m_head = 0, m_count = 0;
    uint64_t timer_ns = 0;   // oldest unacked packet's (re)send time; 0 = idle
    uint64_t ack_ns = 0;     // the QP's local ACK timeout (RcTimers::timeout); 0 = infinite
    uint32_t retry_cnt = 0;  // the QP's RcTimers::retry_cnt
    uint32_t retry_left = 0;
    uint32_t rnr_retry = 0;  // the QP's RcTimers::rnr_retry
    uint32_t rnr_left = 0;
    uint64_t rnr_wait_ns = 0;
    uint64_t rnr_until = 0;       // after an RNR NAK: nothing is sent before this time; 0 = none
    bool dead = false;            // retry exceeded or a fatal NAK: nothing more is sent
    uint32_t resend = kNoResend;  // go-back-N under way: the next unacknowledged packet to resend
    // An ACK covered messages the engine's ring had no room to complete: its PSN and whether
    // it covers that PSN, handed on first by the next pump (ack_up_to).
    bool owed = false;
    uint32_t owed_psn = 0;
    bool owed_inclusive = false;
    uint32_t last_seq_nak = 0xFFFFFFFF;
    // responder
    uint32_t epsn = 0;
    uint32_t rmsn = 0;   // the engine's number for the next request message
    uint32_t rmsn0 = 0;  // ... for the first one: AETH MSN = rmsn - rmsn0 (from 0 at connect)
    bool nak_sent = false;
    bool in_msg = false;  // inside a multi-packet request message
    uint8_t cur_kind = 0;
    uint32_t cur_rkey = 0, cur_imm = 0;
    uint64_t cur_va = 0, cur_len = 0, cur_off = 0;
    std::vector<RMsg> rmsgs;  // ring
    uint32_t r_head = 0, r_count = 0;
    uint32_t acked_psn = 0, acked_msn = 0;  // last ACK sent (at connect: rq_psn - 1, MSN 0)
    ReadRec reads[16];  // the READs served lately; >= every profile's max_qp_rd_atom, which
                        // bounds the READs outstanding (negotiated at connect)
    uint32_t read_next = 0;
  };

  RoceLink(const RoceOptions& opt, std::unique_ptr<Carrier> c)
      : opt_(opt), carrier_(std::move(c)), icrc_(carrier_->icrc()) {}
  uint32_t wire_msn(const Qp& q, uint32_t engine_msn) const noexcept {
    return (engine_msn - q.rmsn0) & roce::kPsnMask;
  }
  void on_duplicate(Rings& w, Qp& q, const roce::Packet& p) noexcept;
  Qp* find(uint32_t qpn) noexcept;
  bool tx_from_engine(Rings& w) noexcept;
  [[gnu::cold, gnu::noinline]] void orphan(Rings& w) noexcept;
  bool resp_from_engine(Rings& w) noexcept;
  bool rx_network(Rings& w) noexcept;
  unsigned rx_burst(Rings& w) noexcept;
  // One received packet; false when it was not taken (it waits in the carrier).
  bool rx_one(Rings& w, const RxPkt& pkt) noexcept;
  void payload_to(WireSlot* s, const roce::Packet& p) const noexcept;
  bool check_psn(Rings& w, Qp& q, const roce::Packet& p) noexcept;
  void on_request(Rings& w, Qp& q, const roce::Packet& p) noexcept;
  void to_engine_req(const Qp& q, const roce::Packet& p, const ReqShape& sh, WireSlot* s) noexcept;
  void advance_epsn(Qp& q, const roce::Packet& p, const ReqShape& sh) noexcept;
  // Responses: false when the packet was not taken (the engine owes completions before it;
  // rx_network leaves it for the next pump).
  bool on_response(Rings& w, Qp& q, const roce::Packet& p) noexcept;
  bool on_acknowledge(Rings& w, Qp& q, const roce::Packet& p) noexcept;
  bool on_read_response(Rings& w, Qp& q, const roce::Packet& p) noexcept;
  void flush_ack(Qp*& held) noexcept;
  RMsg* pending(Qp& q, uint32_t msn, uint32_t* at) noexcept;
  void pop_through(Qp& q, uint32_t at) noexcept;
  void on_verdict(Qp& q, const WireSlot& s, Qp*& held) noexcept;
  void send_read_resp(Qp& q, const WireSlot& s, RMsg* r, uint32_t at, Qp*& held) noexcept;
  void send_nak(Qp& q, const PktHdr& h, RMsg* r, uint32_t at) noexcept;
  void ack_up_to(Rings& w, Qp& q, uint32_t psn, bool inclusive) noexcept;
  bool to_engine_resp(Rings& w, Qp& q, const Msg& m, PktOp op, uint8_t synd) noexcept;
  void kill(Rings& w, Qp& q, uint8_t synd) noexcept;
  void on_rnr_nak(Rings& w, Qp& q, uint32_t psn) noexcept;
  void retransmit(Qp& q) noexcept;
  bool resend_some(Qp& q) noexcept;
  void pop_tx(Qp& q) noexcept;
  void timers(Rings& w, Qp& q) noexcept;
  void ack_expired(Rings& w, Qp& q) noexcept;
  void rnr_expired(Qp& q) noexcept;
  uint8_t rnr_code() const noexcept;
  uint16_t next_ip_id() noexcept {  // never 0: the kernel would write its own (raw(7))
    if (++ip_id_ == 0) ip_id_ = 1;
    return ip_id_;
  }
  void send_ack(Qp& q, uint8_t synd, uint32_t psn, uint32_t msn) noexcept;
  // Encodes `p` into the carrier's next buffer (RingCarrier: the packet ring's free slot) and
  // sends it; nothing when the carrier takes no packet now (counted ring_full).
  void emit(const roce::Packet& p) noexcept;
  // The request packet `t` of `q` as the wire carries it (its payload at `payload`).
  void req_packet(const Qp& q, const TxPkt& t, const uint8_t* payload, roce::Packet* p) noexcept;
  void send_req(Qp& q, const TxPkt& t, const uint8_t* payload) noexcept;
  // A received packet whose payload went to the engine in place (WireSlot::ext) is released
  // to the carrier once the engine popped its message; rx_release gives back every leading
  // packet that is done. `unpin`: copy the payloads still unread into their slots first, so
  // that every held packet goes (a receiver holds at most kHoldMax: the peer's sends need
  // ring room while this engine waits).
  void rx_release(Rings& w, bool unpin) noexcept;
  void hold(WireSlot* s, WireClass c, uint64_t pos) noexcept;
  // A new connection's state, on the buffers of a spare one when there is one (connect).
  std::unique_ptr<Qp> take_qp();
  // Keeps a connection's buffers for the next (forget, a reconnect), up to kSpareQps.
  void keep(std::unique_ptr<Qp> q);

  // Carrier slots new requests and the engine's responses leave free, for the ACKs and NAKs
  // the packets of one receive burst may cause.
  static constexpr uint32_t kHeadroom = Carrier::kRxBatch;
  // Packets rx_network takes from the carrier per pump at most (whole bursts). One burst: with
  // four, rdmafwd's two-process rpc run stalled on 1.07 s timeouts (cause not found yet).
  static constexpr uint32_t kRxBudget = Carrier::kRxBatch;
  static constexpr uint32_t kHoldMax = 2 * kRxBudget;
  static_assert(kHoldMax + Carrier::kRxBatch + kHeadroom <= kPktSlots);

  RoceOptions opt_;
  std::unique_ptr<Carrier> carrier_;
  bool icrc_;  // the carrier's Carrier::icrc(): generate and check the ICRC
  bool stalled_only_ = false;
  uint64_t retries_ = 0, mtu_drops_ = 0;
  uint16_t ip_id_ = 0;
  uint64_t now_ = 0;
  std::unordered_map<uint32_t, std::unique_ptr<Qp>> qps_;
  static constexpr size_t kSpareQps = 8;
  std::vector<std::unique_ptr<Qp>> spare_;  // forgotten connections' buffers (take_qp)
  EmuStats::Roce st_;
  std::mt19937 psn_rng_{std::random_device{}()};   // initial PSNs (never reproducible)
  std::unordered_map<uint32_t, uint32_t> sq_psn_;  // per QP, stated but not yet connected
  Engine* eng_ = nullptr;
  // Received packets not yet released to the carrier (rx_keeps), oldest first: the engine
  // message that reads its payload in place (slot, ring class, ring index) or slot nullptr.
  struct Held {
    WireSlot* slot;
    uint64_t pos;
    uint64_t pump;  // pumps_ when it was received
    WireClass cls;
  };
  Held held_[kPktSlots];
  uint32_t held_head_ = 0, held_n_ = 0;
  uint64_t pumps_ = 0;  // rx_network calls
  Held handed_{};       // set by the packet's handler when it handed the payload on in place
};

}  // namespace detail
}  // namespace rdmx::emu
