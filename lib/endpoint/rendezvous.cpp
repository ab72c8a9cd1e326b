// TCP rendezvous (protocol, waits and errors: include/rdmx/endpoint/rendezvous.hpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include <rdmx/endpoint/rendezvous.hpp>

namespace rdmx::endpoint {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kMagic[4] = {'R', 'D', 'X', 'R'};
constexpr int kSliceMs = 50;  // longest sleep between two looks at the cancel flag

std::string errno_text(int e) {
  return std::strerror(e);
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char b[32];
  if (ms.count() % 1000 == 0)
    std::snprintf(b, sizeof b, "%lld s", static_cast<long long>(ms.count() / 1000));
  else
    std::snprintf(b, sizeof b, "%.3g s", static_cast<double>(ms.count()) / 1000.0);
  return b;
}

std::string sockaddr_text(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    std::string out = "[";
    out.append(host).append("]:").append(std::to_string(port));
    return out;
  }
  return "?";
}

// Waits until fd is ready for `events`, the deadline passes or the cancel flag is set.
// Returns 1 ready, 0 timeout, -1 interrupted (flag), -2 error (errno set).
bool cancelled(const Wait& w) {
  return (w.cancel && w.cancel->load()) || (w.cancel_flag && *w.cancel_flag);
}

int wait_fd(int fd, short events, Clock::time_point deadline, const Wait& w) {
  for (;;) {
    if (cancelled(w)) return -1;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    // One look even when the time is up: what is already there counts.
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, kSliceMs)));
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return -2;
    if (left <= 0) return 0;
  }
}

Error interrupted(const std::string& what) {
  return make_error(Errc::kState, "interrupted while " + what);
}

Result<long> port_number(std::string_view v, std::string_view whole) {
  long n = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n < 0 || n > 65535)
    return make_error(Errc::kInvalidArgument, "'" + std::string(whole) + "': port '" +
                                                  std::string(v) + "' is not a number in 0..65535");
  return n;
}

// Splits "HOST:PORT", "[V6]:PORT", "HOST", "[V6]"; has_port tells whether a port was there.
Result<HostPort> split_host_port(std::string_view s, bool& has_port) {
  HostPort hp;
  has_port = false;
  std::string_view host = s, port;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos)
      return make_error(Errc::kInvalidArgument, "'" + std::string(s) + "': no closing ']'");
    host = s.substr(1, close - 1);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return make_error(Errc::kInvalidArgument,
                          "'" + std::string(s) + "': expected ':PORT' after ']'");
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = s.rfind(':');
    if (colon != std::string_view::npos) {
      if (s.find(':') != colon)
        return make_error(Errc::kInvalidArgument, "'" + std::string(s) +
                                                      "': write an IPv6 address in brackets, "
                                                      "[ADDR]:PORT");
      host = s.substr(0, colon);
      port = s.substr(colon + 1);
      has_port = true;
    }
  }
  hp.host = std::string(host);
  if (has_port) {
    RDMX_TRY_ASSIGN(const long n, port_number(port, s));
    hp.port = static_cast<uint16_t>(n);
  }
  return hp;
}

struct AddrInfo {
  addrinfo* ai = nullptr;
  ~AddrInfo() {
    if (ai) ::freeaddrinfo(ai);
  }
};

Status resolve(const HostPort& hp, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE | AI_NUMERICSERV : AI_NUMERICSERV;
  const std::string port = std::to_string(hp.port);
  const int rc =
      ::getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), port.c_str(), &hints, &out.ai);
  if (rc != 0 || !out.ai)
    return make_error(Errc::kInvalidArgument,
                      "cannot resolve '" + hp.host +
                          "': " + (rc == EAI_SYSTEM ? errno_text(errno) : ::gai_strerror(rc)));
  return {};
}

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

}  // namespace

const char* frame_type_name(FrameType t) noexcept {
  switch (t) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kWelcome:
      return "welcome";
    case FrameType::kInfo:
      return "connection info";
    case FrameType::kReady:
      return "ready";
    case FrameType::kRefuse:
      return "refusal";
    case FrameType::kBye:
      return "goodbye";
  }
  return "unknown";
}

