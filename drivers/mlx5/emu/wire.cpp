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

#include <rdmx/core/assert.hpp>
#include <rdmx/core/log.hpp>

#include "carrier.hpp"
#include "roce_link.hpp"

namespace rdmx::emu {

// The mapping (the heap for an in-process wire, /dev/shm for two processes): a header and the
// two links' packet rings. The header's first fields keep their place in every version, so that
// a mapping of another version is recognised (and, its creator gone, removed).
struct WireShared {
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t n_slots;
  int32_t creator_pid;  // the process that created the wire: a later one removes it once it died
  std::atomic<uint32_t> side_open[2];
  detail::PktRing pkt[2];  // pkt[d]: packets of side d's link to side 1 - d's
};

namespace {

std::atomic<uint64_t> g_next_token{1};

std::string shm_path(const std::string& name) {
  return "/rdmx-emu-" + name;
}

void init_shared(WireShared* sh) {
  sh->version = kWireVersion;
  sh->n_slots = detail::kPktSlots;
  sh->creator_pid = static_cast<int32_t>(getpid());
  for (auto& s : sh->side_open) s.store(0, std::memory_order_relaxed);
  for (detail::PktRing& r : sh->pkt) detail::init_pkt_ring(&r);
  sh->magic.store(kWireMagic, std::memory_order_release);
}

inline int ring_of(int end, WireClass c, bool tx) noexcept {
  const int dir = tx ? end : 1 - end;
  return dir * 2 + static_cast<int>(c);
}

// The header fields every version shares (magic, version, creator_pid), from a mapping of any
// size; false when it is not a wire.
struct Header {
  uint32_t version = 0;
  int32_t creator_pid = 0;
};
bool read_header(int fd, size_t size, Header* h) {
  if (size < sizeof(uint64_t) * 3) return false;
  void* p = mmap(nullptr, sizeof(uint64_t) * 3, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  const auto* sh = static_cast<const WireShared*>(p);
  const bool ok = sh->magic.load(std::memory_order_acquire) == kWireMagic;
  if (ok) *h = Header{sh->version, sh->creator_pid};
  munmap(p, sizeof(uint64_t) * 3);
  return ok;
}

// Removes the shared wires whose creating process is gone (killed: it could not unlink its
// wire), of this layout or an earlier one. Only wires whose creator no longer exists
// (kill(pid, 0): ESRCH) are touched; each is one line.
void sweep_dead_wires() {
  DIR* d = ::opendir("/dev/shm");
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "rdmx-emu-", 9) != 0) continue;
    const std::string path = std::string("/") + e->d_name;
    const int fd = shm_open(path.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st {};
    Header h;
    const bool wire = fstat(fd, &st) == 0 && read_header(fd, static_cast<size_t>(st.st_size), &h);
    close(fd);
    if (wire && h.version >= 2 && h.creator_pid > 0 && ::kill(h.creator_pid, 0) != 0 &&
        errno == ESRCH && shm_unlink(path.c_str()) == 0)
      RDMX_LOG_INFO("emu: removed /dev/shm%s (layout %u), left by process %d, which is gone",
                    path.c_str(), h.version, static_cast<int>(h.creator_pid));
  }
  ::closedir(d);
}

// A ring carrier's link for `side` of an in-process or shared-memory wire: the nominal
// addresses, the largest MTU (the QP's path MTU is set at connect), the default window.
Result<std::unique_ptr<detail::RoceLink>> ring_link(WireShared* sh, int side) {
  RoceOptions o;
  o.local_ipv4 = Wire::ring_ip(side);
  o.mtu = kWireMtu;
  o.window = kRingWindow;
  return detail::RoceLink::open(
      o, std::make_unique<detail::RingCarrier>(&sh->pkt[side], &sh->pkt[1 - side]));
}

}  // namespace

// ---- the engine<->link rings
// ---------------------------------------------------------------------
Rings::Rings() noexcept {
  for (RingCtl& c : ctl_) {
    c.head.store(0, std::memory_order_relaxed);
    c.tail.store(0, std::memory_order_relaxed);
  }
}

WireSlot* Rings::tx_slot(int end, WireClass c) noexcept {
  const int r = ring_of(end, c, true);
  RingCtl& k = ctl_[r];
  const uint64_t h = k.head.load(std::memory_order_relaxed);
  const uint64_t t = k.tail.load(std::memory_order_acquire);
  if (h - t >= kWireSlots) return nullptr;
  WireSlot* s = &slots_[r][h & (kWireSlots - 1)];
  s->ext = nullptr;
  return s;
}

uint64_t Rings::produced(int end, WireClass c) const noexcept {
  return ctl_[ring_of(end, c, true)].head.load(std::memory_order_relaxed);
}

uint64_t Rings::popped(int end, WireClass c) const noexcept {
  return ctl_[ring_of(end, c, true)].tail.load(std::memory_order_acquire);
}

uint32_t Rings::tx_free(int end, WireClass c) const noexcept {
  const RingCtl& k = ctl_[ring_of(end, c, true)];
  const uint64_t h = k.head.load(std::memory_order_relaxed);
  const uint64_t t = k.tail.load(std::memory_order_acquire);
  return static_cast<uint32_t>(kWireSlots - (h - t));
}

