// rdmafwd: the testpmd-like application of rdmx (doc/guides/rdmafwd.md).
//
//   rdmafwd [EAL options] -- [--device emu] [--fwd rpc] [--duration 5] [-i] ...
//
// Main lcore: parses, sets up (devices, pools, cores), prints, runs the prompt and the telemetry
// callbacks read lock-free counters. Poll lcores: one Lane each (the forwarding loop, no
// allocation, no system call). Exit status: 0 ok, 1 runtime failure, 2 bad arguments, 3 device
// not found.
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <rdmx/rt/eal.hpp>
#include <rdmx/rt/placement.hpp>
#include <rdmx/rt/topology.hpp>
#include <rdmx/win/peer_guard.hpp>

#include <nlohmann/json.hpp>

#include "app.hpp"
#include "faults.hpp"

namespace rdmafwd {

bool rpc_send_bye(Lane& l);
void io_failed_public(Lane& l);

App& app() {
  static App a;
  return a;
}

namespace {

int lane_main(rt::CoreContext& ctx) {
  App& a = app();
  Testbed& tb = *a.tb;
  Lane& l = *tb.lanes[ctx.index()];
  const Engine* e = l.cfg.engine;
  l.draining = false;
  l.drain_deadline = 0;
  l.st.issuing.set(1);
  l.st.active.store(true, std::memory_order_release);
  l.issued_base = l.st.issued.get();
  if (!e->start(l)) {
    io_failed_public(l);
    l.st.issuing.set(0);
    l.st.active.store(false, std::memory_order_release);
    return -1;
  }
  fault_start(l);
  const uint64_t hz = rte_get_tsc_hz();
  const bool can_recover = !l.remote_peer && !l.remote_client;
  // A QP error: recover both ends (single process) or stop the lane (two-process mode).
  auto on_error = [&] {
    if (l.dead) return;
    if (!can_recover) {
      l.dead = true;
      // A client the server cut off (drop_peer): its lane ends, this process did not fail.
      if (!l.peer_dropped.load(std::memory_order_acquire)) l.st.failed.set(1);
      return;
    }
    (void)recover_lane(l, tb);
    if (l.draining) l.drain_deadline = rte_rdtsc() + 5 * hz;
  };
  int rc = rt::run_poll_loop(
      ctx,
      [&] {
        if (l.cfg.fault_every) fault_inject(l, tb, rte_rdtsc());
        const bool busy = e->fwd(l);
        if ((++l.iter & 63) == 0) {
          if (!l.failed && lane_in_error(l)) l.failed = true;
          l.st.issued.set(l.issued_base + l.issued);
          if (l.dead || (l.cfg.io_limit && l.completed >= l.cfg.io_limit)) l.st.issuing.set(0);
        }
        if (l.failed) on_error();
        return busy;
      },
      [&] {
        if (!l.draining) {
          l.draining = true;
          l.drain_deadline = rte_rdtsc() + (l.dead ? hz / 2 : 5 * hz);
        }
        if (!l.failed && lane_in_error(l)) l.failed = true;
        if (l.failed && !l.dead) {
          on_error();
          return false;
        }
        if (e->idle(l)) {
          if (!l.dead && can_recover && fault_settle(l, tb)) {
            l.drain_deadline = rte_rdtsc() + 5 * hz;
            return false;
          }
          if (l.dead && l.issued > l.completed) {  // a lane that could not recover
            l.st.abandoned.add(l.issued - l.completed);
            l.completed = l.issued;
          }
          return true;
        }
        if (rte_rdtsc() > l.drain_deadline) {
          // Never completed: counted once, as abandoned at stop.
          if (l.issued > l.completed) l.st.abandoned.add(l.issued - l.completed);
          l.completed = l.issued;
          if (!l.failed) l.failed = true;
          l.dead = true;
          l.st.failed.set(1);
          return true;
        }
        return false;
      });
  // A server's calls accepted and never answered when its run ends (its client went away, or
  // the stop came first): abandoned, counted once, never lost.
  if (l.remote_client && l.issued > l.completed) {
    l.st.abandoned.add(l.issued - l.completed);
    l.completed = l.issued;
  }
  l.st.issued.set(l.issued_base + l.issued);
  l.st.issuing.set(0);
  l.st.active.store(false, std::memory_order_release);
  if (l.c && l.remote_peer && !l.failed) (void)rpc_send_bye(l);
  return rc;
}

}  // namespace

void io_failed_public(Lane& l) {
  l.st.io_errors.add(1);
  l.failed = true;
  l.dead = true;
  l.st.failed.set(1);
}

Status App::start(bool resume) {
  if (running) return make_error(Errc::kState, "forwarding is already running");
  for (auto& lp : tb->lanes) {
    if (lp->dead)
      return make_error(Errc::kState, "lane " + std::to_string(lp->index) +
                                          " had a queue pair error it could not recover from: "
                                          "restart rdmafwd");
  }
  const Engine* e = find_engine(prm.fwd);
  const uint64_t n_lanes = tb->lanes.size();
  for (auto& lp : tb->lanes) {
    Lane& l = *lp;
    // A server runs rpc for its clients, and relay on the lanes of a relay client.
    const bool relays = prm.role == Role::kServer && l.client < tb->peers.size() &&
                        tb->peers[l.client].fwd == "relay";
    l.cfg.engine = relays ? find_engine("relay") : e;
    l.cfg.burst = prm.burst;
    l.cfg.pages = prm.pages_per_io;
    l.cfg.metadata = prm.metadata;
    l.cfg.depth = l.depth;
    l.cfg.verify = prm.verify && device_kind(prm) != DeviceKind::kEmuSink;
    l.cfg.corrupt_every = prm.corrupt_every;
    l.cfg.forge_rkey_every = prm.forge_rkey_every;
    l.cfg.forge_handle_every = prm.forge_handle_every;
    l.cfg.io_limit = prm.io_count ? prm.io_count / n_lanes + (l.index < prm.io_count % n_lanes) : 0;
    l.cfg.fault_every = prm.fault_every;
    l.cfg.fault_kinds = prm.fault_kinds;
    l.cfg.fault_seed = prm.fault_seed;
    l.cfg.lanes = static_cast<uint32_t>(n_lanes);
    l.st.runs.add(1);
  }
  // Statistics are those of this run (as testpmd's `start` does); the text says "since start".
  if (!resume) {
    reset_stats("start");
    last_period = base;
    last_period_tsc = rte_rdtsc();
  }
  run_start_tsc = rte_rdtsc();
  if (Status s = launcher->start(lane_main); !s) return s;
  running = true;
  stats_shown = false;
  return {};
}

Status App::stop() {
  if (!running) return make_error(Errc::kState, "forwarding is not running");
  launcher->request_stop();
  std::vector<int> rc = launcher->wait();
  (void)rc;
  run_cycles += rte_rdtsc() - run_start_tsc.load();
  running = false;
  refresh_census();
  return {};
}

void App::reset_stats(const char* why) {
  Snapshot b = take_snapshot(tb->lanes);
  // A server's peer may act before the first start (its QPs are connected at the rendezvous,
  // and a client runs as soon as it is ready): what the device refused until then belongs to
  // the first run, not to nothing.
  if (!started_once)
    for (LaneSnap& l : b.lanes) l.refused = 0;
  started_once = true;
  std::lock_guard<std::mutex> g(mu);  // telemetry reads `since`
  base = std::move(b);
  since = why;
  run_cycles = 0;
  if (running) run_start_tsc = rte_rdtsc();
}

void App::refresh_census() {
  bool ok = true;
  std::vector<Testbed::PoolCensus> v;
  std::string text = tb->census(ok, &v);
  std::lock_guard<std::mutex> g(mu);
  census_text = text;
  census = v;
  census_ok = census_ok && ok;
}

double App::seconds() const {
  uint64_t c = run_cycles.load();
  if (running) c += rte_rdtsc() - run_start_tsc.load();
  return static_cast<double>(c) / static_cast<double>(rte_get_tsc_hz());
}

Snapshot App::stats() const {
  return diff(take_snapshot(tb->lanes), base);
}

Labels App::labels() const {
  Labels lb;
  lb.fwd = prm.fwd;
  // A server answers what its clients run (negotiated at the rendezvous): name that, not its
  // own --fwd (always rpc).
  if (prm.role == Role::kServer && tb && !tb->peers.empty()) {
    lb.fwd.clear();
    for (const auto& pr : tb->peers)
      if (!pr.fwd.empty() && ("," + lb.fwd + ",").find("," + pr.fwd + ",") == std::string::npos)
        lb.fwd += (lb.fwd.empty() ? "" : ",") + pr.fwd;
    if (lb.fwd.empty()) lb.fwd = prm.fwd;
  }
  lb.device = prm.device;
  if (prm.role != Role::kBoth) lb.device += std::string(" (") + role_name(prm.role) + ")";
  lb.lcores = lcores;
  lb.since = since;
  if (prm.fwd == "umr")
    lb.bytes_kind = "mapped";
  else if (device_kind(prm) == DeviceKind::kEmuSink)
    lb.bytes_kind = "posted";
  return lb;
}

bool App::finished() const {
  if (!running) return false;
  // A server is done once every lane's client said goodbye (or the lane failed): one lane's
  // goodbye arrives while the other lanes still have requests in flight.
  if (prm.role == Role::kServer) {
    for (auto& l : tb->lanes)
      if (!l->st.peer_bye.get() && !l->st.failed.get() &&
          !l->peer_dropped.load(std::memory_order_acquire))
        return false;
    return true;
  }
  bool all_done = true;
  for (auto& l : tb->lanes)
    if (l->st.issuing.get() || !(prm.io_count || l->st.failed.get())) all_done = false;
  return all_done;
}

std::string App::config_text() const {
  std::string lcs;
  for (unsigned lc : lcores) {
    char b[16];
    std::snprintf(b, sizeof b, " %u", lc);
    lcs.append(b);
  }
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "  fwd %s (%s)\n  device %s, role %s\n  lanes %zu (poll lcores:%s)\n"
                "  pages-per-io %u x %u B = %u B per I/O (windows hold %u pages)\n"
                "  io-depth %u, burst %u, windows-per-core %u\n"
                "  verify %s, stats-period %.2f s, duration %.2f s, io-count %" PRIu64 "\n",
                prm.fwd.c_str(), find_engine(prm.fwd)->what, prm.device.c_str(),
                role_name(prm.role), tb->lanes.size(), lcs.c_str(), prm.pages_per_io, prm.page_size,
                prm.pages_per_io * prm.page_size, prm.max_pages, prm.io_depth, prm.burst,
                prm.windows_per_core,
                prm.verify && device_kind(prm) != DeviceKind::kEmuSink ? "on" : "off",
                prm.stats_period, prm.duration, prm.io_count);
  std::string s = buf;
  for (const std::string& n : tb->notes) s += "  " + n + "\n";
  return s;
}

