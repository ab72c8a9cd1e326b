// Device threads: several emulated devices on ONE DeviceThread (two and three devices, traffic
// byte-exact), stop with work in flight and restart, pinning (affinity as asked, bad CPUs
// refused with a clear error), binding rules, idle backoff (never sleeps with work pending).
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

// One side of a link: a device and a connected QP driven by the real CPU-side QueuePair.
struct Port {
  std::unique_ptr<EmuDevice> dev;
  mlx5::QpDesc desc;
  mlx5::QueuePair qp;
  std::vector<Completion> got;
  Buf buf;  // 64 KiB of random bytes, registered
};

Options threaded(const std::string& name, bool own_thread = false) {
  Options o;
  o.mode = Mode::kThreaded;
  o.name = name;
  o.start_thread = own_thread;
  return o;
}

mlx5::QpConfig qp_cfg() {
  mlx5::QpConfig c;
  c.sq_wqebbs = 256;
  c.rq_wqes = 64;
  c.rq_sges = 1;
  c.cq_cqes = 512;
  return c;
}

// Two ports joined by a wire, QPs connected.
struct Link {
  Port a, b;
  void open(const std::string& name, bool own_a = false, bool own_b = false) {
    auto w = make_wire();
    auto da = EmuDevice::open(w, 0, threaded(name + "a", own_a));
    ASSERT_TRUE(da.ok()) << da.error().message;
    auto db = EmuDevice::open(w, 1, threaded(name + "b", own_b));
    ASSERT_TRUE(db.ok()) << db.error().message;
    a.dev = std::move(da).value();
    b.dev = std::move(db).value();
    uint32_t seed = static_cast<uint32_t>(std::hash<std::string>{}(name));
    for (Port* p : {&a, &b}) {
      auto d = p->dev->create_qp(qp_cfg());
      ASSERT_TRUE(d.ok()) << d.error().message;
      p->desc = d.value();
      p->qp.init(p->desc, 1);
      p->buf.alloc(*p->dev, 64 * 1024, ++seed);
    }
    ASSERT_TRUE(mlx5::connect_qps(*a.dev, a.desc.qpn, *b.dev, b.desc.qpn).ok());
  }
};

void post_rdma(Port& s, uint8_t opcode, uint64_t cookie, uint64_t raddr, uint32_t rkey,
               prm::Sge sge, bool ring = true) {
  auto& sq = s.qp.sq();
  ASSERT_GE(sq.free_wqebbs(), 4u);
  const uint8_t f = sq.next_fm_ce_se(true, 0, false);
  auto cur = sq.cursor();
  const uint32_t ds = prm::build_rdma(cur, opcode, s.desc.qpn, sq.wqe_index(), f, raddr, rkey,
                                      {&sge, 1}, Be32::from_host(0));
  sq.commit(ds, opcode, cookie);
  if (ring) sq.ring_doorbell();
}

void post_send(Port& s, uint64_t cookie, prm::Sge sge) {
  auto& sq = s.qp.sq();
  ASSERT_GE(sq.free_wqebbs(), 4u);
  const uint8_t f = sq.next_fm_ce_se(true, 0, false);
  auto cur = sq.cursor();
  const uint32_t ds = prm::build_send(cur, MLX5_OPCODE_SEND, s.desc.qpn, sq.wqe_index(), f,
                                      {&sge, 1}, Be32::from_host(0));
  sq.commit(ds, MLX5_OPCODE_SEND, cookie);
  sq.ring_doorbell();
}

void post_recv(Port& s, uint64_t cookie, prm::Sge sge) {
  ASSERT_TRUE(s.qp.rq().post({&sge, 1}, cookie));
  s.qp.rq().ring_doorbell();
}

