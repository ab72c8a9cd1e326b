#include "wire.hpp"

#include <arpa/inet.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include <rdmx/core/log.hpp>

#include "roce_link.hpp"

namespace rdmx::emu {

namespace {

std::atomic<uint64_t> g_next_token{1};

std::string shm_path(const std::string& name) {
  return "/rdmx-emu-" + name;
}

void init_shared(WireShared* sh) {
  sh->version = kWireVersion;
  sh->n_slots = kWireSlots;
  sh->creator_pid = static_cast<int32_t>(getpid());
  for (auto& s : sh->side_open) s.store(0, std::memory_order_relaxed);
  for (auto& c : sh->ctl) {
    c.head.store(0, std::memory_order_relaxed);
    c.tail.store(0, std::memory_order_relaxed);
  }
  sh->magic.store(kWireMagic, std::memory_order_release);
}

inline int ring_of(int side, WireClass c, bool tx) noexcept {
  const int dir = tx ? side : 1 - side;
  return dir * 2 + static_cast<int>(c);
}

// Removes the shared wires whose creating process is gone (killed: it could not unlink its
// wire). Only wires of this layout, whose creator no longer exists (kill(pid, 0): ESRCH), are
// touched; each is one line.
void sweep_dead_wires() {
  DIR* d = ::opendir("/dev/shm");
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "rdmx-emu-", 9) != 0) continue;
    const std::string path = std::string("/") + e->d_name;
    const int fd = shm_open(path.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st {};
    void* p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == sizeof(WireShared))
      p = mmap(nullptr, sizeof(WireShared), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) continue;
    const auto* sh = static_cast<const WireShared*>(p);
    const int32_t pid =
        sh->magic.load(std::memory_order_acquire) == kWireMagic && sh->version == kWireVersion
            ? sh->creator_pid
            : 0;
    munmap(p, sizeof(WireShared));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH && shm_unlink(path.c_str()) == 0)
      RDMX_LOG_INFO("emu: removed /dev/shm%s, left by process %d, which is gone", path.c_str(),
                    static_cast<int>(pid));
  }
  ::closedir(d);
}

}  // namespace

Wire::~Wire() {
  if (!sh_) return;
  if (shm_) {
    munmap(sh_, map_len_);
    if (creator_) shm_unlink(shm_name_.c_str());
  } else {
    sh_->~WireShared();
    ::operator delete (sh_, std::align_val_t{alignof(WireShared)});
  }
}

std::shared_ptr<Wire> Wire::make_local() {
  std::shared_ptr<Wire> w(new Wire());
  void* mem = ::operator new (sizeof(WireShared), std::align_val_t{alignof(WireShared)});
  w->sh_ = new (mem) WireShared();
  w->map_len_ = sizeof(WireShared);
  init_shared(w->sh_);
  w->token_ = (uint64_t{static_cast<uint32_t>(getpid())} << 32) | g_next_token.fetch_add(1);
  return w;
}

Result<std::shared_ptr<Wire>> Wire::create_shm(const std::string& name) {
  const std::string path = shm_path(name);
  sweep_dead_wires();
  const int fd = shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return make_error(Errc::kDeviceError,
                      "emu: shm_open(" + path + ") failed: " + std::strerror(errno));
  const size_t len = sizeof(WireShared);
  if (ftruncate(fd, static_cast<off_t>(len)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(path.c_str());
    return make_error(Errc::kNoMemory, "emu: ftruncate(" + path + "): " + std::strerror(e));
  }
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(path.c_str());
    return make_error(Errc::kNoMemory, "emu: mmap(" + path + ") failed");
  }
  std::shared_ptr<Wire> w(new Wire());
  w->sh_ = new (p) WireShared();
  w->map_len_ = len;
  w->shm_ = true;
  w->creator_ = true;
  w->shm_name_ = path;
  init_shared(w->sh_);
  w->token_ = std::hash<std::string>{}(path);
  return w;
}

