// Loopback addresses of this test process: 127.N.x.y with N claimed by this process alone on
// the host, so two test runs at once (two CI clones, an engineer and CI) never bind the same
// address (emu's RoCE wire claims UDP 4791 on its address and reads every UDP packet sent to it).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace rdmx::test {

// The second octet N (1..254: never 127.0.0.x, the host's own). Claimed with an exclusive
// flock(2) on /tmp/rdmx-loopback-127.N.lock, held until the process exits (the descriptor stays
// open; the kernel drops the lock with it, even on a crash), starting from the pid's octet so
// that two processes rarely try the same one first. tests/functional/twohost claims the same
// way (loopback_net()).
inline uint8_t loopback_net() {
  static const uint8_t n = [] {
    const unsigned first = static_cast<unsigned>(::getpid()) % 254;
    for (unsigned i = 0; i < 254; ++i) {
      const unsigned k = 1 + (first + i) % 254;
      char path[64];
      std::snprintf(path, sizeof path, "/tmp/rdmx-loopback-127.%u.lock", k);
      const int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd < 0) continue;
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return static_cast<uint8_t>(k);
      ::close(fd);
    }
    return static_cast<uint8_t>(1 + first);  // every octet held: the pid's, as before
  }();
  return n;
}

// 127.N.c.d as a host-order IPv4 address, and as text.
inline uint32_t loopback_ip(uint8_t c, uint8_t d) {
  return (uint32_t{127} << 24) | (uint32_t{loopback_net()} << 16) | (uint32_t{c} << 8) | d;
}
inline std::string loopback_text(uint8_t c, uint8_t d) {
  return "127." + std::to_string(loopback_net()) + "." + std::to_string(c) + "." +
         std::to_string(d);
}

}  // namespace rdmx::test