std::vector<Completion> wait(Port& s, size_t n, int timeout_ms = 10000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (s.got.size() < n && std::chrono::steady_clock::now() < end) {
    if (!s.qp.poll(16, [&](const Completion& c) { s.got.push_back(c); }))
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  std::vector<Completion> out(s.got.begin(), s.got.begin() + std::min(n, s.got.size()));
  s.got.erase(s.got.begin(), s.got.begin() + static_cast<long>(out.size()));
  EXPECT_EQ(out.size(), n) << "timed out waiting for completions on " << s.dev->name();
  return out;
}

// `rounds` of: WRITE a->b, READ b->a (a reads b), SEND a->b (b posted a receive), each a
// random range, checked byte for byte; the last round in the other direction too.
void traffic(Link& l, int rounds, uint32_t seed) {
  std::mt19937 g(seed);
  Port& a = l.a;
  Port& b = l.b;
  // Regions of each 64 KiB buffer: [0, 16K) WRITE source/destination, [16K, 32K) READ,
  // [32K, 48K) SEND receive.
  constexpr uint32_t kQ = 16 * 1024;
  for (int r = 0; r < rounds; ++r) {
    const bool flip = (r & 1) != 0;
    Port& s = flip ? b : a;  // requester
    Port& t = flip ? a : b;  // responder
    const uint32_t len = 1 + g() % 9000;
    const uint32_t so = g() % (kQ - len), to = g() % (kQ - len);
    // Fresh random source bytes each round.
    auto fresh = random_bytes(len, g());
    std::memcpy(s.buf.p + so, fresh.data(), len);
    // WRITE s[so..] -> t[to..]
    post_rdma(s, MLX5_OPCODE_RDMA_WRITE, 1, t.buf.addr(to), t.buf.mr.rkey,
              {s.buf.addr(so), len, s.buf.mr.lkey});
    // READ t[kQ + to..] -> s[kQ + so..]
    auto remote = random_bytes(len, g());
    std::memcpy(t.buf.p + kQ + to, remote.data(), len);
    post_rdma(s, MLX5_OPCODE_RDMA_READ, 2, t.buf.addr(kQ + to), t.buf.mr.rkey,
              {s.buf.addr(kQ + so), len, s.buf.mr.lkey});
    // SEND s[so..] -> receive into t[2 kQ + to..]
    const uint32_t ro = 2 * kQ + to;
    post_recv(t, 3, {t.buf.addr(ro), len, t.buf.mr.lkey});
    post_send(s, 4, {s.buf.addr(so), len, s.buf.mr.lkey});
    auto cs = wait(s, 3);
    auto ct = wait(t, 1);
    ASSERT_EQ(cs.size(), 3u);
    ASSERT_EQ(ct.size(), 1u);
    for (const Completion& c : cs) EXPECT_TRUE(c.ok()) << int(c.status) << " round " << r;
    EXPECT_EQ(cs[0].cookie, 1u);
    EXPECT_EQ(cs[1].cookie, 2u);
    EXPECT_EQ(cs[2].cookie, 4u);
    EXPECT_TRUE(ct[0].ok());
    EXPECT_EQ(ct[0].cookie, 3u);
    EXPECT_EQ(ct[0].byte_len, len);
    ASSERT_EQ(0, std::memcmp(t.buf.p + to, fresh.data(), len)) << "WRITE, round " << r;
    ASSERT_EQ(0, std::memcmp(s.buf.p + kQ + so, remote.data(), len)) << "READ, round " << r;
    ASSERT_EQ(0, std::memcmp(t.buf.p + ro, fresh.data(), len)) << "SEND, round " << r;
  }
}

std::set<int> affinity_of(pthread_t t) {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(0, pthread_getaffinity_np(t, sizeof set, &set));
  std::set<int> s;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) s.insert(c);
  return s;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(0, sched_getaffinity(0, sizeof set, &set));
  std::vector<int> v;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) v.push_back(c);
  return v;
}

// The tid of this process's thread named `name`, or -1.
pid_t find_thread(const std::string& name) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  pid_t found = -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string comm;
    if (std::getline(f, comm) && comm == name) found = std::atoi(e->d_name);
  }
  closedir(d);
  return found;
}