void Rings::tx_commit(int end, WireClass c) noexcept {
  RingCtl& k = ctl_[ring_of(end, c, true)];
  k.head.store(k.head.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

const WireSlot* Rings::rx_slot(int end, WireClass c) noexcept {
  const int r = ring_of(end, c, false);
  RingCtl& k = ctl_[r];
  const uint64_t t = k.tail.load(std::memory_order_relaxed);
  const uint64_t h = k.head.load(std::memory_order_acquire);
  if (h == t) return nullptr;
  return &slots_[r][t & (kWireSlots - 1)];
}

void Rings::rx_pop(int end, WireClass c) noexcept {
  RingCtl& k = ctl_[ring_of(end, c, false)];
  k.tail.store(k.tail.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void Rings::cancel(uint32_t qpn) noexcept {
  for (int r = 0; r < 4; ++r) {
    RingCtl& k = ctl_[r];
    const bool to_link = r < 2;  // dir 0: end 0 (engine) -> end 1 (link)
    const uint64_t h = k.head.load(std::memory_order_acquire);
    for (uint64_t t = k.tail.load(std::memory_order_relaxed); t != h; ++t) {
      PktHdr& m = slots_[r][t & (kWireSlots - 1)].h;
      uint32_t& q = to_link ? m.src_qpn : m.dst_qpn;
      if (q == qpn) q = 0;
    }
  }
}

// ---- the wire
// -------------------------------------------------------------------------------------
Wire::Wire() {
  for (auto& r : rings_) r = std::make_unique<Rings>();
}

Wire::~Wire() {
  for (auto& l : link_) l.reset();  // the links' carriers use the mapping
  if (!sh_) return;
  if (shm_) {
    munmap(sh_, map_len_);
    if (creator_) shm_unlink(shm_name_.c_str());
  } else {
    sh_->~WireShared();
    ::operator delete (sh_, std::align_val_t{alignof(WireShared)});
  }
}

Result<std::shared_ptr<Wire>> Wire::over_rings(std::shared_ptr<Wire> w) {
  for (int side = 0; side < 2; ++side) {
    auto l = ring_link(w->sh_, side);
    if (!l) return std::move(l).error();
    w->link_[side] = std::move(l.value());
  }
  return w;
}

std::shared_ptr<Wire> Wire::make_local() {
  std::shared_ptr<Wire> w(new Wire());
  void* mem = ::operator new (sizeof(WireShared), std::align_val_t{alignof(WireShared)});
  w->sh_ = new (mem) WireShared();
  w->map_len_ = sizeof(WireShared);
  init_shared(w->sh_);
  w->token_ = (uint64_t{static_cast<uint32_t>(getpid())} << 32) | g_next_token.fetch_add(1);
  auto r = over_rings(std::move(w));
  RDMX_ASSERT(r.ok());  // a ring carrier's link with the default options always opens
  return std::move(r.value());
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
  return over_rings(std::move(w));
}

Result<std::shared_ptr<Wire>> Wire::attach_shm(const std::string& name) {
  const std::string path = shm_path(name);
  const int fd = shm_open(path.c_str(), O_RDWR, 0600);
  if (fd < 0)
    return make_error(Errc::kNoDevice, "emu: no shared wire " + path + ": " + std::strerror(errno));
  struct stat st {};
  Header h;
  if (fstat(fd, &st) == 0 && read_header(fd, static_cast<size_t>(st.st_size), &h) &&
      h.version != kWireVersion) {
    close(fd);
    return make_error(Errc::kDeviceError,
                      "emu: shared wire " + path + " has layout " + std::to_string(h.version) +
                          ", this build speaks layout " + std::to_string(kWireVersion) +
                          " (made by another rdmx build: remove /dev/shm" + path +
                          " once its processes are gone)");
  }
  if (static_cast<size_t>(st.st_size) != sizeof(WireShared)) {
    close(fd);
    return make_error(Errc::kDeviceError, "emu: shared wire " + path + " has the wrong size");
  }
  void* p = mmap(nullptr, sizeof(WireShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return make_error(Errc::kNoMemory, "emu: mmap(" + path + ") failed");
  auto* sh = static_cast<WireShared*>(p);
  if (sh->magic.load(std::memory_order_acquire) != kWireMagic || sh->version != kWireVersion ||
      sh->n_slots != detail::kPktSlots) {
    munmap(p, sizeof(WireShared));
    return make_error(Errc::kDeviceError, "emu: shared wire " + path + " is not initialised");
  }
  std::shared_ptr<Wire> w(new Wire());
  w->sh_ = sh;
  w->map_len_ = sizeof(WireShared);
  w->shm_ = true;
  w->shm_name_ = path;
  w->token_ = std::hash<std::string>{}(path);
  return over_rings(std::move(w));
}

bool Wire::peer_open(int side) const noexcept {
  return sh_->side_open[1 - side].load(std::memory_order_acquire) != 0;
}

Status Wire::attach(int side, detail::Engine* eng, Mode mode) {
  if (side != 0 && side != 1) return make_error(Errc::kInvalidArgument, "emu: side must be 0 or 1");
  if (roce_ && (side != 0 || mode != Mode::kThreaded))
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
  std::shared_ptr<Wire> w(new Wire());
  void* mem = ::operator new (sizeof(WireShared), std::align_val_t{alignof(WireShared)});
  w->sh_ = new (mem) WireShared();
  w->map_len_ = sizeof(WireShared);
  init_shared(w->sh_);
  w->roce_ = true;
  w->link_[0] = std::move(link);
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
  struct PairRings {
    detail::PktRing r[2];
  };
  auto rings = std::make_shared<PairRings>();
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
