// Rendezvous over TCP: how two processes on two hosts meet before any RDMA traffic, as perftest
// does by default (perftest's perftest_communication.c: a TCP socket, then each side's QP
// number, PSN, GID... sent over it). A server listens on [ADDR:]PORT and accepts clients; over
// each connection the two sides exchange framed messages, the connection info among them in the
// versioned codec of rdmx/mlx5/connect_info.hpp.
//
// Why plain POSIX sockets and not DPDK: this is the setup path, run once per connection before
// the queue pairs exist; it needs the kernel's TCP (retransmission, routing, name resolution)
// and nothing else, and it works on hosts whose NIC is not given to DPDK. The data path never
// touches it.
//
// Frame (every integer big-endian):
//   off size field
//   0   4    magic "RDXR"
//   4   1    version (kRendezvousVersion)
//   5   1    type (FrameType)
//   6   2    payload length (at most kMaxFramePayload)
//   8   n    payload
// A frame of another magic is refused as foreign (kProtocol), of another version as a version
// mismatch (kProtocol, naming both versions). A kRefuse frame carries one byte (an Errc, what
// the refusal means: kInvalidArgument for parameters that do not match) and a line of text;
// recv() turns it into that error, "refused by PEER: TEXT".
//
// Waits: every call that waits takes a time budget and an optional cancel flag (a signal
// handler's flag: Ctrl-C) polled at least every 50 ms; it returns kTimeout or kState
// ("interrupted") rather than block longer. The defaults below are what rdmafwd, blockd and the
// C API use unless told otherwise. Sockets are close-on-exec and closed by their owner's
// destructor: nothing is left behind on any path.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/connect_info.hpp>

