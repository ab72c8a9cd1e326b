// Two processes joined by a shared-memory wire (fork): WRITE, SEND/RECV and READ between them.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

struct Hello {
  mlx5::ConnectInfo ci;
  uint64_t addr;
  uint32_t rkey;
};

bool read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<uint8_t*>(p);
  while (n) {
    const ssize_t k = ::read(fd, c, n);
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}
bool write_all(int fd, const void* p, size_t n) {
  return ::write(fd, p, n) == ssize_t(n);
}

bool poll_one(mlx5::QueuePair& qp, Completion* out, int ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (qp.poll(1, [&](const Completion& c) { *out = c; })) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return false;
}

// The child: side 1. Returns the exit code.
int child(const std::string& name, int rfd, int wfd) {
  Result<std::shared_ptr<Wire>> w = make_error(Errc::kNoDevice, "");
  for (int i = 0; i < 500 && !w.ok(); ++i) {
    w = attach_shm_wire(name);
    if (!w.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!w.ok()) return 10;
  Options o;
  o.mode = Mode::kThreaded;
  o.name = "child";
  auto dev = EmuDevice::open(w.value(), 1, o);
  if (!dev.ok()) return 11;
  auto d = dev.value()->create_qp(EmuTest::small_cfg());
  if (!d.ok()) return 12;
  mlx5::QueuePair qp;
  qp.init(d.value(), 1);
  std::vector<uint8_t> buf(8192, 0);
  auto mr = dev.value()->reg_mr(buf.data(), buf.size(), mlx5::kAccessAll);
  if (!mr.ok()) return 13;
  Hello mine{dev.value()->local_info(d.value().qpn), reinterpret_cast<uint64_t>(buf.data()),
             mr.value().rkey};
  Hello peer{};
  if (!write_all(wfd, &mine, sizeof(mine)) || !read_all(rfd, &peer, sizeof(peer))) return 14;
  if (!dev.value()->connect(d.value().qpn, peer.ci).ok()) return 15;
  prm::Sge r{reinterpret_cast<uint64_t>(buf.data()) + 4096, 4096, mr.value().lkey};
  qp.rq().post({&r, 1}, 7);
  qp.rq().ring_doorbell();
  char go = 1;
  if (!write_all(wfd, &go, 1)) return 16;
  // The parent WRITEs 4096 bytes at offset 0, then SENDs 100 bytes with an immediate.
  Completion c;
  if (!poll_one(qp, &c) || !c.ok() || !c.recv || c.imm != 0x5151 || c.byte_len != 100) return 17;
  const auto expect = random_bytes(4096, 99);
  if (std::memcmp(buf.data(), expect.data(), 4096) != 0) return 18;
  if (std::memcmp(buf.data() + 4096, expect.data(), 100) != 0) return 19;
  // READ the parent's buffer back into ours and compare.
  auto cur = qp.sq().cursor();
  prm::Sge s{reinterpret_cast<uint64_t>(buf.data()) + 4096, 4096, mr.value().lkey};
  const uint32_t ds =
      prm::build_rdma(cur, MLX5_OPCODE_RDMA_READ, qp.qpn(), qp.sq().wqe_index(),
                      qp.sq().next_fm_ce_se(true), peer.addr, peer.rkey, {&s, 1}, Be32{});
  qp.sq().commit(ds, MLX5_OPCODE_RDMA_READ, 1);
  qp.sq().ring_doorbell();
  if (!poll_one(qp, &c) || !c.ok()) return 20;
  if (std::memcmp(buf.data() + 4096, expect.data(), 4096) != 0) return 21;
  if (!write_all(wfd, &go, 1)) return 22;
  read_all(rfd, &go, 1);  // stay up until the parent is done
  return 0;
}

TEST(EmuShm, TwoProcessesOverSharedMemoryWire) {
  const std::string name = "test-" + std::to_string(getpid());
  int p2c[2], c2p[2];
  ASSERT_EQ(pipe(p2c), 0);
  ASSERT_EQ(pipe(c2p), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(p2c[1]);
    close(c2p[0]);
    _exit(child(name, p2c[0], c2p[1]));
  }
  close(p2c[0]);
  close(c2p[1]);
  auto w = create_shm_wire(name);
  ASSERT_TRUE(w.ok()) << w.error().message;
  Options o;
  o.mode = Mode::kThreaded;
  o.name = "parent";
  auto dev = EmuDevice::open(w.value(), 0, o);
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  Options bad = o;
  bad.mode = Mode::kInline;
  EXPECT_FALSE(EmuDevice::open(w.value(), 1, bad).ok()) << "inline needs an in-process wire";
  auto d = dev.value()->create_qp(EmuTest::small_cfg());
  ASSERT_TRUE(d.ok());
  mlx5::QueuePair qp;
  qp.init(d.value(), 1);
  auto data = random_bytes(4096, 99);
  auto mr = dev.value()->reg_mr(data.data(), data.size(), mlx5::kAccessAll);
  ASSERT_TRUE(mr.ok());
  Hello mine{dev.value()->local_info(d.value().qpn), reinterpret_cast<uint64_t>(data.data()),
             mr.value().rkey};
  Hello peer{};
  ASSERT_TRUE(write_all(p2c[1], &mine, sizeof(mine)));
  ASSERT_TRUE(read_all(c2p[0], &peer, sizeof(peer)));
  ASSERT_TRUE(dev.value()->connect(d.value().qpn, peer.ci).ok());
  char go;
  ASSERT_TRUE(read_all(c2p[0], &go, 1));  // the child's receive is posted
  prm::Sge s{reinterpret_cast<uint64_t>(data.data()), 4096, mr.value().lkey};
  auto cur = qp.sq().cursor();
  uint32_t ds = prm::build_rdma(cur, MLX5_OPCODE_RDMA_WRITE, qp.qpn(), qp.sq().wqe_index(),
                                qp.sq().next_fm_ce_se(true), peer.addr, peer.rkey, {&s, 1}, Be32{});
  qp.sq().commit(ds, MLX5_OPCODE_RDMA_WRITE, 1);
  s.length = 100;
  cur = qp.sq().cursor();
  ds = prm::build_send(cur, MLX5_OPCODE_SEND_IMM, qp.qpn(), qp.sq().wqe_index(),
                       qp.sq().next_fm_ce_se(true), {&s, 1}, Be32::from_host(0x5151));
  qp.sq().commit(ds, MLX5_OPCODE_SEND_IMM, 2);
  qp.sq().ring_doorbell();
  Completion c;
  ASSERT_TRUE(poll_one(qp, &c));
  EXPECT_TRUE(c.ok());
  ASSERT_TRUE(poll_one(qp, &c));
  EXPECT_TRUE(c.ok());
  const bool done = read_all(c2p[0], &go, 1);
  write_all(p2c[1], &go, 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed at step " << WEXITSTATUS(status);
  EXPECT_TRUE(done);
  EXPECT_GT(dev.value()->stats().rx_packets, 0u);
}

// A process killed with its shared wire open cannot unlink it; the next wire created on the host
// removes it (its creator is gone) and leaves a live process's wire alone.
TEST(EmuShm, AKilledProcessWireIsRemovedByTheNextOne) {
  const std::string dead = "sweep-dead-" + std::to_string(getpid());
  const std::string live = "sweep-live-" + std::to_string(getpid());
  auto mine = create_shm_wire(live);  // this process's: alive, kept
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto w = create_shm_wire(dead);
    if (!w.ok()) _exit(1);
    ::raise(SIGKILL);  // no destructor runs: the wire stays behind
    _exit(2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child could not create its wire";
  const std::string left = "/dev/shm/rdmx-emu-" + dead;
  ASSERT_EQ(::access(left.c_str(), F_OK), 0) << "the killed process left nothing to sweep";
  auto next = create_shm_wire("sweep-next-" + std::to_string(getpid()));
  ASSERT_TRUE(next.ok()) << next.error().message;
  EXPECT_NE(::access(left.c_str(), F_OK), 0) << left << " is still there";
  EXPECT_EQ(::access(("/dev/shm/rdmx-emu-" + live).c_str(), F_OK), 0)
      << "a live process's wire was removed";
}

// A mapping of layout 2 (an older build's: the engines' rings in the mapping), its header
// written by hand (magic "rdmx-wir" at 0, version at 8, slots at 12, creator pid at 16). While
// its creator lives it is refused with both layouts named; once its creator is gone the next
// wire created on the host removes it.
void write_layout2(const std::string& name, pid_t creator) {
  const int fd = shm_open(("/rdmx-emu-" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* b = static_cast<uint8_t*>(p);
  const uint64_t magic = 0x726d64782d776972ull;
  const uint32_t version = 2, slots = 64;
  const int32_t pid = creator;
  std::memcpy(b, &magic, 8);
  std::memcpy(b + 8, &version, 4);
  std::memcpy(b + 12, &slots, 4);
  std::memcpy(b + 16, &pid, 4);
  munmap(p, 4096);
}

TEST(EmuShm, ALayout2WireIsRefusedThenRemovedOnceItsCreatorIsGone) {
  const std::string old = "layout2-" + std::to_string(getpid());
  write_layout2(old, getpid());
  ASSERT_FALSE(HasFatalFailure());
  auto a = attach_shm_wire(old);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("layout 2, this build speaks layout 4"), std::string::npos)
      << a.error().message;
  auto n1 = create_shm_wire("layout2-next1-" + std::to_string(getpid()));
  ASSERT_TRUE(n1.ok()) << n1.error().message;
  const std::string path = "/dev/shm/rdmx-emu-" + old;
  ASSERT_EQ(::access(path.c_str(), F_OK), 0) << "a live creator's wire was removed";
  // The same mapping, its creator a process that has exited.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  shm_unlink(("/rdmx-emu-" + old).c_str());
  write_layout2(old, child);
  ASSERT_FALSE(HasFatalFailure());
  auto n2 = create_shm_wire("layout2-next2-" + std::to_string(getpid()));
  ASSERT_TRUE(n2.ok()) << n2.error().message;
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << path << " is still there";
}

}  // namespace
}  // namespace rdmx::emu::test