Result<std::shared_ptr<Wire>> Wire::attach_shm(const std::string& name) {
  const std::string path = shm_path(name);
  const int fd = shm_open(path.c_str(), O_RDWR, 0600);
  if (fd < 0)
    return make_error(Errc::kNoDevice, "emu: no shared wire " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != sizeof(WireShared)) {
    close(fd);
    return make_error(Errc::kDeviceError, "emu: shared wire " + path + " has the wrong size");
  }
  void* p = mmap(nullptr, sizeof(WireShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return make_error(Errc::kNoMemory, "emu: mmap(" + path + ") failed");
  auto* sh = static_cast<WireShared*>(p);
  if (sh->magic.load(std::memory_order_acquire) != kWireMagic || sh->version != kWireVersion ||
      sh->n_slots != kWireSlots) {
    munmap(p, sizeof(WireShared));
    return make_error(Errc::kDeviceError, "emu: shared wire " + path + " is not initialised");
  }
  std::shared_ptr<Wire> w(new Wire());
  w->sh_ = sh;
  w->map_len_ = sizeof(WireShared);
  w->shm_ = true;
  w->shm_name_ = path;
  w->token_ = std::hash<std::string>{}(path);
  return w;
}

WireSlot* Wire::tx_slot(int side, WireClass c) noexcept {
  const int r = ring_of(side, c, true);
  RingCtl& k = ctl(r);
  const uint64_t h = k.head.load(std::memory_order_relaxed);
  const uint64_t t = k.tail.load(std::memory_order_acquire);
  if (h - t >= kWireSlots) return nullptr;
  return &sh_->slots[r][h & (kWireSlots - 1)];
}

uint32_t Wire::tx_free(int side, WireClass c) const noexcept {
  const int r = ring_of(side, c, true);
  const RingCtl& k = sh_->ctl[r];
  const uint64_t h = k.head.load(std::memory_order_relaxed);
  const uint64_t t = k.tail.load(std::memory_order_acquire);
  return static_cast<uint32_t>(kWireSlots - (h - t));
}

void Wire::tx_commit(int side, WireClass c) noexcept {
  RingCtl& k = ctl(ring_of(side, c, true));
  k.head.store(k.head.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

const WireSlot* Wire::rx_slot(int side, WireClass c) noexcept {
  const int r = ring_of(side, c, false);
  RingCtl& k = ctl(r);
  const uint64_t t = k.tail.load(std::memory_order_relaxed);
  const uint64_t h = k.head.load(std::memory_order_acquire);
  if (h == t) return nullptr;
  return &sh_->slots[r][t & (kWireSlots - 1)];
}

void Wire::rx_pop(int side, WireClass c) noexcept {
  RingCtl& k = ctl(ring_of(side, c, false));
  k.tail.store(k.tail.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

bool Wire::peer_open(int side) const noexcept {
  return sh_->side_open[1 - side].load(std::memory_order_acquire) != 0;
}

Status Wire::attach(int side, detail::Engine* eng, Mode mode) {
  if (side != 0 && side != 1) return make_error(Errc::kInvalidArgument, "emu: side must be 0 or 1");
  if (link_ && (side != 0 || mode != Mode::kThreaded))
    return make_error(Errc::kInvalidArgument,
                      "emu: a RoCE wire takes one device, on side 0, in threaded mode (the device "
                      "thread does the network I/O)");
  std::lock_guard<std::mutex> g(mu_);
  uint32_t expect = 0;
  if (!sh_->side_open[side].compare_exchange_strong(expect, 1, std::memory_order_acq_rel))
    return make_error(Errc::kBusy, "emu: wire side " + std::to_string(side) + " already open");
  if (!shm_) {
    const detail::Engine* other = eng_[1 - side];
    if (other && mode != Mode::kSink && mode_[1 - side] != Mode::kSink && mode != mode_[1 - side]) {
      sh_->side_open[side].store(0, std::memory_order_release);
      return make_error(Errc::kInvalidArgument,
                        std::string("emu: both sides of an in-process wire must use the same "
                                    "mode (peer is ") +
                            mode_name(mode_[1 - side]) + ", this is " + mode_name(mode) + ")");
    }
  }
  eng_[side] = eng;
  mode_[side] = mode;
  return Status{};
}

void Wire::detach(int side) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  eng_[side] = nullptr;
  sh_->side_open[side].store(0, std::memory_order_release);
}

detail::Engine* Wire::engine(int side) noexcept {
  if (shm_) return nullptr;
  return eng_[side];
}

std::shared_ptr<Wire> Wire::over_link(std::unique_ptr<detail::RoceLink> link,
                                      const RoceOptions& opt) {
  std::shared_ptr<Wire> w = make_local();
  w->link_ = std::move(link);
  w->mtu_cap_ = opt.mtu;
  w->sh_->side_open[1].store(1, std::memory_order_release);  // the network is the peer
  w->token_ = 0x526f434500000000ull | opt.local_ipv4;        // "RoCE" + address
  return w;
}

Result<std::shared_ptr<Wire>> Wire::make_roce(const RoceOptions& opt) {
  auto link = detail::RoceLink::open(opt);
  if (!link) return std::move(link).error();
  return over_link(std::move(link.value()), opt);
}

Result<std::pair<std::shared_ptr<Wire>, std::shared_ptr<Wire>>> Wire::make_roce_ring_pair(
    const RoceOptions& a, const RoceOptions& b) {
  struct Rings {
    detail::PktRing r[2];
  };
  auto rings = std::make_shared<Rings>();
  for (detail::PktRing& r : rings->r) detail::init_pkt_ring(&r);
  auto la =
      detail::RoceLink::open(a, std::make_unique<detail::RingCarrier>(&rings->r[0], &rings->r[1]));
  if (!la) return std::move(la).error();
  auto lb =
      detail::RoceLink::open(b, std::make_unique<detail::RingCarrier>(&rings->r[1], &rings->r[0]));
  if (!lb) return std::move(lb).error();
  std::pair<std::shared_ptr<Wire>, std::shared_ptr<Wire>> p{over_link(std::move(la.value()), a),
                                                            over_link(std::move(lb.value()), b)};
  p.first->carrier_mem_ = rings;
  p.second->carrier_mem_ = rings;
  return p;
}

Result<std::shared_ptr<Wire>> make_roce_wire(const RoceOptions& opt) {
  return Wire::make_roce(opt);
}

Result<uint32_t> parse_ipv4(const std::string& s) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1)
    return make_error(Errc::kInvalidArgument, "\"" + s + "\" is not an IPv4 address (A.B.C.D)");
  return ntohl(a.s_addr);
}

std::shared_ptr<Wire> make_wire() {
  return Wire::make_local();
}
Result<std::shared_ptr<Wire>> create_shm_wire(const std::string& name) {
  return Wire::create_shm(name);
}
Result<std::shared_ptr<Wire>> attach_shm_wire(const std::string& name) {
  return Wire::attach_shm(name);
}

}  // namespace rdmx::emu