namespace rdmx::endpoint {

inline constexpr uint16_t kDefaultRendezvousPort = 7471;
// A server waits this long for a client; a client tries this long to reach its server (a
// refused connection is retried: the server may still be starting); once connected, each
// message of the exchange must arrive within kDefaultExchangeTimeout.
inline constexpr std::chrono::milliseconds kDefaultAcceptTimeout{120'000};
inline constexpr std::chrono::milliseconds kDefaultConnectTimeout{30'000};
inline constexpr std::chrono::milliseconds kDefaultExchangeTimeout{10'000};

inline constexpr uint8_t kRendezvousVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 8;
inline constexpr size_t kMaxFramePayload = 16384;

enum class FrameType : uint8_t {
  kHello = 1,    // client -> server: what the client wants (application text, key value lines)
  kWelcome = 2,  // server -> client: accepted; what the server offers (application text)
  kInfo = 3,     // connection info: a list of ConnectInfo, each in the codec's 56 bytes
  kReady = 4,    // the sender's QPs are connected and its receives posted
  kRefuse = 5,   // the sender refuses: Errc byte + a line of text
  kBye = 6,      // the sender ends normally (application text)
};
const char* frame_type_name(FrameType t) noexcept;

// "[ADDR:]PORT" (listen; ADDR defaults to 0.0.0.0) or "HOST[:PORT]" (peer; PORT defaults to
// kDefaultRendezvousPort). IPv6 literals in brackets: "[::1]:7471". kInvalidArgument with the
// reason otherwise.
struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string str() const;  // "host:port" ("[v6]:port")
};
Result<HostPort> parse_listen_address(std::string_view s);
Result<HostPort> parse_peer_address(std::string_view s);

struct Wait {
  std::chrono::milliseconds timeout{kDefaultExchangeTimeout};
  const std::atomic<bool>* cancel = nullptr;  // true: stop waiting (kState, "interrupted ...")
  const volatile int* cancel_flag = nullptr;  // the same for C callers (a sig_atomic_t)
};

struct Frame {
  FrameType type = FrameType::kHello;
  std::vector<uint8_t> payload;
  std::string text() const { return std::string(payload.begin(), payload.end()); }
};

// The connection infos a kInfo frame from `peer` carries (each decoded by the codec; kProtocol
// naming the peer and the info's index otherwise).
Result<std::vector<mlx5::ConnectInfo>> infos_of(const Frame& f, const std::string& peer);

// One connected TCP socket (move-only; closed by the destructor).
class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd, std::string peer) noexcept : fd_(fd), peer_(std::move(peer)) {}
  Channel(Channel&& o) noexcept;
  Channel& operator=(Channel&& o) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  // Connects to a server, retrying a refused or unreachable connection until w.timeout.
  // Errors: kInvalidArgument (the host does not resolve), kTimeout (nobody accepted in time:
  // the message says what the last attempt got), kState (interrupted).
  static Result<Channel> connect(const HostPort& to, Wait w = {kDefaultConnectTimeout});

  Status send(FrameType t, std::span<const uint8_t> payload, Wait w = {});
  Status send_text(FrameType t, std::string_view text, Wait w = {});
  // Refuses the peer: `why` is what it will print; code tells it what kind of error.
  Status refuse(Errc code, std::string_view why, Wait w = {});
  // The next frame. kProtocol: foreign bytes, another version, the peer closed the connection
  // (the message says after how many bytes) or refused (the error it sent, see above).
  Result<Frame> recv(Wait w = {});
  // The next frame, which must be of type `t` (a kRefuse frame becomes its error).
  Result<Frame> expect(FrameType t, Wait w = {});
  // Without waiting: reads what has arrived and returns the next frame once it is complete, or
  // nothing yet. The same errors as recv() but kTimeout; bytes of a frame not yet complete are
  // kept for the next call (recv() and try_recv() share them).
  Result<std::optional<Frame>> try_recv();

  // Connection info frames: a list of ConnectInfo in the codec.
  Status send_info(std::span<const mlx5::ConnectInfo> infos, Wait w = {});
  Result<std::vector<mlx5::ConnectInfo>> recv_info(Wait w = {});
  // The same, for exactly `expected` QPs (check_peer_infos): what a server or a C API exchange
  // that knows how many QPs it connects receives, checked before any of them is used.
  Result<std::vector<mlx5::ConnectInfo>> recv_info(size_t expected, Wait w = {});
  // Without waiting (try_recv): the frame of type t, the checked connection infos, once they are
  // all there; nothing yet otherwise. The same errors as expect() and recv_info(expected).
  Result<std::optional<Frame>> try_expect(FrameType t);
  Result<std::optional<std::vector<mlx5::ConnectInfo>>> try_recv_info(size_t expected);

  // Without waiting: has the peer closed the connection (or reset it)? True from its FIN on,
  // even while frames it sent before are still unread here (they are not consumed): a watcher
  // that expects a last frame (a goodbye) reads it first (try_recv). For watching a peer during
  // a run.
  bool peer_gone() const noexcept;

  bool valid() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  const std::string& peer() const noexcept { return peer_; }  // "host:port"
  std::string local_address() const;                          // "host:port" of this end
  // This end's IPv4 address as a RoCE v2 GID (::ffff:a.b.c.d, IBTA Annex A17.3); false on
  // IPv6 or an unconnected channel.
  bool local_ipv4_gid(uint8_t (&gid)[16]) const noexcept;
  void close() noexcept;

 private:
  Status write_all(const uint8_t* p, size_t n, Wait w);
  Result<std::optional<Frame>> take_frame();
  Error closed_error() const;
  Error unexpected(FrameType got, FrameType due) const;
  int fd_ = -1;
  std::string peer_;
  std::vector<uint8_t> rx_;  // received bytes of the frame not yet complete
};

// What a peer's connection info frame must be, in one place (recv_info uses it; so does any
// receiver of a list of ConnectInfo): exactly `expected` infos (one per QP the receiver connects:
// a second info for one QP is refused, not taken for the next), no QPN twice, and every info
// within the codec's field rules (mlx5::check_connect_info). kProtocol naming the first fault.
Status check_peer_infos(std::span<const mlx5::ConnectInfo> infos, size_t expected);

// A listening TCP socket (move-only; closed by the destructor).
class Listener {
 public:
  Listener() = default;
  Listener(Listener&& o) noexcept;
  Listener& operator=(Listener&& o) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  ~Listener();

  // Binds and listens (SO_REUSEADDR). Port 0 picks a free port (see port()). Errors:
  // kInvalidArgument (an address that does not parse or is not this host's: EADDRNOTAVAIL),
  // kBusy (the port is in use), kDeviceError (other socket errors).
  static Result<Listener> listen(const HostPort& at);
  // The next client, within w.timeout (kTimeout: "no client within N s").
  Result<Channel> accept(Wait w = {kDefaultAcceptTimeout});
  // Without waiting: the next client if one is connecting, else nothing (door.hpp).
  Result<std::optional<Channel>> try_accept();

  uint16_t port() const noexcept { return port_; }
  const std::string& address() const noexcept { return address_; }  // "0.0.0.0:7471"

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::string address_;
};

}  // namespace rdmx::endpoint
