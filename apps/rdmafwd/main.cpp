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
#include <optional>
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

// A QP error: recover both ends (single process) or stop the lane (two-process mode).
void on_lane_error(Lane& l, Testbed& tb) {
  if (l.dead) return;
  if (l.remote_peer || l.remote_client) {
    l.dead = true;
    // A client the server cut off (drop_peer): its lane ends, this process did not fail.
    if (!l.peer_dropped.load(std::memory_order_acquire)) l.st.failed.set(1);
    return;
  }
  (void)recover_lane(l, tb);
  if (l.draining) l.drain_deadline = rte_rdtsc() + 5 * rte_get_tsc_hz();
}

// A QP of the lane in the error state, unless the peer said goodbye: the session's rule
// (rdmx/endpoint/session.hpp qp_error_is_failure), the goodbye read by the lane's poll core.
bool qp_failed(const Lane& l) noexcept {
  return endpoint::qp_error_is_failure(l.st.peer_bye.get() != 0) && lane_in_error(l);
}

// One turn of the forwarding loop: a fault maybe, the engine's burst, the counters every 64.
bool lane_poll(Lane& l, Testbed& tb, const Engine* e) {
  if (l.cfg.fault_every) fault_inject(l, tb, rte_rdtsc());
  const bool busy = e->fwd(l);
  if ((++l.iter & 63) == 0) {
    if (!l.failed && qp_failed(l)) l.failed = true;
    l.st.issued.set(l.issued_base + l.issued);
    if (l.dead || (l.cfg.io_limit && l.completed >= l.cfg.io_limit)) l.st.issuing.set(0);
  }
  if (l.failed) on_lane_error(l, tb);
  return busy;
}

// One turn after the stop: true once the lane is idle (or gave up waiting for its I/O).
bool lane_drain(Lane& l, Testbed& tb, const Engine* e) {
  const uint64_t hz = rte_get_tsc_hz();
  if (!l.draining) {
    l.draining = true;
    l.drain_deadline = rte_rdtsc() + (l.dead ? hz / 2 : 5 * hz);
  }
  if (!l.failed && qp_failed(l)) l.failed = true;
  if (l.failed && !l.dead) {
    on_lane_error(l, tb);
    return false;
  }
  if (e->idle(l)) {
    const bool can_recover = !l.remote_peer && !l.remote_client;
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
}

// The end of a lane's run: what a server leaves unanswered, the counters, a client's goodbye.
void lane_end(Lane& l) {
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
}

int lane_main(rt::CoreContext& ctx) {
  Testbed& tb = *app().tb;
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
  const int rc = rt::run_poll_loop(
      ctx, [&] { return lane_poll(l, tb, e); }, [&] { return lane_drain(l, tb, e); });
  lane_end(l);
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
    l.cfg.verify = verifies(prm);
    l.cfg.corrupt_every = prm.corrupt_every;
    l.cfg.forge_rkey_every = prm.forge_rkey_every;
    l.cfg.forge_handle_every = prm.forge_handle_every;
    l.cfg.forge_twin_every = prm.forge_twin_every;
    l.cfg.forge_credits = prm.forge_credits;
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
  flush_dead_lanes();
  refresh_census();
  return {};
}

// A lane that stopped dead (its drain deadline passed with I/O unanswered, or a QP error it
// could not recover from) can never run again (App::start refuses it): its QPs go to the error
// state now, so that every WQE still in flight (the data WQEs the peer never answered, the
// unmaps posted behind them) completes as flushed at once (ibv_modify_qp(3) IBV_QPS_ERR), instead
// of keeping the teardown waiting for the transport's retry timer or the quiesce budget.
void App::flush_dead_lanes() {
  for (auto& lp : tb->lanes) {
    const Lane& l = *lp;
    if (!l.dead) continue;
    for (win::PollCore* k : {l.c, l.p, l.r, l.s}) {
      mlx5::Device* d = (k == l.c || k == l.s) ? l.dev_a : l.dev_b;
      if (k && d && !k->qp().in_error()) (void)d->modify_qp(k->qp_handle(), mlx5::QpState::kError);
    }
  }
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
  else if (endpoint::device_is_sink(prm.device))
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
                prm.windows_per_core, verifies(prm) ? "on" : "off", prm.stats_period, prm.duration,
                prm.io_count);
  std::string s = buf;
  for (const std::string& n : tb->notes) s += "  " + n + "\n";
  return s;
}