std::string App::config_json() const {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"fwd\":\"%s\",\"device\":\"%s\",\"role\":\"%s\",\"lanes\":%zu,"
                "\"pages_per_io\":%u,\"page_size\":%u,\"max_pages\":%u,\"io_depth\":%u,"
                "\"burst\":%u,\"windows_per_core\":%u,\"verify\":%s,\"running\":%s}",
                prm.fwd.c_str(), prm.device.c_str(), role_name(prm.role), tb->lanes.size(),
                prm.pages_per_io, prm.page_size, prm.max_pages, prm.io_depth, prm.burst,
                prm.windows_per_core, prm.verify ? "true" : "false", running ? "true" : "false");
  return buf;
}

void App::print_stats(const char* type, int exit_status) {
  const Snapshot s = stats();
  const double secs = seconds();
  if (prm.json) {
    std::printf("%s\n", format_json(s, secs, labels(), type, exit_status).c_str());
  } else {
    std::fputs(format_text(s, secs, labels()).c_str(), stdout);
  }
  if (std::strcmp(type, "summary") == 0) print_roce_stats();
  std::fflush(stdout);
}

// The RoCE v2 link of an emu@roce device (this process's side): what the transport did to
// deliver the run (retransmissions, NAKs, duplicates, injected faults). Nothing on other wires.
void App::print_roce_stats() {
  for (emu::EmuDevice* d : {tb->emu_a, tb->emu_b}) {
    if (!d) continue;
    const emu::EmuStats::Roce r = d->stats().roce;
    if (r.tx_packets == 0 && r.rx_packets == 0) continue;
    if (prm.json) {
      nlohmann::ordered_json j;
      j["type"] = "roce";
      j["device"] = d->name();
      j["tx_packets"] = r.tx_packets;
      j["rx_packets"] = r.rx_packets;
      j["retransmits"] = r.retransmits;
      j["timeouts"] = r.timeouts;
      j["seq_naks_sent"] = r.seq_naks_sent;
      j["seq_naks_rcvd"] = r.seq_naks_rcvd;
      j["duplicates"] = r.duplicates;
      j["acks_sent"] = r.acks_sent;
      j["rx_full"] = r.rx_full;
      j["injected"] = {{"loss", r.injected_loss},
                       {"reorder", r.injected_reorder},
                       {"duplicate", r.injected_dup}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("  RoCE v2 link (%s): packets tx %" PRIu64 " rx %" PRIu64 ", retransmits %" PRIu64
                  ", timeouts %" PRIu64 ", sequence NAKs sent %" PRIu64 " received %" PRIu64
                  ", duplicates %" PRIu64 "; injected loss %" PRIu64 " reorder %" PRIu64
                  " duplicate %" PRIu64 "\n",
                  d->name().c_str(), r.tx_packets, r.rx_packets, r.retransmits, r.timeouts,
                  r.seq_naks_sent, r.seq_naks_rcvd, r.duplicates, r.injected_loss,
                  r.injected_reorder, r.injected_dup);
    }
  }
}

double App::period() const {
  if (prm.stats_period > 0) return prm.stats_period;
  const bool prompt = prm.interactive || !prm.cmdline_file.empty();
  // Without --stats-period, a run that lasts prints a one-line status every status_period seconds
  // (10; the first after that long, so short runs print none), unless --quiet or at the prompt.
  return prm.quiet || prompt ? 0 : prm.status_period;
}

void App::print_period() {
  const Snapshot cur = take_snapshot(tb->lanes);
  const uint64_t now = cur.tsc;
  const double dt =
      static_cast<double>(now - last_period_tsc) / static_cast<double>(rte_get_tsc_hz());
  const Snapshot d = diff(cur, last_period);
  if (prm.stats_period == 0) {  // the default status line: text, beside the other messages
    std::fputs(format_period(d, dt, seconds(), labels()).c_str(), text_out());
  } else if (prm.json) {
    std::printf("%s\n", format_json(d, dt, labels(), "periodic").c_str());
  } else {
    std::fputs(format_period(d, dt, seconds(), labels()).c_str(), stdout);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  last_period = cur;
  last_period_tsc = now;
}

int App::exit_status(bool this_run) {
  // Every run of the session counts, whatever `start` or `clear stats` reset for display.
  const LaneSnap t = this_run ? stats().total() : take_snapshot(tb->lanes).total();
  std::string dump;
  const uint64_t reports = tb->checker_reports(&dump);
  int st = kExitOk;
  FILE* o = stderr;
  if (t.verify_fail) {
    std::fprintf(o, "rdmafwd: verification failed: %" PRIu64 " payload(s) did not match\n",
                 t.verify_fail);
    st = kExitRuntime;
  }
  if (t.errors() > t.verify_fail + excused_errors) {
    std::fprintf(o,
                 "rdmafwd: %" PRIu64 " error(s) during the run (I/O errors %" PRIu64
                 ", abandoned I/Os %" PRIu64 ", lost I/Os %" PRIu64 ", rejected %" PRIu64
                 ", lanes not recovered %" PRIu64 "; by syndrome: %s)\n",
                 t.errors() - t.verify_fail, t.io_errors, t.abandoned, t.lost, t.rejected, t.dead,
                 syndrome_list(t, false).c_str());
    st = kExitRuntime;
  }
  if (t.faults_injected || t.faults_recovered)
    std::fprintf(o,
                 "rdmafwd: faults: %" PRIu64 " injected, %" PRIu64 " recovered; %" PRIu64
                 " I/O(s) failed by them (counted)\n",
                 t.faults_injected, t.faults_recovered, t.fault_ios);
  if (reports) {
    std::fprintf(
        o, "rdmafwd: the emulated device's PRM checker reported %" PRIu64 " rule violation(s):\n%s",
        reports, dump.c_str());
    st = kExitRuntime;
  }
  if (!census_ok) {
    std::fprintf(o, "rdmafwd: window census found an inconsistency:\n%s", census_text.c_str());
    st = kExitRuntime;
  }
  return st;
}

// A server over TCP, after its summary: per client, what it was refused (remote accesses its
// QPs refused, requests that broke the protocol) and whether it was dropped; then the clients
// refused at the rendezvous. Text on the text output, or one {"type":"clients"} JSON line.
void print_clients(App& a) {
  const Testbed& tb = *a.tb;
  if (a.prm.role != Role::kServer || (tb.peers.empty() && tb.refused_clients.empty())) return;
  const Snapshot snap = take_snapshot(tb.lanes);
  nlohmann::ordered_json j;
  j["type"] = "clients";
  j["served"] = nlohmann::ordered_json::array();
  std::string text = "  clients:\n";
  for (const Testbed::Peer& pr : tb.peers) {
    uint64_t remote = 0, requests = 0;
    for (unsigned li = pr.first_lane; li < pr.first_lane + pr.n_lanes && li < snap.lanes.size();
         ++li) {
      remote += snap.lanes[li].refused;
      requests += snap.lanes[li].refused_requests;
    }
    const std::string name = pr.name;
    j["served"].push_back({{"peer", name},
                           {"lanes", {pr.first_lane, pr.first_lane + pr.n_lanes - 1}},
                           {"refused_remote", remote},
                           {"refused_requests", requests},
                           {"dropped", pr.dropped}});
    text += "    " + name + " (lanes " + std::to_string(pr.first_lane) + ".." +
            std::to_string(pr.first_lane + pr.n_lanes - 1) + "): refused remote " +
            std::to_string(remote) + ", refused requests " + std::to_string(requests) +
            (pr.dropped ? ", dropped" : "") + "\n";
  }
  j["refused_at_rendezvous"] = nlohmann::ordered_json::array();
  for (const auto& [peer, why] : tb.refused_clients) {
    j["refused_at_rendezvous"].push_back({{"peer", peer}, {"why", why}});
    text += "    " + peer + ": refused at the rendezvous\n";
  }
  if (a.prm.json)
    std::printf("%s\n", j.dump().c_str());
  else
    std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// Background duties while forwarding: periodic lines, duration and io-count.
void background_tick(App& a) {
  if (!a.running) return;
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t now = rte_rdtsc();
  const double period = a.period();
  if (period > 0 &&
      static_cast<double>(now - a.last_period_tsc) >= period * static_cast<double>(hz))
    a.print_period();
  // The forwarding time of the run, a reconnect's resumed parts included (App::seconds).
  const bool timed_out = a.prm.duration > 0 && a.seconds() >= a.prm.duration;
  if (timed_out || a.finished()) {
    (void)a.stop();
    if (a.prm.interactive || !a.prm.cmdline_file.empty())
      std::fprintf(a.text_out(), "rdmafwd: forwarding stopped (%s)\n",
                   timed_out ? "duration reached" : "done");
  }
}

}  // namespace rdmafwd

using namespace rdmafwd;

namespace {

void on_signal(int) {
  g_signal.store(true);
}

int fail_usage(const std::string& prog, const std::string& msg) {
  std::fputs(usage_error_text(prog, msg).c_str(), stderr);
  return kExitUsage;
}

// Ctrl-C during set-up (EAL start-up, device open, waiting for a peer): every owner has been
// destroyed by the time main returns, so the EAL runtime directory and shm files are gone.
int interrupted(const char* phase) {
  std::fprintf(stderr, "rdmafwd: interrupted %s\n", phase);
  return kExitInterrupted;
}

}  // namespace

int main(int argc, char** argv) {
  // The handler goes in before anything else: a signal that lands during EAL start-up must set
  // the flag, not kill the process with DPDK's runtime directory half made.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // `rdmafwd --help` needs no `--` and starts no EAL (the man page is made from this output).
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(usage_text("rdmafwd").c_str(), stdout);
    return kExitOk;
  }
  auto split = rt::split_args(argc, argv);
  if (!split) return fail_usage("rdmafwd", split.error().message);
  const rt::EalArgs& ea = split.value();
  std::string prog = ea.prog;
  if (auto sl = prog.rfind('/'); sl != std::string::npos) prog = prog.substr(sl + 1);
  App& a = app();
  // Without `--`, everything was taken as EAL arguments: an app option there is a usage error.
  const ParseOutcome po = parse_params(ea.app, a.prm);
  if (po.help) {
    std::fputs(usage_text(prog).c_str(), stdout);
    return kExitOk;
  }
  if (!po.error.empty()) return fail_usage(prog, po.error);
  for (const std::string& s : ea.eal) {
    if (s == "--fwd" || s == "--device" || s == "--duration")
      return fail_usage(prog, "'" + s + "' is an rdmafwd option: put it after `--`");
  }
  // A script that cannot be read is a usage error found before any set-up.
  if (!a.prm.cmdline_file.empty() && ::access(a.prm.cmdline_file.c_str(), R_OK) != 0)
    return fail_usage(prog, "--cmdline-file " + a.prm.cmdline_file + ": " + std::strerror(errno));

  rt::EalOptions eo;
  eo.auto_no_huge = true;
  eo.no_pci = true;
  eo.file_prefix = "rdmafwd";
  eo.unique_file_prefix = true;
  auto eal = rt::Eal::init(ea, eo);
  if (!eal) {
    std::fprintf(stderr, "rdmafwd: error: EAL: %s\n", eal.error().message.c_str());
    return eal.error().code == Errc::kInvalidArgument ? kExitUsage : kExitRuntime;
  }
  rt::Eal eal_owner = std::move(eal).value();
  if (g_signal.load()) return interrupted("during EAL start-up");
  FILE* out = a.text_out();
  for (const std::string& n : eal_owner.notices())
    std::fprintf(out, "rdmafwd: EAL: %s\n", n.c_str());

  // Placement: poll lcores on workers, apart from the device thread when possible.
  a.main_lcore = eal_owner.main_lcore();
  const std::vector<rt::LcoreSlot> slots = eal_owner.lcores();
  size_t workers = 0;
  for (const auto& s : slots) workers += !s.is_main;
  if (workers < a.prm.nb_cores) {
    return fail_usage(prog, "--nb-cores " + std::to_string(a.prm.nb_cores) + " needs " +
                                std::to_string(a.prm.nb_cores) + " worker lcore(s); the EAL has " +
                                std::to_string(workers) + " (give more with -l, e.g. -l 0-" +
                                std::to_string(a.prm.nb_cores) + ")");
  }
  const bool threaded_emu = device_kind(a.prm) == DeviceKind::kEmuThreaded;
  auto topo = rt::discover_topology();
  if (topo) {
    const rt::DeviceLocality loc = rt::emu_device_locality(0);
    auto pl = rt::plan(topo.value(), a.prm.nb_cores, threaded_emu, 0, slots);
    if (pl) {
      for (const auto& s : pl.value().poll) a.lcores.push_back(s.lcore_id);
      a.prm.device_cpu = pl.value().device_thread_cpu;
      a.topology_text = rt::format_topology(topo.value(), &loc, &pl.value());
    } else {
      a.topology_text = rt::format_topology(topo.value(), &loc, nullptr);
    }
  } else {
    a.topology_text = "topology: " + topo.error().message + "\n";
  }
  if (a.lcores.empty()) {
    for (const auto& s : slots)
      if (!s.is_main && a.lcores.size() < a.prm.nb_cores) a.lcores.push_back(s.lcore_id);
  }
  if (a.prm.show_topology) std::fputs(a.topology_text.c_str(), out);

  std::fflush(out);
  // The waits of the TCP rendezvous are announced when they begin (the address is known then).
  auto say = [out](const std::string& m) {
    std::fprintf(out, "rdmafwd: %s\n", m.c_str());
    std::fflush(out);
  };
  auto warn = [](const std::string& m) { std::fprintf(stderr, "rdmafwd: %s\n", m.c_str()); };
  auto tb = make_testbed(a.prm, a.lcores, say, warn);
  if (g_signal.load())
    return interrupted(a.prm.role == Role::kBoth ? "during device set-up"
                                                 : "while waiting for the peer");
  if (!tb) {
    const Error& e = tb.error();
    // A rendezvous error names the peer; others the device (with a hint when memory ran out).
    if (e.message.rfind("rendezvous: ", 0) == 0)
      std::fprintf(stderr, "rdmafwd: %s\n", e.message.c_str());
    else
      std::fprintf(stderr, "rdmafwd: %s: %s%s\n", a.prm.device.c_str(), e.message.c_str(),
                   e.code == Errc::kNoMemory
                       ? " (smaller --page-size, --max-pages, --io-depth or --windows-per-core "
                         "need less memory)"
                       : "");
    if (e.code == Errc::kNoDevice) return kExitNoDevice;
    if (e.code == Errc::kInvalidArgument) return kExitUsage;
    return kExitRuntime;
  }
  a.tb = std::move(tb).value();

  rt::LauncherConfig lc;
  lc.lcores = a.lcores;
  lc.strict.enabled = a.prm.strict;
  auto launcher = rt::Launcher::create(lc);
  if (!launcher) {
    std::fprintf(stderr, "rdmafwd: %s\n", launcher.error().message.c_str());
    return kExitRuntime;
  }
  a.launcher = std::move(launcher).value();
  a.published.store(true, std::memory_order_release);
  register_telemetry();

  // Banner: what runs where.
  std::fprintf(
      out, "rdmafwd: fwd %s on %s: %zu lane(s), %u pages x %u B per I/O, io-depth %u, burst %u\n",
      a.prm.fwd.c_str(), a.prm.device.c_str(), a.lcores.size(), a.prm.pages_per_io, a.prm.page_size,
      a.prm.io_depth, a.prm.burst);
  for (const std::string& n : a.tb->notes) std::fprintf(out, "rdmafwd: %s\n", n.c_str());
  std::string polls;
  for (size_t i = 0; i < a.lcores.size(); ++i) {
    char pb[64];
    std::snprintf(pb, sizeof pb, "%slcore %u -> lane %zu", i ? ", " : "", a.lcores[i], i);
    polls.append(pb);
  }
  const bool relay_client = a.tb->any_client_runs("relay");
  const char* who =
      a.prm.role == Role::kServer
          ? (relay_client ? "server core p, and relay-out r for a relay client" : "server core p")
      : a.prm.role == Role::kClient ? (a.prm.fwd == "relay" ? "source c + sink s" : "client core c")
                                    : "client c + peer p + relay r + sink s";
  std::string dev_threads;
  if (threaded_emu) {
    if (a.tb->emu_thread) {
      const int cpu = a.tb->emu_thread->options().cpu;
      dev_threads = a.tb->emu_thread->size() == 2 ? "; 1 emu device thread (both ports)"
                                                  : "; 1 emu device thread";
      dev_threads += cpu >= 0 ? " on cpu " + std::to_string(cpu) : ", placed by the kernel";
      if (cpu >= 0)
        for (const auto& s : slots)
          if (s.cpu == static_cast<unsigned>(cpu) && s.is_main)
            dev_threads += " (shared with the main lcore, mostly asleep while forwarding)";
    } else {
      dev_threads = a.prm.role == Role::kBoth
                        ? "; 2 emu device threads (one per port), placed by the kernel"
                        : "; 1 emu device thread, placed by the kernel";
    }
  }
  std::fprintf(out,
               "rdmafwd: cores: main lcore %u = setup, statistics, prompt, telemetry; poll %s "
               "(each lane polls %s)%s\n",
               a.main_lcore, polls.c_str(), who, dev_threads.c_str());
  if (!a.telemetry_path.empty())
    std::fprintf(out,
                 "rdmafwd: telemetry: %s (/rdmafwd/stats, /rdmafwd/config, /rdmafwd/windows, "
                 "/rdmx/stats)\n",
                 a.telemetry_path.c_str());
  std::fflush(out);

  a.refresh_census();
  if (a.prm.interactive || !a.prm.cmdline_file.empty()) {
    if (a.prm.auto_start) {
      if (Status s = a.start(); !s)
        std::fprintf(stderr, "rdmafwd: %s\n", s.error().message.c_str());
    }
    run_prompt(a);
    // The last run's statistics, unless `stop` just printed them.
    if (a.running || !a.stats_shown) {
      if (a.running) (void)a.stop();
      a.print_stats("summary", -1);
    }
    if (a.script_errors) {
      std::fprintf(stderr, "rdmafwd: error: --cmdline-file %s: %s\n", a.prm.cmdline_file.c_str(),
                   a.first_script_error.c_str());
      return kExitUsage;
    }
  } else {
    if (g_signal.load()) return interrupted("before forwarding started");
    // --serve-clients: a server of one client at a time serves the next once a client's run is
    // over (its goodbye, its death, its drop), until N were served or Ctrl-C.
    const bool serve_on = a.prm.role == Role::kServer && a.prm.serve_clients != 1;
    unsigned served = 0;
    int worst = kExitOk;
    // --reconnect-for: a client whose connection fails during the run meets the server again.
    const bool on_network =
        device_kind(a.prm) == DeviceKind::kMlx5 || a.prm.device.find("@roce:") != std::string::npos;
    const double reconnect_for = a.prm.role != Role::kClient ? 0
                                 : a.prm.reconnect_for >= 0  ? a.prm.reconnect_for
                                                             : (on_network ? 10.0 : 0.0);
    bool resume = false;
    uint64_t seg_errors = 0;  // errors() - verify_fail when this part of the run began
    auto excusable = [&] {
      const LaneSnap t = take_snapshot(a.tb->lanes).total();
      return t.errors() - t.verify_fail;
    };
    auto cut_qps = [&] {
      for (const auto& l : a.tb->lanes)
        for (win::PollCore* k : {l->c, l->s})
          if (k && a.tb->dev_a) (void)a.tb->dev_a->modify_qp(k->qp_handle(), mlx5::QpState::kError);
    };
    uint64_t seg_abandoned = 0;  // abandoned I/Os when this part of the run began
    for (;;) {
      if (Status s = a.start(resume); !s) {
        std::fprintf(stderr, "rdmafwd: cannot start: %s\n", s.error().message.c_str());
        return kExitRuntime;
      }
      if (a.prm.duration == 0 && a.prm.io_count == 0 && a.prm.role != Role::kServer)
        std::fprintf(out, "rdmafwd: forwarding; press Ctrl-C to stop\n");
      // Two hosts: the rendezvous connection stays open; a peer that closes it without a goodbye
      // has gone (died, killed): stop at once rather than wait for I/O that cannot complete.
      bool peer_lost = false;
      uint64_t bye_deadline = 0;
      // --max-refusals: one guard per lane's QP (each watches the client behind it).
      std::vector<win::PeerGuard> guards;
      bool refused_out = false;
      if (a.prm.max_refusals)
        for (const auto& l : a.tb->lanes)
          if (l->dev_b && l->p) {
            const win::RefusalPolicy pol{a.prm.max_refusals,
                                         std::chrono::milliseconds(static_cast<int64_t>(
                                             std::max(1.0, a.prm.refusal_window * 1e3)))};
            guards.emplace_back(*l->dev_b, l->p->qp_handle(),
                                a.tb->peer_name(*l) + " (lane " + std::to_string(l->index) + ")",
                                pol);
            if (auto g = guards.back().check(); !g) {
              std::fprintf(stderr, "rdmafwd: --max-refusals: %s\n", g.error().message.c_str());
              (void)a.stop();
              return kExitNoDevice;
            }
          }
      unsigned dropped = 0;  // clients cut off for breaking the protocol (police_peers)
      // Ctrl-C on a server with clients: a goodbye to each (BYE on its session) and the lanes
      // serve on until the clients have finished what they have in flight and said goodbye
      // too (their RDMA goodbye stops the lanes), for at most 5 s.
      bool said_bye = false;
      uint64_t said_bye_deadline = 0;
      while (a.running) {
        if (g_signal.load()) {
          if (a.prm.role != Role::kServer || a.tb->peers.empty()) break;
          if (!said_bye) {
            said_bye = true;
            said_bye_deadline = rte_rdtsc() + 5 * rte_get_tsc_hz();
            for (Testbed::Peer& pr : a.tb->peers)
              if (!pr.retired && !pr.dropped && pr.s.state() == endpoint::SessionState::kRunning)
                (void)pr.s.close("the server is stopping");
          } else if (rte_rdtsc() > said_bye_deadline) {
            break;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        background_tick(a);
        for (win::PeerGuard& g : guards)
          if (auto r = g.check(); r && *r && !refused_out) {
            refused_out = true;  // the guard logged the line naming the peer
            (void)a.stop();
          }
        if (a.running && a.prm.role == Role::kServer) dropped += police_peers(*a.tb, warn);
        const PeerState ps = a.running ? watch_peer(*a.tb) : PeerState::kHere;
        if (ps == PeerState::kGone) {
          // A client that will reconnect: what is in flight completes now, as flushed (its QPs
          // to the error state), rather than at the stop's drain deadline.
          if (reconnect_for > 0) cut_qps();
          (void)a.stop();
          peer_lost = true;
        } else if (ps == PeerState::kBye && a.prm.role == Role::kClient && !said_bye) {
          // The server said goodbye first (it is stopping): no new I/O; the stop completes the
          // ones in flight (the server serves them until this client's goodbye).
          said_bye = true;
          std::fprintf(stderr,
                       "rdmafwd: client: the server %s said goodbye (it is stopping); finishing "
                       "the I/Os in flight\n",
                       a.tb->peers.at(0).name.c_str());
          (void)a.stop();
        } else if (ps == PeerState::kBye && !bye_deadline) {
          bye_deadline = rte_rdtsc() + 5 * rte_get_tsc_hz();  // its last request is on the way
        } else if (bye_deadline && rte_rdtsc() > bye_deadline && a.running) {
          (void)a.stop();
        }
      }
      // The client's connection failed (the server went away, or a lane's QP failed: transport
      // retry exceeded...): meet the server again within --reconnect-for and carry on.
      bool lane_failed = false;
      for (const auto& l : a.tb->lanes) lane_failed = lane_failed || l->st.failed.get() != 0;
      if (reconnect_for > 0 && !g_signal.load() && (peer_lost || lane_failed)) {
        // What is in flight completes now, as flushed (failed): the QPs to the error state.
        cut_qps();
        if (a.running) (void)a.stop();
        const LaneSnap end = take_snapshot(a.tb->lanes).total();
        const std::string was = a.tb->peers.empty() ? "" : a.tb->peers[0].name;
        std::fprintf(stderr,
                     "rdmafwd: client: the connection to the server %s failed (%s) after %" PRIu64
                     " I/O(s); %" PRIu64
                     " in flight abandoned (counted); reconnecting (up to "
                     "%.0f s)\n",
                     was.c_str(),
                     peer_lost ? "connection closed without a goodbye" : "a queue pair error",
                     end.ios, end.abandoned - seg_abandoned, reconnect_for);
        std::fflush(stderr);
        const auto t0 = std::chrono::steady_clock::now();
        Status rs =
            reconnect_client(a.prm, *a.tb, {},
                             std::chrono::milliseconds(static_cast<int64_t>(reconnect_for * 1000)));
        if (rs) {
          a.excused_errors += excusable() - seg_errors;
          seg_errors = excusable();
          seg_abandoned = take_snapshot(a.tb->lanes).total().abandoned;
          std::fprintf(
              stderr, "rdmafwd: client: reconnected to %s after %.1f s; carrying on\n",
              a.tb->peers[0].name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          std::fflush(stderr);
          resume = true;
          continue;
        }
        std::fprintf(stderr, "rdmafwd: client: no reconnect: %s\n", rs.error().message.c_str());
      }
      if (a.running) (void)a.stop();
      if (g_signal.load()) std::fprintf(out, "rdmafwd: signal received, stopped\n");
      if (a.prm.role == Role::kClient) say_bye(*a.tb, a.prm, a.stats().total().ios);
      if (a.prm.role == Role::kServer && a.tb->any_client_runs("write") && !peer_lost &&
          !g_signal.load() && await_bye(*a.tb, std::chrono::milliseconds(5000))) {
        std::string note;
        (void)check_client_writes(*a.tb, a.prm, note);
        std::fprintf(out, "rdmafwd: %s\n", note.c_str());
      }
      int st = a.exit_status(serve_on);
      if (refused_out || dropped) st = kExitRuntime;
      const bool more = serve_on && !g_signal.load() &&
                        (a.prm.serve_clients == 0 || served + 1 < a.prm.serve_clients);
      if (peer_lost && serve_on) {
        // One line for the client: its death ends its run, not this server (nor is it a failure
        // of this server: what its run left in flight is counted in its summary).
        Testbed::Peer& pr = a.tb->peers.at(std::max(a.tb->lost_peer, 0));
        pr.dropped = true;
        std::fprintf(stderr,
                     "rdmafwd: server: client %s dropped: went away during the run (connection "
                     "closed without a goodbye)%s\n",
                     pr.name.c_str(), more ? "; waiting for the next client" : "");
        st = kExitOk;
      } else if (peer_lost) {
        std::fprintf(stderr,
                     "rdmafwd: the %s %s went away during the run (connection closed "
                     "without a goodbye)\n",
                     a.prm.role == Role::kServer ? "client" : "server",
                     a.tb->peers.at(std::max(a.tb->lost_peer, 0)).name.c_str());
        st = kExitRuntime;
      }
      const bool nothing_to_serve =
          a.prm.role == Role::kServer && a.tb->any_client_runs("") && !a.tb->any_client_runs("rpc");
      if (a.stats().total().ios == 0 && st == kExitOk && !nothing_to_serve && !peer_lost) {
        std::fprintf(stderr, "rdmafwd: no I/O completed\n");
        st = kExitRuntime;
        if (!serve_on) {
          a.print_stats("summary", kExitRuntime);
          return kExitRuntime;
        }
      }
      a.print_stats("summary", st);
      worst = std::max(worst, st);
      ++served;
      if (!more) break;
      // The next client: the lanes released (QPs drained, run state cleared), then the wait.
      Status rs = release_lanes(*a.tb);
      if (rs) rs = next_client(a.prm, *a.tb, say, warn);
      if (!rs) {
        if (rs.error().code == Errc::kState || g_signal.load())
          std::fprintf(out, "rdmafwd: stopped while waiting for the next client (%u served)\n",
                       served);
        else
          std::fprintf(stderr, "rdmafwd: %s (%u client(s) served)\n", rs.error().message.c_str(),
                       served);
        if (rs.error().code != Errc::kState && rs.error().code != Errc::kTimeout)
          worst = kExitRuntime;
        break;
      }
    }
    print_clients(a);
    return worst;
  }
  return a.exit_status();
}