TEST(DeviceThread, TwoDevicesOnOneThread) {
  Link l;
  ASSERT_NO_FATAL_FAILURE(l.open("t2"));
  EmuDevice* devs[] = {l.a.dev.get(), l.b.dev.get()};
  auto t = DeviceThread::start(devs);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t.value()->size(), 2u);
  EXPECT_TRUE(t.value()->running());
  ASSERT_NO_FATAL_FAILURE(traffic(l, 200, 1));
  const DeviceThreadStats st = t.value()->stats();
  EXPECT_GT(st.rounds, 0u);
  EXPECT_GT(st.busy_rounds, 0u);
  // Both devices were polled by the one thread, once per round (read once it stopped).
  t.value()->stop();
  const uint64_t pa = l.a.dev->stats().polls, pb = l.b.dev->stats().polls;
  EXPECT_GT(pa, 0u);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(pa, t.value()->stats().rounds);
  EXPECT_EQ(l.a.dev->checker().total(), 0u) << l.a.dev->checker().dump();
  EXPECT_EQ(l.b.dev->checker().total(), 0u) << l.b.dev->checker().dump();
}

TEST(DeviceThread, ThreeDevicesOnOneThreadAndAPeerThread) {
  // Link 1: x <-> y, link 2: z <-> w. x, y, z on one thread, w on a second DeviceThread.
  Link l1, l2;
  ASSERT_NO_FATAL_FAILURE(l1.open("x"));
  ASSERT_NO_FATAL_FAILURE(l2.open("z"));
  EmuDevice* three[] = {l1.a.dev.get(), l1.b.dev.get(), l2.a.dev.get()};
  auto t = DeviceThread::start(three);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EmuDevice* one[] = {l2.b.dev.get()};
  auto t2 = DeviceThread::start(one, ThreadOptions{.name = "rdmx-emu-w"});
  ASSERT_TRUE(t2.ok()) << t2.error().message;
  EXPECT_EQ(t.value()->size(), 3u);
  // Both links at once from two application threads.
  std::thread other([&] { traffic(l2, 150, 3); });
  traffic(l1, 150, 2);
  other.join();
  for (Link* l : {&l1, &l2})
    for (Port* p : {&l->a, &l->b})
      EXPECT_EQ(p->dev->checker().total(), 0u) << p->dev->checker().dump();
}

TEST(DeviceThread, FourDevicesOneThreadBothLinks) {
  Link l1, l2;
  ASSERT_NO_FATAL_FAILURE(l1.open("p"));
  ASSERT_NO_FATAL_FAILURE(l2.open("q"));
  EmuDevice* four[] = {l1.a.dev.get(), l1.b.dev.get(), l2.a.dev.get(), l2.b.dev.get()};
  auto t = DeviceThread::start(four);
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::thread other([&] { traffic(l2, 100, 5); });
  traffic(l1, 100, 4);
  other.join();
}