void App::print_stats(const char* type, int exit_status) {
  const Snapshot s = stats();
  const double secs = seconds();
  if (prm.json) {
    std::printf("%s\n", format_json(s, secs, labels(), type, exit_status, excused_errors).c_str());
  } else {
    std::fputs(format_text(s, secs, labels()).c_str(), stdout);
  }
  if (std::strcmp(type, "summary") == 0) print_roce_stats();
  std::fflush(stdout);
}

// The RoCE v2 link of an emu@roce device (this process's side): what the transport did to
// deliver the run (retransmissions, NAKs, duplicates, injected faults). The in-process and
// shared-memory wires have the same link (EmuStats::roce counts for them too), but their
// packet rings are no network: their output stays as it was, without this report.
void App::print_roce_stats() {
  if (!endpoint::device_on_network(prm.device)) return;
  for (const endpoint::EmuControl& d : {tb->emu_a, tb->emu_b}) {
    if (!d) continue;
    const endpoint::LinkStats r = d.link_stats();
    if (r.tx_packets == 0 && r.rx_packets == 0) continue;
    if (prm.json) {
      nlohmann::ordered_json j;
      j["type"] = "roce";
      j["device"] = d.name();
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
                  d.name().c_str(), r.tx_packets, r.rx_packets, r.retransmits, r.timeouts,
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
// The devices' asynchronous events, one line each on stderr naming the lane whose QP it is: a
// responder QP that went to the error state (a peer's forged or stale rkey moves it there on a
// ConnectX, and on emu: the requester only sees the NAK), a fatal device error. Control thread;
// Device::poll_async_events never blocks.
void report_async_events(const App& a) {
  for (mlx5::Device* d : {a.tb->dev_a, a.tb->dev_b}) {
    if (!d) continue;
    mlx5::AsyncEvent ev[16];
    const size_t n = d->poll_async_events(ev);
    for (size_t i = 0; i < n; ++i) {
      std::string who;
      for (size_t li = 0; li < a.tb->lanes.size() && who.empty(); ++li)
        for (const win::PollCore* c :
             {a.tb->lanes[li]->c, a.tb->lanes[li]->p, a.tb->lanes[li]->r, a.tb->lanes[li]->s})
          if (c && c->qp_handle() == ev[i].qpn) who = " (lane " + std::to_string(li) + ")";
      std::fprintf(stderr, "rdmafwd: async event %s on QP 0x%x%s\n",
                   mlx5::async_event_name(ev[i].kind), ev[i].qpn, who.c_str());
    }
  }
}

void background_tick(App& a) {
  report_async_events(a);
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

// What main's phases share: the program name of the messages, where text goes, the EAL's lcores
// and the two message callbacks of the set-up.
struct Run {
  std::string prog = "rdmafwd";
  FILE* out = stdout;
  std::vector<rt::LcoreSlot> slots;
  bool threaded_emu = false;
  Say say;
  Say warn;
};

// A phase either goes on (nullopt) or ends main with this exit status.
using Phase = std::optional<int>;

// The handler goes in before anything else: a signal that lands during EAL start-up must set the
// flag, not kill the process with DPDK's runtime directory half made.
void install_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// The arguments: EAL's before `--`, rdmafwd's after (parse_params), --help, the script's access.
Phase parse_arguments(int argc, char** argv, App& a, Run& r, rt::EalArgs& ea) {
  // `rdmafwd --help` needs no `--` and starts no EAL (the man page is made from this output).
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(usage_text("rdmafwd").c_str(), stdout);
    return kExitOk;
  }
  auto split = rt::split_args(argc, argv);
  if (!split) return fail_usage("rdmafwd", split.error().message);
  ea = std::move(split).value();
  r.prog = ea.prog;
  if (auto sl = r.prog.rfind('/'); sl != std::string::npos) r.prog = r.prog.substr(sl + 1);
  // Without `--`, everything was taken as EAL arguments: an app option there is a usage error.
  const ParseOutcome po = parse_params(ea.app, a.prm);
  if (po.help) {
    std::fputs(usage_text(r.prog).c_str(), stdout);
    return kExitOk;
  }
  if (!po.error.empty()) return fail_usage(r.prog, po.error);
  for (const std::string& s : ea.eal) {
    if (s == "--fwd" || s == "--device" || s == "--duration")
      return fail_usage(r.prog, "'" + s + "' is an rdmafwd option: put it after `--`");
  }
  // A script that cannot be read is a usage error found before any set-up.
  if (!a.prm.cmdline_file.empty() && ::access(a.prm.cmdline_file.c_str(), R_OK) != 0)
    return fail_usage(r.prog, "--cmdline-file " + a.prm.cmdline_file + ": " + std::strerror(errno));
  return std::nullopt;
}

// The EAL, started with rdmafwd's defaults (no PCI, a unique file prefix, no hugepages when none).
Phase start_eal(const rt::EalArgs& ea, App& a, Run& r, std::optional<rt::Eal>& eal_owner) {
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
  eal_owner.emplace(std::move(eal).value());
  if (g_signal.load()) return interrupted("during EAL start-up");
  r.out = a.text_out();
  for (const std::string& n : eal_owner->notices())
    std::fprintf(r.out, "rdmafwd: EAL: %s\n", n.c_str());
  return std::nullopt;
}

// Placement: poll lcores on workers, apart from the device thread when possible.
Phase place_lcores(const rt::Eal& eal, App& a, Run& r) {
  a.main_lcore = eal.main_lcore();
  r.slots = eal.lcores();
  size_t workers = 0;
  for (const auto& s : r.slots) workers += !s.is_main;
  if (workers < a.prm.nb_cores) {
    return fail_usage(r.prog, "--nb-cores " + std::to_string(a.prm.nb_cores) + " needs " +
                                  std::to_string(a.prm.nb_cores) +
                                  " worker lcore(s); the EAL has " + std::to_string(workers) +
                                  " (give more with -l, e.g. -l 0-" +
                                  std::to_string(a.prm.nb_cores) + ")");
  }
  r.threaded_emu = endpoint::device_kind(a.prm.device) == endpoint::DeviceKind::kEmuThreaded;
  auto topo = rt::discover_topology();
  if (topo) {
    const rt::DeviceLocality loc = rt::emu_device_locality(0);
    auto pl = rt::plan(topo.value(), a.prm.nb_cores, r.threaded_emu, 0, r.slots);
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
    for (const auto& s : r.slots)
      if (!s.is_main && a.lcores.size() < a.prm.nb_cores) a.lcores.push_back(s.lcore_id);
  }
  if (a.prm.show_topology) std::fputs(a.topology_text.c_str(), r.out);
  std::fflush(r.out);
  return std::nullopt;
}

// The devices, pools, cores and (two processes) the connection to the peer: the testbed.
Phase connect_testbed(App& a, Run& r) {
  // The waits of the TCP rendezvous are announced when they begin (the address is known then).
  FILE* out = r.out;
  r.say = [out](const std::string& m) {
    std::fprintf(out, "rdmafwd: %s\n", m.c_str());
    std::fflush(out);
  };
  r.warn = [](const std::string& m) { std::fprintf(stderr, "rdmafwd: %s\n", m.c_str()); };
  auto tb = make_testbed(a.prm, a.lcores, r.say, r.warn);
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
  return std::nullopt;
}

// The poll lcores' launcher (one Lane each) and the telemetry callbacks.
Phase launch_lanes(App& a) {
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
  return std::nullopt;
}

// The emu device threads of the banner's cores line ("" without a threaded emu).
std::string device_threads_text(const App& a, const Run& r) {
  if (!r.threaded_emu) return "";
  if (!a.tb->emu_thread)
    return a.prm.role == Role::kBoth ? "; 2 emu device threads (one per port), placed by the kernel"
                                     : "; 1 emu device thread, placed by the kernel";
  const int cpu = a.tb->emu_thread->cpu();
  std::string s = a.tb->emu_thread->size() == 2 ? "; 1 emu device thread (both ports)"
                                                : "; 1 emu device thread";
  s += cpu >= 0 ? " on cpu " + std::to_string(cpu) : ", placed by the kernel";
  if (cpu >= 0)
    for (const auto& sl : r.slots)
      if (sl.cpu == static_cast<unsigned>(cpu) && sl.is_main)
        s += " (shared with the main lcore, mostly asleep while forwarding)";
  return s;
}

// Banner: what runs where.
void print_banner(const App& a, const Run& r) {
  FILE* out = r.out;
  std::fprintf(
      out, "rdmafwd: fwd %s on %s: %zu lane(s), %u pages x %u B per I/O, io-depth %u, burst %u\n",
      a.labels().fwd.c_str(), a.prm.device.c_str(), a.lcores.size(), a.prm.pages_per_io,
      a.prm.page_size, a.prm.io_depth, a.prm.burst);
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
  std::fprintf(out,
               "rdmafwd: cores: main lcore %u = setup, statistics, prompt, telemetry; poll %s "
               "(each lane polls %s)%s\n",
               a.main_lcore, polls.c_str(), who, device_threads_text(a, r).c_str());
  if (!a.telemetry_path.empty())
    std::fprintf(out,
                 "rdmafwd: telemetry: %s (/rdmafwd/stats, /rdmafwd/config, /rdmafwd/windows, "
                 "/rdmx/stats)\n",
                 a.telemetry_path.c_str());
  std::fflush(out);
}

// -i or --cmdline-file: the prompt runs the show; then the last run's summary.
int run_interactive(App& a) {
  if (a.prm.auto_start) {
    if (Status s = a.start(); !s) std::fprintf(stderr, "rdmafwd: %s\n", s.error().message.c_str());
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
  return a.exit_status();
}

// A run without the prompt, across its reconnects (a client) and its clients (a server of
// --serve-clients): what carries over from one part to the next.
struct Batch {
  bool serve_on = false;       // --serve-clients: serve the next client once one's run is over
  double reconnect_for = 0;    // --reconnect-for: a client meets the server again for this long
  unsigned served = 0;         // clients served
  int worst = kExitOk;         // the worst exit status of the clients served
  bool resume = false;         // the next start resumes the run (a reconnect)
  uint64_t seg_errors = 0;     // errors() - verify_fail when this part of the run began
  uint64_t seg_abandoned = 0;  // abandoned I/Os when this part of the run began
};

// One part of a batch run: from a start to its stop.
struct Segment {
  // Two hosts: the rendezvous connection stays open; a peer that closes it without a goodbye has
  // gone (died, killed): stop at once rather than wait for I/O that cannot complete.
  bool peer_lost = false;
  uint64_t bye_deadline = 0;
  // --max-refusals: one guard per lane's QP (each watches the client behind it).
  std::vector<win::PeerGuard> guards;
  bool refused_out = false;
  unsigned dropped = 0;  // clients cut off for breaking the protocol (police_peers)
  // Ctrl-C on a server with clients: a goodbye to each (BYE on its session) and the lanes serve
  // on until the clients have finished what they have in flight and said goodbye too (their RDMA
  // goodbye stops the lanes), for at most 5 s.
  bool said_bye = false;
  uint64_t said_bye_deadline = 0;
};

Batch batch_of(const Params& p) {
  Batch b;
  b.serve_on = p.role == Role::kServer && p.serve_clients != 1;
  b.reconnect_for = p.role != Role::kClient                 ? 0
                    : p.reconnect_for >= 0                  ? p.reconnect_for
                    : endpoint::device_on_network(p.device) ? 10.0
                                                            : 0.0;
  return b;
}

// Errors a reconnect excuses: all but verification failures.
uint64_t excusable(const App& a) {
  const LaneSnap t = take_snapshot(a.tb->lanes).total();
  return t.errors() - t.verify_fail;
}

// What is in flight completes now, as flushed (failed): the client's QPs to the error state.
void cut_qps(App& a) {
  for (const auto& l : a.tb->lanes)
    for (win::PollCore* k : {l->c, l->s})
      if (k && a.tb->dev_a) (void)a.tb->dev_a->modify_qp(k->qp_handle(), mlx5::QpState::kError);
}

// --max-refusals: a guard per lane QP that has a client behind it.
Phase arm_guards(App& a, Segment& g) {
  if (!a.prm.max_refusals) return std::nullopt;
  for (const auto& l : a.tb->lanes)
    if (l->dev_b && l->p) {
      const win::RefusalPolicy pol{
          a.prm.max_refusals, std::chrono::milliseconds(
                                  static_cast<int64_t>(std::max(1.0, a.prm.refusal_window * 1e3)))};
      g.guards.emplace_back(*l->dev_b, l->p->qp_handle(),
                            a.tb->peer_name(*l) + " (lane " + std::to_string(l->index) + ")", pol);
      if (auto c = g.guards.back().check(); !c) {
        std::fprintf(stderr, "rdmafwd: --max-refusals: %s\n", c.error().message.c_str());
        (void)a.stop();
        return kExitNoDevice;
      }
    }
  return std::nullopt;
}

// A signal: a server with clients says goodbye and serves on for at most 5 s; true: stop waiting.
bool on_signal_tick(App& a, Segment& g) {
  if (a.prm.role != Role::kServer || a.tb->peers.empty()) return true;
  if (!g.said_bye) {
    g.said_bye = true;
    g.said_bye_deadline = rte_rdtsc() + 5 * rte_get_tsc_hz();
    for (Testbed::Peer& pr : a.tb->peers)
      if (!pr.retired && !pr.dropped && pr.s.state() == endpoint::SessionState::kRunning)
        (void)pr.s.close("the server is stopping");
    return false;
  }
  return rte_rdtsc() > g.said_bye_deadline;
}

// One look at the guards, the clients and the peer while forwarding.
void watch_tick(App& a, const Batch& b, Segment& g, const Run& r) {
  for (win::PeerGuard& pg : g.guards)
    if (auto c = pg.check(); c && *c && !g.refused_out) {
      g.refused_out = true;  // the guard logged the line naming the peer
      (void)a.stop();
    }
  if (a.running && a.prm.role == Role::kServer) g.dropped += police_peers(*a.tb, r.warn);
  const PeerState ps = a.running ? watch_peer(*a.tb) : PeerState::kHere;
  if (ps == PeerState::kGone) {
    // A client that will reconnect: what is in flight completes now, as flushed (its QPs to the
    // error state), rather than at the stop's drain deadline.
    if (b.reconnect_for > 0) cut_qps(a);
    (void)a.stop();
    g.peer_lost = true;
  } else if (ps == PeerState::kBye && a.prm.role == Role::kClient && !g.said_bye) {
    // The server said goodbye first (it is stopping): no new I/O; the stop completes the ones in
    // flight (the server serves them until this client's goodbye).
    g.said_bye = true;
    std::fprintf(stderr,
                 "rdmafwd: client: the server %s said goodbye (it is stopping); finishing "
                 "the I/Os in flight\n",
                 a.tb->peers.at(0).name.c_str());
    (void)a.stop();
  } else if (ps == PeerState::kBye && !g.bye_deadline) {
    g.bye_deadline = rte_rdtsc() + 5 * rte_get_tsc_hz();  // its last request is on the way
  } else if (g.bye_deadline && rte_rdtsc() > g.bye_deadline && a.running) {
    (void)a.stop();
  }
}

// Forwarding until the run is over (duration, io-count, the peer, a signal).
void watch_run(App& a, const Batch& b, Segment& g, const Run& r) {
  while (a.running) {
    if (g_signal.load() && on_signal_tick(a, g)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    background_tick(a);
    watch_tick(a, b, g, r);
  }
}

// The client's connection failed (the server went away, or a lane's QP failed: transport retry
// exceeded...): meet the server again within --reconnect-for. True: reconnected, carry on.
bool try_reconnect(App& a, Batch& b, const Segment& g) {
  bool lane_failed = false;
  for (const auto& l : a.tb->lanes) lane_failed = lane_failed || l->st.failed.get() != 0;
  if (b.reconnect_for <= 0 || g_signal.load() || !(g.peer_lost || lane_failed)) return false;
  // Why, before the cut below puts every QP in error (the lanes have ended: their QPs are the
  // main lcore's to read): a lane fails by a QP error, or by its I/O still unanswered when the
  // drain after the stop ran out (the server never served it).
  bool qp_error = false;
  for (const auto& l : a.tb->lanes) qp_error = qp_error || lane_in_error(*l);
  const char* why = g.peer_lost ? "connection closed without a goodbye"
                    : qp_error  ? "a queue pair error"
                                : "I/O unanswered past the drain after the stop";
  // What is in flight completes now, as flushed (failed): the QPs to the error state.
  cut_qps(a);
  if (a.running) (void)a.stop();
  const LaneSnap end = take_snapshot(a.tb->lanes).total();
  const std::string was = a.tb->peers.empty() ? "" : a.tb->peers[0].name;
  std::fprintf(stderr,
               "rdmafwd: client: the connection to the server %s failed (%s) after %" PRIu64
               " I/O(s); %" PRIu64
               " in flight abandoned (counted); reconnecting (up to "
               "%.0f s)\n",
               was.c_str(), why, end.ios, end.abandoned - b.seg_abandoned, b.reconnect_for);
  std::fflush(stderr);
  const auto t0 = std::chrono::steady_clock::now();
  Status rs = reconnect_client(
      a.prm, *a.tb, {}, std::chrono::milliseconds(static_cast<int64_t>(b.reconnect_for * 1000)));
  if (!rs) {
    std::fprintf(stderr, "rdmafwd: client: no reconnect: %s\n", rs.error().message.c_str());
    return false;
  }
  a.excused_errors += excusable(a) - b.seg_errors;
  b.seg_errors = excusable(a);
  b.seg_abandoned = take_snapshot(a.tb->lanes).total().abandoned;
  std::fprintf(stderr, "rdmafwd: client: reconnected to %s after %.1f s; carrying on\n",
               a.tb->peers[0].name.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::fflush(stderr);
  b.resume = true;
  return true;
}

// The goodbyes after a part's stop: the client's, and a server's check of what a write client
// wrote.
void end_of_run(App& a, const Segment& g, const Run& r) {
  if (a.running) (void)a.stop();
  if (g_signal.load()) std::fprintf(r.out, "rdmafwd: signal received, stopped\n");
  if (a.prm.role == Role::kClient) say_bye(*a.tb, a.prm, a.stats().total().ios);
  if (a.prm.role == Role::kServer && a.tb->any_client_runs("write") && !g.peer_lost &&
      !g_signal.load() && await_bye(*a.tb, std::chrono::milliseconds(5000))) {
    std::string note;
    (void)check_client_writes(*a.tb, a.prm, note);
    std::fprintf(r.out, "rdmafwd: %s\n", note.c_str());
  }
}

// A peer that went away: one line, and the status it gives this part.
int peer_lost_status(App& a, const Batch& b, bool more) {
  if (b.serve_on) {
    // One line for the client: its death ends its run, not this server (nor is it a failure of
    // this server: what its run left in flight is counted in its summary).
    Testbed::Peer& pr = a.tb->peers.at(std::max(a.tb->lost_peer, 0));
    pr.dropped = true;
    std::fprintf(stderr,
                 "rdmafwd: server: client %s dropped: went away during the run (connection "
                 "closed without a goodbye)%s\n",
                 pr.name.c_str(), more ? "; waiting for the next client" : "");
    return kExitOk;
  }
  std::fprintf(stderr,
               "rdmafwd: the %s %s went away during the run (connection closed "
               "without a goodbye)\n",
               a.prm.role == Role::kServer ? "client" : "server",
               a.tb->peers.at(std::max(a.tb->lost_peer, 0)).name.c_str());
  return kExitRuntime;
}

// The part's status and summary. An exit status: main ends with it (no I/O, no more clients).
Phase summarize_part(App& a, Batch& b, const Segment& g, bool more) {
  int st = a.exit_status(b.serve_on);
  if (g.refused_out || g.dropped) st = kExitRuntime;
  if (g.peer_lost) st = peer_lost_status(a, b, more);
  const bool nothing_to_serve =
      a.prm.role == Role::kServer && a.tb->any_client_runs("") && !a.tb->any_client_runs("rpc");
  if (a.stats().total().ios == 0 && st == kExitOk && !nothing_to_serve && !g.peer_lost) {
    std::fprintf(stderr, "rdmafwd: no I/O completed\n");
    st = kExitRuntime;
    if (!b.serve_on) {
      a.print_stats("summary", kExitRuntime);
      return kExitRuntime;
    }
  }
  a.print_stats("summary", st);
  b.worst = std::max(b.worst, st);
  ++b.served;
  return std::nullopt;
}

// The next client: the lanes released (QPs drained, run state cleared), then the wait. False: no
// next client (stopped, timed out, failed).
bool serve_next(App& a, Batch& b, const Run& r) {
  Status rs = release_lanes(*a.tb);
  if (rs) rs = next_client(a.prm, *a.tb, r.say, r.warn);
  if (rs) return true;
  if (rs.error().code == Errc::kState || g_signal.load())
    std::fprintf(r.out, "rdmafwd: stopped while waiting for the next client (%u served)\n",
                 b.served);
  else
    std::fprintf(stderr, "rdmafwd: %s (%u client(s) served)\n", rs.error().message.c_str(),
                 b.served);
  if (rs.error().code != Errc::kState && rs.error().code != Errc::kTimeout) b.worst = kExitRuntime;
  return false;
}

// Without the prompt: start, watch, stop, summarize; again after a reconnect (a client) or for
// the next client (a server of --serve-clients).
int run_batch(App& a, const Run& r) {
  if (g_signal.load()) return interrupted("before forwarding started");
  Batch b = batch_of(a.prm);
  for (;;) {
    if (Status s = a.start(b.resume); !s) {
      std::fprintf(stderr, "rdmafwd: cannot start: %s\n", s.error().message.c_str());
      return kExitRuntime;
    }
    if (a.prm.duration == 0 && a.prm.io_count == 0 && a.prm.role != Role::kServer)
      std::fprintf(r.out, "rdmafwd: forwarding; press Ctrl-C to stop\n");
    Segment g;
    if (Phase p = arm_guards(a, g)) return *p;
    watch_run(a, b, g, r);
    if (try_reconnect(a, b, g)) continue;
    end_of_run(a, g, r);
    const bool more = b.serve_on && !g_signal.load() &&
                      (a.prm.serve_clients == 0 || b.served + 1 < a.prm.serve_clients);
    if (Phase p = summarize_part(a, b, g, more)) return *p;
    if (!more || !serve_next(a, b, r)) break;
  }
  print_clients(a);
  return b.worst;
}

}  // namespace

int main(int argc, char** argv) {
  install_signals();
  App& a = app();
  Run r;
  rt::EalArgs ea;
  if (Phase p = parse_arguments(argc, argv, a, r, ea)) return *p;
  std::optional<rt::Eal> eal;  // declared before the testbed: torn down after it
  if (Phase p = start_eal(ea, a, r, eal)) return *p;
  if (Phase p = place_lcores(*eal, a, r)) return *p;
  if (Phase p = connect_testbed(a, r)) return *p;
  if (Phase p = launch_lanes(a)) return *p;
  print_banner(a, r);
  a.refresh_census();
  if (a.prm.interactive || !a.prm.cmdline_file.empty()) return run_interactive(a);
  return run_batch(a, r);
}
