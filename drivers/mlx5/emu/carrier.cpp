#include "carrier.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace rdmx::emu::detail {

namespace {

std::string ip_str(uint32_t ip) {
  char b[INET_ADDRSTRLEN];
  const in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, b, sizeof b);
  return b;
}

Status sys_error(const std::string& what) {
  const int e = errno;
  std::string msg = "emu: RoCE wire: " + what + ": " + std::strerror(e);
  if (e == EPERM || e == EACCES) msg += " (a raw IPv4 socket needs CAP_NET_RAW)";
  return make_error(Errc::kDeviceError, msg);
}

}  // namespace

Result<std::unique_ptr<UdpCarrier>> UdpCarrier::open(const RoceOptions& opt) {
  if (opt.loss < 0 || opt.loss >= 1 || opt.reorder < 0 || opt.reorder >= 1 || opt.duplicate < 0 ||
      opt.duplicate >= 1)
    return make_error(Errc::kInvalidArgument,
                      "emu: RoCE wire: loss, reorder and duplicate are fractions in [0, 1)");
  std::unique_ptr<UdpCarrier> c(new UdpCarrier(opt));
  const std::string where = ip_str(opt.local_ipv4);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(opt.local_ipv4);
  // IPPROTO_RAW implies IP_HDRINCL (raw(7)): the kernel sends our IP header as written, except
  // that it always fills the checksum and total length and fills the ID only when it is 0.
  c->tx_fd_ = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (c->tx_fd_ < 0) return sys_error("socket(SOCK_RAW, IPPROTO_RAW)").error();
  c->rx_fd_ = socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
  if (c->rx_fd_ < 0) return sys_error("socket(SOCK_RAW, IPPROTO_UDP)").error();
  if (bind(c->rx_fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
    return sys_error("bind raw socket to " + where).error();
  const int rcvbuf = 4 << 20;
  (void)setsockopt(c->rx_fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  // Claims UDP port 4791 on the address: no ICMP port-unreachable goes back for our packets, and
  // a second RoCE device (or rxe) on the same address is refused. Never read; the kernel drops
  // what overflows its small buffer.
  c->port_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->port_fd_ < 0) return sys_error("socket(SOCK_DGRAM)").error();
  local.sin_port = htons(roce::kUdpPort);
  if (bind(c->port_fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    if (errno == EADDRINUSE)
      return make_error(Errc::kBusy, "emu: RoCE wire: " + where +
                                         ":4791 is in use (another RoCE device on this address?)");
    return sys_error("bind " + where + ":4791 (is the address on this host?)").error();
  }
  const int small = 1;
  (void)setsockopt(c->port_fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  if (!opt.pcap.empty() && !c->pcap_.open(opt.pcap.c_str()))
    return sys_error("cannot write pcap " + opt.pcap).error();
  c->held_.resize(opt.mtu + roce::kMaxOverhead);
  c->tx_buf_.resize(opt.mtu + roce::kMaxOverhead);
  c->rx_bufs_.resize(size_t{kRxBatch} * kRxBuf);
  return c;
}

UdpCarrier::~UdpCarrier() {
  for (int fd : {tx_fd_, rx_fd_, port_fd_})
    if (fd >= 0) ::close(fd);
}

void UdpCarrier::xmit(const uint8_t* pkt, size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(dst_ip);
  if (sendto(tx_fd_, pkt, len, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) ==
      static_cast<ssize_t>(len))
    ++st_.tx_packets;
  if (pcap_.is_open()) pcap_.write(pkt, len, now_ns);
}

void UdpCarrier::send(const uint8_t* pkt, size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept {
  if (opt_.loss > 0 && uniform() < opt_.loss) {
    ++st_.injected_loss;
    return;
  }
  if (opt_.reorder > 0 && held_len_ == 0 && uniform() < opt_.reorder) {
    std::memcpy(held_.data(), pkt, len);
    held_len_ = static_cast<uint32_t>(len);
    held_dst_ = dst_ip;
    ++st_.injected_reorder;
    return;
  }
  xmit(pkt, len, dst_ip, now_ns);
  if (opt_.duplicate > 0 && uniform() < opt_.duplicate) {
    ++st_.injected_dup;
    xmit(pkt, len, dst_ip, now_ns);
  }
  flush(now_ns);
}

void UdpCarrier::flush(uint64_t now_ns) noexcept {
  if (!held_len_) return;
  const uint32_t n = held_len_;
  held_len_ = 0;
  xmit(held_.data(), n, held_dst_, now_ns);
}

unsigned UdpCarrier::recv_burst(RxPkt* out, unsigned max) noexcept {
  if (max > kRxBatch) max = kRxBatch;
  mmsghdr msgs[kRxBatch];
  iovec iov[kRxBatch];
  for (unsigned i = 0; i < max; ++i) {
    iov[i] = {rx_bufs_.data() + size_t{i} * kRxBuf, kRxBuf};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  const int got = recvmmsg(rx_fd_, msgs, max, MSG_DONTWAIT, nullptr);
  if (got <= 0) return 0;
  for (int i = 0; i < got; ++i)
    out[i] = RxPkt{rx_bufs_.data() + size_t(i) * kRxBuf, msgs[i].msg_len,
                   (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0};
  return static_cast<unsigned>(got);
}

// ---- RingCarrier -------------------------------------------------------------------------------
void init_pkt_ring(PktRing* r) noexcept {
  r->ctl.head.store(0, std::memory_order_relaxed);
  r->ctl.tail.store(0, std::memory_order_release);
}

uint32_t RingCarrier::tx_room() const noexcept {
  const uint64_t h = tx_->ctl.head.load(std::memory_order_relaxed);
  const uint64_t t = tx_->ctl.tail.load(std::memory_order_acquire);
  return static_cast<uint32_t>(kPktSlots - (h - t));
}

void RingCarrier::send(const uint8_t* pkt, size_t len, uint32_t dst_ip, uint64_t now_ns) noexcept {
  size_t cap = 0;
  uint8_t* b = len <= sizeof(PktSlot::bytes) ? tx_buf(&cap) : nullptr;
  if (!b) {
    if (len > sizeof(PktSlot::bytes)) ++st_.ring_full;
    return;
  }
  std::memcpy(b, pkt, len);
  send_buf(len, dst_ip, now_ns);
}

uint8_t* RingCarrier::tx_buf(size_t* cap) noexcept {
  if (tx_room() == 0) {
    ++st_.ring_full;
    return nullptr;
  }
  *cap = sizeof(PktSlot::bytes);
  return tx_->slots[tx_->ctl.head.load(std::memory_order_relaxed) & (kPktSlots - 1)].bytes;
}

void RingCarrier::send_buf(size_t len, uint32_t dst_ip, uint64_t) noexcept {
  const uint64_t h = tx_->ctl.head.load(std::memory_order_relaxed);
  PktSlot& s = tx_->slots[h & (kPktSlots - 1)];
  s.len = static_cast<uint32_t>(len);
  s.dst_ip = dst_ip;
  tx_->ctl.head.store(h + 1, std::memory_order_release);
  ++st_.tx_packets;
}

unsigned RingCarrier::recv_burst(RxPkt* out, unsigned max) noexcept {
  const uint64_t t = rx_->ctl.tail.load(std::memory_order_relaxed) + held_;
  const uint64_t h = rx_->ctl.head.load(std::memory_order_acquire);
  const unsigned n = static_cast<unsigned>(std::min<uint64_t>(h - t, std::min(max, kRxBatch)));
  for (unsigned i = 0; i < n; ++i) {
    const PktSlot& s = rx_->slots[(t + i) & (kPktSlots - 1)];
    out[i] = RxPkt{s.bytes, s.len, false};
  }
  held_ += n;
  return n;
}

void RingCarrier::rx_release(unsigned n) noexcept {
  n = std::min(n, held_);
  if (n == 0) return;
  held_ -= n;
  rx_->ctl.tail.store(rx_->ctl.tail.load(std::memory_order_relaxed) + n, std::memory_order_release);
}

}  // namespace rdmx::emu::detail