TEST(DeviceThread, StopWithWorkInFlightThenRestart) {
  Link l;
  ASSERT_NO_FATAL_FAILURE(l.open("s"));
  EmuDevice* devs[] = {l.a.dev.get(), l.b.dev.get()};
  auto tr = DeviceThread::start(devs);
  ASSERT_TRUE(tr.ok()) << tr.error().message;
  DeviceThread& t = *tr.value();
  for (int cycle = 0; cycle < 20; ++cycle) {
    // A burst of WRITEs a -> b, then stop at once: some are done, some in flight, some not
    // yet seen by the device.
    constexpr int kN = 24;
    std::vector<uint8_t> expect(l.b.buf.p, l.b.buf.p + l.b.buf.len);
    for (int i = 0; i < kN; ++i) {
      const uint32_t off = static_cast<uint32_t>(i) * 2048;
      std::memset(l.a.buf.p + off, cycle * 31 + i, 2048);
      std::memcpy(expect.data() + off, l.a.buf.p + off, 2048);
      post_rdma(l.a, MLX5_OPCODE_RDMA_WRITE, static_cast<uint64_t>(i), l.b.buf.addr(off),
                l.b.buf.mr.rkey, {l.a.buf.addr(off), 2048, l.a.buf.mr.lkey});
    }
    t.stop();
    EXPECT_FALSE(t.running());
    // Stopped: nothing moves.
    const uint64_t polls = l.a.dev->stats().polls;
    size_t seen = 0;
    l.a.qp.poll(64, [&](const Completion& c) { l.a.got.push_back(c); });
    seen = l.a.got.size();
    std::this_thread::sleep_for(std::chrono::milliseconds(cycle == 0 ? 20 : 1));
    l.a.qp.poll(64, [&](const Completion& c) { l.a.got.push_back(c); });
    EXPECT_EQ(l.a.got.size(), seen);
    EXPECT_EQ(l.a.dev->stats().polls, polls);
    ASSERT_TRUE(t.restart().ok());
    EXPECT_TRUE(t.running());
    auto cs = wait(l.a, kN);
    ASSERT_EQ(cs.size(), size_t{kN});
    for (int i = 0; i < kN; ++i) {
      EXPECT_TRUE(cs[i].ok()) << int(cs[i].status);
      EXPECT_EQ(cs[i].cookie, static_cast<uint64_t>(i));
    }
    ASSERT_EQ(0, std::memcmp(expect.data(), l.b.buf.p, l.b.buf.len)) << "cycle " << cycle;
  }
  // Still fully working after the stops.
  ASSERT_NO_FATAL_FAILURE(traffic(l, 20, 9));
  t.stop();
  t.stop();  // idempotent
}

TEST(DeviceThread, PinsToTheCpuAsked) {
  Link l;
  ASSERT_NO_FATAL_FAILURE(l.open("pin"));
  EmuDevice* devs[] = {l.a.dev.get(), l.b.dev.get()};
  for (int cpu : allowed_cpus()) {
    ThreadOptions o;
    o.cpu = cpu;
    o.name = "rdmx-emu-pin";
    auto t = DeviceThread::start(devs, o);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(affinity_of(t.value()->native_handle()), std::set<int>{cpu});
    EXPECT_EQ(find_thread("rdmx-emu-pin") > 0, true) << "thread name";
    ASSERT_NO_FATAL_FAILURE(traffic(l, 10, static_cast<uint32_t>(cpu)));
    // Pinned again on restart.
    t.value()->stop();
    ASSERT_TRUE(t.value()->restart().ok());
    EXPECT_EQ(affinity_of(t.value()->native_handle()), std::set<int>{cpu});
    t.value().reset();  // releases the devices for the next round
  }
  // Unpinned (cpu -1): the thread keeps the creator's affinity.
  auto t = DeviceThread::start(devs);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(affinity_of(t.value()->native_handle()), affinity_of(pthread_self()));
}

