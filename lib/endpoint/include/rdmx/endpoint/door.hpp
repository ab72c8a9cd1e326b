// A server's door: clients admitted without ever waiting on one of them.
//
// Accepting and reading a client's first frame one client at a time lets one silent socket hold
// everyone else: a server blocked in recv() on a connection that sends nothing does not accept
// the next. The door keeps every connection it accepted and whose hello is not complete yet (a
// "half-open" one) in a set of its own, each with its own deadline, and reads from all of them
// without waiting: poll() returns the first connection whose hello is complete, and takes it out
// of the set. The rest of the handshake (answer, connection info, ready) is the caller's, with the
// non-blocking Channel::try_recv() when it must not wait either.
//
//   Door door(&listener, {std::chrono::seconds(10), 64});
//   for (;;) {                               // in the server's loop, beside its poll cores
//     auto a = door.poll();
//     if (!a) { log(a.error().message); continue; }  // one line per refused connection
//     if (!a.value()) break;                 // nothing complete now
//     ... a.value()->hello, a.value()->ch ...
//   }
//
// Limits: a connection has `hello_timeout` from its accept to send a whole hello frame; at most
// `max_half_open` are held, and a connection accepted beyond that is closed at once. Each
// connection closed by the door (too slow, too many, foreign bytes, another version, closed by
// the peer) is one kProtocol/kTimeout/kBusy error from poll(), naming the peer, and the door goes
// on. Setup path: system calls, allocation; one thread (the server's control thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/endpoint/rendezvous.hpp>

namespace rdmx::endpoint {

class Door {
 public:
  struct Config {
    std::chrono::milliseconds hello_timeout{kDefaultExchangeTimeout};
    size_t max_half_open = 64;
  };
  struct Arrival {
    Channel ch;
    Frame hello;  // its first frame (FrameType::kHello)
  };

  Door() = default;
  explicit Door(Listener* l) noexcept : l_(l) {}
  Door(Listener* l, Config c) noexcept : l_(l), cfg_(c) {}

  // Without waiting: accepts the connections that are pending, reads what each half-open one
  // sent. A connection whose hello is complete: returned (and no longer held). Nothing complete:
  // an empty optional. A connection refused: its error (the door closed it; call again for the
  // rest). kDeviceError: the listening socket failed.
  Result<std::optional<Arrival>> poll();

  size_t half_open() const noexcept { return open_.size(); }
  // The address ("host:port") of the connection the last error of poll() was about.
  const std::string& last_refused() const noexcept { return last_refused_; }
  const Config& config() const noexcept { return cfg_; }
  // For connections accepted from now on.
  void set_config(Config c) noexcept { cfg_ = c; }

 private:
  using Clock = std::chrono::steady_clock;
  struct HalfOpen {
    Channel ch;
    Clock::time_point deadline;
  };
  Listener* l_ = nullptr;
  Config cfg_;
  std::vector<HalfOpen> open_;
  std::string last_refused_;
};

}  // namespace rdmx::endpoint