std::string HostPort::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<HostPort> parse_listen_address(std::string_view s) {
  if (s.empty()) return make_error(Errc::kInvalidArgument, "empty listen address ([ADDR:]PORT)");
  // A bare number is a port.
  if (s.find_first_not_of("0123456789") == std::string_view::npos) {
    RDMX_TRY_ASSIGN(const long n, port_number(s, s));
    return HostPort{"0.0.0.0", static_cast<uint16_t>(n)};
  }
  bool has_port = false;
  RDMX_TRY_ASSIGN(HostPort hp, split_host_port(s, has_port));
  if (!has_port)
    return make_error(Errc::kInvalidArgument,
                      "listen address '" + std::string(s) + "' has no port ([ADDR:]PORT)");
  if (hp.host.empty()) hp.host = "0.0.0.0";
  return hp;
}

Result<HostPort> parse_peer_address(std::string_view s) {
  bool has_port = false;
  RDMX_TRY_ASSIGN(HostPort hp, split_host_port(s, has_port));
  if (hp.host.empty())
    return make_error(Errc::kInvalidArgument,
                      "peer address '" + std::string(s) + "' has no host (HOST[:PORT])");
  if (!has_port) hp.port = kDefaultRendezvousPort;
  if (hp.port == 0)
    return make_error(Errc::kInvalidArgument, "peer address '" + std::string(s) + "': port 0");
  return hp;
}

// ---- Channel -----------------------------------------------------------------------------------

Channel::Channel(Channel&& o) noexcept
    : fd_(o.fd_), peer_(std::move(o.peer_)), rx_(std::move(o.rx_)) {
  o.fd_ = -1;
}

Channel& Channel::operator=(Channel&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    peer_ = std::move(o.peer_);
    rx_ = std::move(o.rx_);
    o.fd_ = -1;
  }
  return *this;
}

Channel::~Channel() {
  close();
}

void Channel::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<Channel> Channel::connect(const HostPort& to, Wait w) {
  AddrInfo ai;
  RDMX_TRY(resolve(to, false, ai), "peer " + to.str());
  const auto deadline = Clock::now() + w.timeout;
  std::string last = "no address";
  for (;;) {
    for (addrinfo* a = ai.ai; a; a = a->ai_next) {
      const int fd =
          ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) {
        last = errno_text(errno);
        continue;
      }
      Channel c(fd, to.str());
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        const int r = wait_fd(fd, POLLOUT, deadline, w);
        if (r == -1) return interrupted("connecting to " + to.str());
        if (r == 0) {
          last = "no answer";
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return c;
      }
      last = errno_text(errno);
    }
    // Refused (no server yet) or unreachable: try again until the budget is spent.
    if (cancelled(w)) return interrupted("connecting to " + to.str());
    if (Clock::now() >= deadline)
      return make_error(Errc::kTimeout, "no server at " + to.str() + " within " +
                                            seconds_text(w.timeout) + " (last attempt: " + last +
                                            "; is the server running?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(kSliceMs));
  }
}

Status Channel::write_all(const uint8_t* p, size_t n, Wait w) {
  const auto deadline = Clock::now() + w.timeout;
  while (n) {
    const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return make_error(Errc::kProtocol, "peer " + peer_ + ": send failed: " + errno_text(errno) +
                                             " (did it exit?)");
    const int r = wait_fd(fd_, POLLOUT, deadline, w);
    if (r == -1) return interrupted("sending to " + peer_);
    if (r == 0)
      return make_error(Errc::kTimeout,
                        "peer " + peer_ + " took no data for " + seconds_text(w.timeout));
    if (r == -2) return make_error(Errc::kDeviceError, "poll: " + errno_text(errno));
  }
  return {};
}