TEST(DeviceThread, PinningToAnInvalidCpuFailsClearly) {
  Link l;
  ASSERT_NO_FATAL_FAILURE(l.open("bad"));
  EmuDevice* devs[] = {l.a.dev.get(), l.b.dev.get()};
  const int n_conf = static_cast<int>(sysconf(_SC_NPROCESSORS_CONF));
  for (int cpu : {n_conf + 3, CPU_SETSIZE - 1, CPU_SETSIZE, 1 << 20}) {
    ThreadOptions o;
    o.cpu = cpu;
    auto t = DeviceThread::start(devs, o);
    ASSERT_FALSE(t.ok()) << "cpu " << cpu;
    EXPECT_EQ(t.error().code, Errc::kInvalidArgument);
    const std::string& m = t.error().message;
    EXPECT_NE(m.find("cannot pin device thread 'rdmx-emu' to CPU " + std::to_string(cpu)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("online CPUs: "), std::string::npos) << m;
  }
  // The failed starts left the devices free: a good start works.
  auto t = DeviceThread::start(devs);
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_NO_FATAL_FAILURE(traffic(l, 5, 1));
}

TEST(DeviceThread, OwnThreadPinnedWithOptionsCpu) {
  const std::vector<int> cpus = allowed_cpus();
  const int cpu = cpus.back();
  Options o = threaded("ownpin", true);
  o.cpu = cpu;
  auto pr = make_pair(o, o);  // names ownpina / ownpinb
  ASSERT_TRUE(pr.ok()) << pr.error().message;
  for (const char* n : {"emu:ownpina", "emu:ownpinb"}) {
    const pid_t tid = find_thread(n);
    ASSERT_GT(tid, 0) << n;
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(0, sched_getaffinity(tid, sizeof set, &set));
    EXPECT_EQ(CPU_COUNT(&set), 1);
    EXPECT_TRUE(CPU_ISSET(cpu, &set));
  }
  // stop/start keeps the pin.
  pr.value().a->stop();
  EXPECT_LT(find_thread("emu:ownpina"), 0);
  ASSERT_TRUE(pr.value().a->start().ok());
  EXPECT_GT(find_thread("emu:ownpina"), 0);

  Options bad = threaded("ownbad", true);
  bad.cpu = CPU_SETSIZE + 1;
  auto pb = make_pair(bad, bad);
  ASSERT_FALSE(pb.ok());
  EXPECT_EQ(pb.error().code, Errc::kInvalidArgument);
  EXPECT_NE(pb.error().message.find("cannot pin device thread 'emu:ownbada'"), std::string::npos)
      << pb.error().message;
}

TEST(DeviceThread, BindingRules) {
  // A device running its own thread is refused (with the way out in the message).
  Link own;
  ASSERT_NO_FATAL_FAILURE(own.open("own", true, false));
  EmuDevice* with_own[] = {own.a.dev.get(), own.b.dev.get()};
  auto r = DeviceThread::start(with_own);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kBusy);
  EXPECT_NE(r.error().message.find("start_thread = false"), std::string::npos) << r.error().message;
  // After stop() it can join a DeviceThread.
  own.a.dev->stop();
  r = DeviceThread::start(with_own);
  ASSERT_TRUE(r.ok()) << r.error().message;
  // Served devices: no second DeviceThread, no own thread.
  auto r2 = DeviceThread::start(std::span<EmuDevice* const>(with_own, 1));
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().code, Errc::kBusy);
  Status s = own.b.dev->start();
  EXPECT_EQ(s.error().code, Errc::kBusy);
  ASSERT_NO_FATAL_FAILURE(traffic(own, 5, 3));
  // Destroying the DeviceThread releases them: own threads work again.
  r.value().reset();
  ASSERT_TRUE(own.a.dev->start().ok());
  ASSERT_TRUE(own.b.dev->start().ok());
  ASSERT_NO_FATAL_FAILURE(traffic(own, 5, 4));

  // Bad lists.
  EXPECT_EQ(DeviceThread::start({}).error().code, Errc::kInvalidArgument);
  Link l;
  ASSERT_NO_FATAL_FAILURE(l.open("dup"));
  EmuDevice* dup[] = {l.a.dev.get(), l.a.dev.get()};
  EXPECT_EQ(DeviceThread::start(dup).error().code, Errc::kInvalidArgument);
  Options io;
  io.mode = Mode::kInline;
  auto inl = make_pair(io, io);
  ASSERT_TRUE(inl.ok());
  EmuDevice* inline_dev[] = {inl.value().a.get()};
  auto ri = DeviceThread::start(inline_dev);
  ASSERT_FALSE(ri.ok());
  EXPECT_EQ(ri.error().code, Errc::kInvalidArgument);
  EXPECT_NE(ri.error().message.find("inline"), std::string::npos) << ri.error().message;
}

