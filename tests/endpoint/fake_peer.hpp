// A fake rendezvous peer for lib/endpoint's tests (door, session): raw bytes over a loopback TCP
// connection, so a test can send exactly what a broken, slow or hostile peer would.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include <rdmx/core/result.hpp>
#include <rdmx/endpoint/rendezvous.hpp>

namespace rdmx::endpoint::test {

template <class T>
T take(Result<T>&& r) {
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

// A raw TCP connection to a listener on 127.0.0.1:port (closed by the destructor).
struct Raw {
  int fd = -1;
  explicit Raw(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("connect");
  }
  void put(const std::string& b) const {
    if (::write(fd, b.data(), b.size()) != static_cast<ssize_t>(b.size()))
      throw std::runtime_error("write");
  }
  // Everything the other end sent until it closed (bounded: 3 s).
  std::string drain() const {
    std::string out;
    timeval tv{3, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[4096];
    for (ssize_t k; (k = ::read(fd, b, sizeof b)) > 0;) out.append(b, static_cast<size_t>(k));
    return out;
  }
  // Its FIN (a close with unread bytes would be a reset: the same to a session but for its
  // message).
  void shut() const { ::shutdown(fd, SHUT_WR); }
  ~Raw() { ::close(fd); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
};

// A frame as the rendezvous writes it (rendezvous.hpp): "RDXR", version, type, length, payload.
inline std::string frame(FrameType t, const std::string& payload) {
  std::string f = "RDXR";
  f += static_cast<char>(kRendezvousVersion);
  f += static_cast<char>(t);
  f += static_cast<char>(payload.size() >> 8);
  f += static_cast<char>(payload.size() & 0xff);
  return f + payload;
}

}  // namespace rdmx::endpoint::test