Status Channel::send(FrameType t, std::span<const uint8_t> payload, Wait w) {
  if (payload.size() > kMaxFramePayload)
    return make_error(Errc::kInvalidArgument,
                      "rendezvous frame of " + std::to_string(payload.size()) + " bytes (at most " +
                          std::to_string(kMaxFramePayload) + ")");
  std::vector<uint8_t> buf(kFrameHeaderBytes + payload.size());
  std::memcpy(buf.data(), kMagic, 4);
  buf[4] = kRendezvousVersion;
  buf[5] = static_cast<uint8_t>(t);
  put16(&buf[6], static_cast<uint16_t>(payload.size()));
  if (!payload.empty()) std::memcpy(buf.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return write_all(buf.data(), buf.size(), w);
}

Status Channel::send_text(FrameType t, std::string_view text, Wait w) {
  return send(t, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, w);
}

Status Channel::refuse(Errc code, std::string_view why, Wait w) {
  std::string p(1, static_cast<char>(code));
  p.append(why);
  return send_text(FrameType::kRefuse, p, w);
}

// The first frame in rx_, once it is all there (consumed then); nothing while it is not. A header
// that is not ours is refused at once, before its payload arrives.
Result<std::optional<Frame>> Channel::take_frame() {
  if (rx_.size() < kFrameHeaderBytes) return std::optional<Frame>();
  const uint8_t* h = rx_.data();
  if (std::memcmp(h, kMagic, 4) != 0)
    return make_error(Errc::kProtocol, "peer " + peer_ +
                                           " does not speak the rdmx rendezvous (foreign bytes; "
                                           "is it an rdmx program on the right port?)");
  if (h[4] != kRendezvousVersion)
    return make_error(Errc::kProtocol, "peer " + peer_ + " speaks rendezvous version " +
                                           std::to_string(h[4]) + ", this program speaks " +
                                           std::to_string(kRendezvousVersion) +
                                           " (use the same rdmx release on both hosts)");
  const size_t len = size_t{h[6]} << 8 | h[7];
  if (len > kMaxFramePayload)
    return make_error(Errc::kProtocol,
                      "peer " + peer_ + " sent a frame of " + std::to_string(len) + " bytes");
  if (rx_.size() < kFrameHeaderBytes + len) return std::optional<Frame>();
  Frame f;
  f.type = static_cast<FrameType>(h[5]);
  f.payload.assign(rx_.begin() + kFrameHeaderBytes, rx_.begin() + kFrameHeaderBytes + len);
  rx_.erase(rx_.begin(), rx_.begin() + kFrameHeaderBytes + len);
  if (f.type == FrameType::kRefuse) {
    Errc code = Errc::kProtocol;
    std::string why = "(no reason given)";
    if (!f.payload.empty()) {
      const int c = f.payload[0];
      if (c > 0 && c < kNumErrcValues) code = static_cast<Errc>(c);
      if (f.payload.size() > 1) why = std::string(f.payload.begin() + 1, f.payload.end());
    }
    return make_error(code, "refused by " + peer_ + ": " + why);
  }
  return std::optional<Frame>(std::move(f));
}

// Where the peer's connection ended: before a frame, inside a header, inside a payload.
Error Channel::closed_error() const {
  if (rx_.empty())
    return make_error(
        Errc::kProtocol,
        "peer " + peer_ + " closed the connection before sending a rendezvous message");
  if (rx_.size() < kFrameHeaderBytes)
    return make_error(Errc::kProtocol, "peer " + peer_ +
                                           " closed the connection in the middle of a rendezvous "
                                           "message (" +
                                           std::to_string(rx_.size()) + " of " +
                                           std::to_string(kFrameHeaderBytes) + " bytes)");
  const size_t len = size_t{rx_[6]} << 8 | rx_[7];
  return make_error(Errc::kProtocol, "peer " + peer_ + " closed the connection in the middle of " +
                                         frame_type_name(static_cast<FrameType>(rx_[5])) + " (" +
                                         std::to_string(rx_.size() - kFrameHeaderBytes) + " of " +
                                         std::to_string(len) + " bytes)");
}

Result<std::optional<Frame>> Channel::try_recv() {
  if (fd_ < 0) return make_error(Errc::kState, "rendezvous connection is closed");
  for (;;) {
    RDMX_TRY_ASSIGN(std::optional<Frame> f, take_frame());
    if (f) return f;
    // Only what the frame still needs: bytes of the next one stay in the socket.
    const size_t want = rx_.size() < kFrameHeaderBytes
                            ? kFrameHeaderBytes - rx_.size()
                            : kFrameHeaderBytes + (size_t{rx_[6]} << 8 | rx_[7]) - rx_.size();
    const size_t have = rx_.size();
    rx_.resize(have + want);
    const ssize_t k = ::recv(fd_, rx_.data() + have, want, MSG_DONTWAIT);
    rx_.resize(have + (k > 0 ? static_cast<size_t>(k) : 0));
    if (k > 0) continue;
    if (k == 0) return closed_error();
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return std::optional<Frame>();
    return make_error(Errc::kProtocol, "peer " + peer_ + ": receive failed: " + errno_text(errno) +
                                           " (did it exit?)");
  }
}

Result<Frame> Channel::recv(Wait w) {
  const auto deadline = Clock::now() + w.timeout;
  for (;;) {
    RDMX_TRY_ASSIGN(std::optional<Frame> f, try_recv());
    if (f) return std::move(*f);
    const char* what = rx_.size() < kFrameHeaderBytes
                           ? "a rendezvous message"
                           : frame_type_name(static_cast<FrameType>(rx_[5]));
    const int r = wait_fd(fd_, POLLIN, deadline, w);
    if (r == -1) return interrupted(std::string("waiting for ") + what + " from " + peer_);
    if (r == 0)
      return make_error(Errc::kTimeout, "peer " + peer_ + " did not send " + what + " within " +
                                            seconds_text(w.timeout));
    if (r == -2) return make_error(Errc::kDeviceError, "poll: " + errno_text(errno));
  }
}

Error Channel::unexpected(FrameType got, FrameType due) const {
  return make_error(Errc::kProtocol, "peer " + peer_ + " sent " + frame_type_name(got) + " (type " +
                                         std::to_string(int(got)) + ") where " +
                                         frame_type_name(due) + " was due");
}

Result<Frame> Channel::expect(FrameType t, Wait w) {
  RDMX_TRY_ASSIGN(Frame f, recv(w));
  if (f.type != t) return unexpected(f.type, t);
  return f;
}

Result<std::optional<Frame>> Channel::try_expect(FrameType t) {
  RDMX_TRY_ASSIGN(std::optional<Frame> f, try_recv());
  if (f && f->type != t) return unexpected(f->type, t);
  return f;
}

Status Channel::send_info(std::span<const mlx5::ConnectInfo> infos, Wait w) {
  std::vector<uint8_t> p;
  p.reserve(infos.size() * mlx5::kConnectInfoBytes);
  for (const mlx5::ConnectInfo& ci : infos) {
    const mlx5::ConnectInfoBytes b = mlx5::encode_connect_info(ci);
    p.insert(p.end(), b.begin(), b.end());
  }
  return send(FrameType::kInfo, p, w);
}

Result<std::vector<mlx5::ConnectInfo>> infos_of(const Frame& f, const std::string& peer) {
  if (f.payload.empty() || f.payload.size() % mlx5::kConnectInfoBytes != 0)
    return make_error(Errc::kProtocol, "peer " + peer + " sent connection info of " +
                                           std::to_string(f.payload.size()) +
                                           " bytes (not a multiple of " +
                                           std::to_string(mlx5::kConnectInfoBytes) + ")");
  std::vector<mlx5::ConnectInfo> out;
  for (size_t off = 0; off < f.payload.size(); off += mlx5::kConnectInfoBytes) {
    RDMX_TRY_ASSIGN(
        mlx5::ConnectInfo ci,
        mlx5::decode_connect_info({f.payload.data() + off, mlx5::kConnectInfoBytes}),
        "peer " + peer + ": connection info " + std::to_string(off / mlx5::kConnectInfoBytes));
    out.push_back(ci);
  }
  return out;
}

Result<std::vector<mlx5::ConnectInfo>> Channel::recv_info(Wait w) {
  RDMX_TRY_ASSIGN(const Frame f, expect(FrameType::kInfo, w));
  return infos_of(f, peer_);
}

Result<std::vector<mlx5::ConnectInfo>> Channel::recv_info(size_t expected, Wait w) {
  RDMX_TRY_ASSIGN(std::vector<mlx5::ConnectInfo> out, recv_info(w));
  RDMX_TRY(check_peer_infos(out, expected), "peer " + peer_);
  return out;
}

Result<std::optional<std::vector<mlx5::ConnectInfo>>> Channel::try_recv_info(size_t expected) {
  RDMX_TRY_ASSIGN(std::optional<Frame> f, try_expect(FrameType::kInfo));
  if (!f) return std::optional<std::vector<mlx5::ConnectInfo>>();
  RDMX_TRY_ASSIGN(std::vector<mlx5::ConnectInfo> out, infos_of(*f, peer_));
  RDMX_TRY(check_peer_infos(out, expected), "peer " + peer_);
  return std::optional<std::vector<mlx5::ConnectInfo>>(std::move(out));
}

Status check_peer_infos(std::span<const mlx5::ConnectInfo> infos, size_t expected) {
  if (infos.size() != expected)
    return make_error(Errc::kProtocol, "sent " + std::to_string(infos.size()) +
                                           " connection info(s) for " + std::to_string(expected) +
                                           " QP(s)");
  for (size_t i = 0; i < infos.size(); ++i) {
    RDMX_TRY(mlx5::check_connect_info(infos[i]), "connection info " + std::to_string(i));
    for (size_t j = 0; j < i; ++j)
      if (infos[j].qpn == infos[i].qpn)
        return make_error(Errc::kProtocol, "connection info " + std::to_string(i) + " names QPN " +
                                               std::to_string(infos[i].qpn) + " again (info " +
                                               std::to_string(j) + "): one QP, one info");
  }
  return {};
}

bool Channel::peer_gone() const noexcept {
  if (fd_ < 0) return true;
  // POLLRDHUP: the peer's FIN, even while bytes it sent before are still unread here (a
  // connect info or a message nobody asked for); the peek below alone sees it only once they
  // are read.
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
  uint8_t b;
  const ssize_t k = ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::string Channel::local_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return sockaddr_text(ss);
}

bool Channel::local_ipv4_gid(uint8_t (&gid)[16]) const noexcept {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      ss.ss_family != AF_INET)
    return false;
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  std::memset(gid, 0, 10);
  gid[10] = gid[11] = 0xff;
  std::memcpy(gid + 12, &a->sin_addr.s_addr, 4);  // already network order
  return true;
}