TEST(DeviceThread, DevicesAndThreadGoInAnyOrder) {
  {
    // A device leaves a running thread (stop(), then destruction); the thread goes on with the
    // others.
    Link l1, l2;
    ASSERT_NO_FATAL_FAILURE(l1.open("o1"));
    ASSERT_NO_FATAL_FAILURE(l2.open("o2"));
    EmuDevice* devs[] = {l1.a.dev.get(), l1.b.dev.get(), l2.a.dev.get(), l2.b.dev.get()};
    auto t = DeviceThread::start(devs);
    ASSERT_TRUE(t.ok());
    std::thread traffic1([&] { traffic(l1, 50, 1); });
    l2.a.dev->stop();
    EXPECT_EQ(t.value()->size(), 3u);
    l2.a.dev.reset();
    l2.b.dev.reset();
    EXPECT_EQ(t.value()->size(), 2u);
    traffic1.join();
    ASSERT_NO_FATAL_FAILURE(traffic(l1, 10, 2));
    // The DeviceThread goes first here (l1's devices after it).
  }
  {
    // Devices destroyed before their thread.
    auto l = std::make_unique<Link>();
    ASSERT_NO_FATAL_FAILURE(l->open("o3"));
    EmuDevice* devs[] = {l->a.dev.get(), l->b.dev.get()};
    auto t = DeviceThread::start(devs);
    ASSERT_TRUE(t.ok());
    ASSERT_NO_FATAL_FAILURE(traffic(*l, 5, 3));
    l.reset();
    EXPECT_EQ(t.value()->size(), 0u);
    EXPECT_TRUE(t.value()->running());
  }
}

TEST(DeviceThread, NeverSleepsWithWorkPendingSleepsWhenIdle) {
  // a on thread ta, b on thread tb. With tb stopped, a WRITE from a waits for b's ACK: ta has
  // work pending and must not sleep (tiny idle_spin would make it sleep at once otherwise).
  Link l;
  ASSERT_NO_FATAL_FAILURE(l.open("idle"));
  ThreadOptions o;
  o.idle_spin = 1;
  o.idle_sleep_us = 100;
  EmuDevice* da[] = {l.a.dev.get()};
  EmuDevice* db[] = {l.b.dev.get()};
  auto ta = DeviceThread::start(da, o);
  auto tb = DeviceThread::start(db, o);
  ASSERT_TRUE(ta.ok() && tb.ok());
  // Idle: the thread sleeps (polled for, so a loaded machine only makes this slower).
  const auto until = [](auto&& cond) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!cond() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return cond();
  };
  EXPECT_TRUE(until([&] { return ta.value()->stats().sleeps > 10; }));
  tb.value()->stop();
  post_rdma(l.a, MLX5_OPCODE_RDMA_WRITE, 77, l.b.buf.addr(0), l.b.buf.mr.rkey,
            {l.a.buf.addr(0), 100, l.a.buf.mr.lkey});
  // Wait until a transmitted (its request is then in flight, unanswered).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (l.a.dev->stats().tx_packets == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  ASSERT_EQ(l.a.dev->stats().tx_packets, 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const DeviceThreadStats s1 = ta.value()->stats();
  // At least 30 ms and 50 more rounds with the response outstanding (polled for: on a loaded
  // machine ta may not run at all for tens of milliseconds, which proves nothing either way).
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(until([&] { return ta.value()->stats().pending_rounds > s1.pending_rounds + 50; }));
  const DeviceThreadStats s2 = ta.value()->stats();
  EXPECT_EQ(s2.sleeps, s1.sleeps) << "slept with a response outstanding";
  ASSERT_TRUE(tb.value()->restart().ok());
  auto c = wait(l.a, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].ok());
  // Idle again: sleeps resume.
  EXPECT_TRUE(until([&] { return ta.value()->stats().sleeps > s2.sleeps; }));
}

}  // namespace
}  // namespace rdmx::emu::test