// ---- Listener ----------------------------------------------------------------------------------

Listener::Listener(Listener&& o) noexcept
    : fd_(o.fd_), port_(o.port_), address_(std::move(o.address_)) {
  o.fd_ = -1;
}

Listener& Listener::operator=(Listener&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    port_ = o.port_;
    address_ = std::move(o.address_);
    o.fd_ = -1;
  }
  return *this;
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Listener> Listener::listen(const HostPort& at) {
  AddrInfo ai;
  RDMX_TRY(resolve(at, true, ai), "listen address " + at.str());
  const addrinfo* a = ai.ai;
  Listener l;
  l.fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
  if (l.fd_ < 0) return make_error(Errc::kDeviceError, "socket: " + errno_text(errno));
  const int one = 1;
  ::setsockopt(l.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(l.fd_, a->ai_addr, a->ai_addrlen) != 0) {
    const int e = errno;
    const std::string why = "cannot listen on " + at.str() + ": " + errno_text(e);
    if (e == EADDRINUSE)
      return make_error(Errc::kBusy, why + " (another server on this port? pick another)");
    if (e == EADDRNOTAVAIL)
      return make_error(Errc::kInvalidArgument, why + " (not an address of this host)");
    return make_error(e == EACCES ? Errc::kInvalidArgument : Errc::kDeviceError, why);
  }
  if (::listen(l.fd_, SOMAXCONN) != 0)
    return make_error(Errc::kDeviceError, "listen on " + at.str() + ": " + errno_text(errno));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(l.fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  l.address_ = sockaddr_text(ss);
  l.port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return l;
}

Result<std::optional<Channel>> Listener::try_accept() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd =
        ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return std::optional<Channel>(Channel(fd, sockaddr_text(ss)));
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::optional<Channel>();
    return make_error(Errc::kDeviceError, "accept on " + address_ + ": " + errno_text(errno));
  }
}

Result<Channel> Listener::accept(Wait w) {
  const auto deadline = Clock::now() + w.timeout;
  for (;;) {
    RDMX_TRY_ASSIGN(std::optional<Channel> ch, try_accept());
    if (ch) return std::move(*ch);
    const int r = wait_fd(fd_, POLLIN, deadline, w);
    if (r == -1) return interrupted("waiting for a client on " + address_);
    if (r == 0)
      return make_error(Errc::kTimeout,
                        "no client on " + address_ + " within " + seconds_text(w.timeout));
    if (r == -2) return make_error(Errc::kDeviceError, "poll: " + errno_text(errno));
  }
}

}  // namespace rdmx::endpoint
