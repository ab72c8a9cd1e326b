// rdmafwd command line: the application arguments after `--` (EAL arguments come first).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <rdmx/core/cli.hpp>
#include <rdmx/emu/profile.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/rendezvous.hpp>

#include "rdmafwd.hpp"

namespace rdmafwd {

const char* role_name(Role r) noexcept {
  switch (r) {
    case Role::kBoth:
      return "both";
    case Role::kServer:
      return "server";
    case Role::kClient:
      return "client";
  }
  return "?";
}

std::string usage_text(const std::string& prog) {
  std::string u;
  u += "Usage: " + prog + " [EAL options] -- [rdmafwd options]\n\n";
  u += "For example: " + prog +
       " -l 0-1 --no-huge -m 256 -- --device emu --fwd rpc --duration 5\n\n";
  u += "rdmafwd options:\n";
  u += "  --device NAME          emu (emulated mlx5, default), emu-sink (no data effect),\n"
       "                         emu@roce:ADDR (emulated mlx5 speaking RoCE v2 over UDP from\n"
       "                         this host's IPv4 address ADDR: two hosts without RDMA NICs)\n"
       "                         or an mlx5 device name (mlx5_0); emu:PROFILE plays a device\n"
       "                         profile (the HCA caps emu reports and enforces):\n";
  for (const rdmx::emu::Profile& pr : rdmx::emu::profiles()) {
    std::string n = std::string("                           ") + pr.name;
    n.resize(std::max<size_t>(n.size() + 2, 44), ' ');  // two spaces at least: help2man's column
    u += n + pr.about + "\n";
  }
  u += "  --fwd MODE             forwarding engine: " + engine_names("|") +
       " (default rpc);\n"
       "                         also --forward-mode=MODE (testpmd's spelling)\n";
  u += "  --nb-cores N           poll lcores (default 1; needs N worker lcores in -l)\n";
  u += "  --pages-per-io N       chunk pages per I/O (default 16)\n";
  u += "  --max-pages N          translation entries per window (default max(pages-per-io, 16);\n"
       "                         with --metadata, pages-per-io plus the metadata's pages)\n";
  u += "  --metadata BYTES       rpc: every page-sized block carries BYTES (4..128) of metadata\n"
       "                         kept in an array of its own; both sides map data + metadata\n"
       "                         into one interleaved window, one WRITE/READ moves both, both\n"
       "                         sides verify both (page size 4096 only)\n";
  u += "  --rpc-remote-invalidate on|off\n"
       "                         rpc client: offer remote invalidation to the server (RFC 8797\n"
       "                         private data in the hello; default on). off: the server replies\n"
       "                         with plain SENDs and the client invalidates each call's windows\n"
       "                         itself before the reply is handed on\n";
  u += "  --keys POLICY          window keys: random (default) or increment (debugging only)\n";
  u += "  --page-size BYTES      chunk page size: 4096, 65536 or 2097152 (default 4096)\n";
  u += "  --windows-per-core N   windows per poll core (default 2*io-depth+16)\n";
  u += "  --burst N              most I/Os issued per loop iteration, one doorbell (default 16)\n";
  u += "  --io-depth N           I/Os in flight per lane (default 32)\n";
  u += "  --stats-period SEC     print statistics every SEC seconds (default: a one-line status\n"
       "                         every 10 s, so only runs longer than that print any)\n";
  u += "  --quiet                no status line on long runs (--stats-period still prints)\n";
  u += "  --duration SEC         forward for SEC seconds, then stop (0, the default: until\n"
       "                         Ctrl-C, --io-count or `stop`)\n";
  u += "  --io-count N           stop after N I/Os (all lanes together)\n";
  u += "  --json                 machine-readable statistics (JSON lines on stdout)\n";
  u += "  -i, --interactive      interactive prompt (DPDK cmdline)\n";
  u += "  -a, --auto-start       interactive: start forwarding at once\n";
  u += "  --cmdline-file FILE    run prompt commands from FILE (then the prompt with -i)\n";
  u += "  --role server|client   two-process mode (with --listen/--peer; one host: loopback)\n";
  u += "  --listen [ADDR:]PORT   server: wait for clients on this TCP address (rendezvous; the\n"
       "                         default address is 0.0.0.0, the usual port 7471)\n";
  u += "  --peer HOST[:PORT]     client: meet the server at this TCP address (port 7471 if none)\n";
  u += "  --rendezvous-timeout SEC\n"
       "                         longest wait for a client (server, default 120 s) or for the\n"
       "                         server (client, default 30 s)\n";
  u += "  --max-refusals N/SEC   server: disconnect the client when more than N of its remote\n"
       "                         accesses are refused within SEC seconds (default off)\n";
  u += "  --clients N            server: serve N clients at once, --nb-cores / N lanes each\n"
       "                         (needs a device on a network: emu@roce:ADDR or mlx5)\n";
  u += "  --serve-clients N      server (one client at a time): serve N clients one after the\n"
       "                         other, then exit; 0: until Ctrl-C (default 1: the first\n"
       "                         client's end ends the server). A client that dies or is\n"
       "                         dropped counts as served; the server waits for the next\n"
       "                         (needs a device on a network: emu@roce:ADDR or mlx5)\n";
  u += "  --reconnect-for SEC    client: when the connection fails during the run (the server\n"
       "                         went away, a QP error), meet the server again within SEC\n"
       "                         seconds and carry on (default 10 on a network device:\n"
       "                         emu@roce:ADDR or mlx5; 0: off, the failure ends the client)\n";
  u += "  --isolate peer|none    server: each lane's QP and windows in a protection domain of\n"
       "                         its own: no client's rkey works on another's QP (default none)\n";
  u += "  --cm                   mlx5: connect the QPs through rdma_cm (route-resolved device,\n"
       "                         port and GID) on the --listen/--peer port\n";
  u += "  --wire NAME            server: emu's shared-memory wire (/dev/shm/rdmx-emu-NAME;\n"
       "                         default one it picks), named to the client in the welcome\n";
  u += "  --no-verify            do not check payload contents\n";
  u += "  --show-topology        print the machine topology and the core placement\n";
  u += "  --emu-threads MODE     shared (default): one emu device thread for both ports, pinned\n"
       "                         to the placement's device CPU; per-port: a thread per port,\n"
       "                         placed by the kernel\n";
  u += "  --emu-idle-spin N      shared emu thread: empty polls before it sleeps (default 4096)\n";
  u += "  --strict-no-syscalls   poll lcores run under a seccomp filter: any system call in the\n"
       "                         forwarding loop ends the process\n";
  u += "  --fault-every N        tests: inject an emu fault every N I/Os on average (random in\n"
       "                         [N/2, 3N/2], per lane); rdmafwd recovers and counts it\n";
  u += "  --fault-kinds LIST     error-cqe,qp-error,unreachable,delay (default all)\n";
  u += "  --fault-seed N         seed of the fault schedule (default 1)\n";
  u += "  -h, --help             this text\n";
  u += "\nEvery option takes its value as --opt VALUE or --opt=VALUE.\n";
  u += "\nExit status:\n"
       "  0      ok\n"
       "  1      runtime failure (errors, verification, no peer, the peer went away)\n"
       "  2      bad arguments: one line \"rdmafwd: error: ...\" and a pointer to --help on\n"
       "         stderr; also a peer that runs with other sizes, and a line of the command\n"
       "         file that does not parse\n"
       "  3      device not found\n"
       "  130    interrupted before forwarding started\n";
  return u;
}

std::string usage_error_text(const std::string& prog, const std::string& msg) {
  return "rdmafwd: error: " + msg + "\ntry '" + prog + " --help' for the options\n";
}

namespace {

bool to_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  out = v;
  return true;
}

bool to_seconds(const std::string& s, double& out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v) || v < 0) return false;
  out = v;
  return true;
}

}  // namespace

namespace {

// Long options without a short form; their ids start above any character.
enum : int {
  kDevice = 256,
  kFwd,
  kNbCores,
  kPagesPerIo,
  kMaxPages,
  kKeys,
  kPageSize,
  kWindowsPerCore,
  kBurst,
  kIoDepth,
  kStatsPeriod,
  kDuration,
  kIoCount,
  kJson,
  kQuiet,
  kStatusPeriod,
  kCmdlineFile,
  kRole,
  kListen,
  kPeer,
  kRendezvousTimeout,
  kMaxRefusals,
  kClients,
  kServeClients,
  kReconnectFor,
  kIsolate,
  kCm,
  kWire,
  kNoVerify,
  kShowTopology,
  kStrict,
  kEmuThreads,
  kEmuIdleSpin,
  kFaultEvery,
  kFaultKinds,
  kFaultSeed,
  kCorruptEvery,
  kForgeRkeyEvery,
  kMetadata,
  kRpcRemoteInvalidate,
  kForgeHandleEvery,
};

// The option table getopt_long reads; one line per option of usage_text() (the hidden ones,
// --status-period, --corrupt-every, --forge-rkey-every and --forge-handle-every, serve the
// tests).
constexpr option kOptions[] = {
    {"help", no_argument, nullptr, 'h'},
    {"device", required_argument, nullptr, kDevice},
    {"fwd", required_argument, nullptr, kFwd},
    {"forward-mode", required_argument, nullptr, kFwd},  // testpmd's name
    {"nb-cores", required_argument, nullptr, kNbCores},
    {"pages-per-io", required_argument, nullptr, kPagesPerIo},
    {"max-pages", required_argument, nullptr, kMaxPages},
    {"keys", required_argument, nullptr, kKeys},
    {"page-size", required_argument, nullptr, kPageSize},
    {"windows-per-core", required_argument, nullptr, kWindowsPerCore},
    {"burst", required_argument, nullptr, kBurst},
    {"io-depth", required_argument, nullptr, kIoDepth},
    {"stats-period", required_argument, nullptr, kStatsPeriod},
    {"duration", required_argument, nullptr, kDuration},
    {"io-count", required_argument, nullptr, kIoCount},
    {"json", no_argument, nullptr, kJson},
    {"quiet", no_argument, nullptr, kQuiet},
    {"status-period", required_argument, nullptr, kStatusPeriod},
    {"interactive", no_argument, nullptr, 'i'},
    {"auto-start", no_argument, nullptr, 'a'},
    {"cmdline-file", required_argument, nullptr, kCmdlineFile},
    {"role", required_argument, nullptr, kRole},
    {"listen", required_argument, nullptr, kListen},
    {"peer", required_argument, nullptr, kPeer},
    {"rendezvous-timeout", required_argument, nullptr, kRendezvousTimeout},
    {"max-refusals", required_argument, nullptr, kMaxRefusals},
    {"clients", required_argument, nullptr, kClients},
    {"serve-clients", required_argument, nullptr, kServeClients},
    {"reconnect-for", required_argument, nullptr, kReconnectFor},
    {"isolate", required_argument, nullptr, kIsolate},
    {"cm", no_argument, nullptr, kCm},
    {"wire", required_argument, nullptr, kWire},
    {"no-verify", no_argument, nullptr, kNoVerify},
    {"show-topology", no_argument, nullptr, kShowTopology},
    {"strict-no-syscalls", no_argument, nullptr, kStrict},
    {"emu-threads", required_argument, nullptr, kEmuThreads},
    {"emu-idle-spin", required_argument, nullptr, kEmuIdleSpin},
    {"fault-every", required_argument, nullptr, kFaultEvery},
    {"fault-kinds", required_argument, nullptr, kFaultKinds},
    {"fault-seed", required_argument, nullptr, kFaultSeed},
    {"corrupt-every", required_argument, nullptr, kCorruptEvery},
    {"forge-rkey-every", required_argument, nullptr, kForgeRkeyEvery},
    {"metadata", required_argument, nullptr, kMetadata},
    {"rpc-remote-invalidate", required_argument, nullptr, kRpcRemoteInvalidate},
    {"forge-handle-every", required_argument, nullptr, kForgeHandleEvery},
    {nullptr, 0, nullptr, 0},
};

// Applies one option (`name` as the user spelled its long form, for messages; `v` its value or
// empty); returns what was wrong, or "".
std::string apply_option(int id, const std::string& name, const std::string& v, Params& p) {
  uint64_t n = 0;
  auto num = [&](uint64_t lo, uint64_t hi, auto& dst) -> std::string {
    if (!to_u64(v, n) || n < lo || n > hi) {
      return "option " + name + ": '" + v + "' is not a number in " + std::to_string(lo) + ".." +
             std::to_string(hi);
    }
    dst = static_cast<std::remove_reference_t<decltype(dst)>>(n);
    return "";
  };
  auto seconds = [&](double& dst) -> std::string {
    return to_seconds(v, dst) ? "" : "option " + name + ": '" + v + "' is not a number of seconds";
  };
  auto nonempty = [&](std::string& dst, const char* what) -> std::string {
    dst = v;
    return v.empty() ? "option " + name + " needs " + what : "";
  };
  switch (id) {
    case kDevice:
      return nonempty(p.device, "a value");
    case kFwd:
      if (!find_engine(v))
        return "option " + name + ": unknown mode '" + v + "' (one of " + engine_names(", ") + ")";
      p.fwd = v;
      return "";
    case kNbCores:
      return num(1, 64, p.nb_cores);
    case kPagesPerIo:
      return num(1, 1024, p.pages_per_io);
    case kMaxPages:
      return num(1, 1024, p.max_pages);
    case kKeys:
      return win::parse_key_policy(v.c_str(), &p.keys)
                 ? ""
                 : "option --keys: unknown policy '" + v + "' (random or increment)";
    case kPageSize:
      if (!to_u64(v, n) || (n != 4096 && n != 65536 && n != (2u << 20)))
        return "option --page-size: '" + v + "' is not a chunk page size (4096, 65536 or 2097152)";
      p.page_size = static_cast<uint32_t>(n);
      return "";
    case kWindowsPerCore:
      return num(1, 1u << 20, p.windows_per_core);
    case kBurst:
      return num(1, 512, p.burst);
    case kIoDepth:
      return num(1, 1024, p.io_depth);
    case kStatsPeriod:
      return seconds(p.stats_period);
    case kDuration:
      return seconds(p.duration);
    case kIoCount:
      return num(1, UINT64_MAX, p.io_count);
    case kJson:
      p.json = true;
      return "";
    case kQuiet:
      p.quiet = true;
      return "";
    case kStatusPeriod:
      if (!to_seconds(v, p.status_period) || p.status_period <= 0)
        return "option --status-period needs a number of seconds above 0";
      return "";
    case 'i':
      p.interactive = true;
      return "";
    case 'a':
      p.auto_start = true;
      return "";
    case kCmdlineFile:
      return nonempty(p.cmdline_file, "a file name");
    case kRole:
      if (v == "server")
        p.role = Role::kServer;
      else if (v == "client")
        p.role = Role::kClient;
      else
        return "option --role: '" + v + "' is neither server nor client";
      return "";
    case kListen:
      if (p.listen = v; v.empty()) return "option --listen needs [ADDR:]PORT";
      if (auto hp = endpoint::parse_listen_address(v); !hp)
        return "option --listen: " + hp.error().message;
      return "";
    case kPeer:
      if (p.peer = v; v.empty()) return "option --peer needs HOST[:PORT]";
      if (auto hp = endpoint::parse_peer_address(v); !hp)
        return "option --peer: " + hp.error().message;
      return "";
    case kRendezvousTimeout:
      if (!to_seconds(v, p.rendezvous_timeout) || p.rendezvous_timeout <= 0 ||
          p.rendezvous_timeout > 86400)
        return "option --rendezvous-timeout: '" + v + "' is not a number of seconds in (0, 86400]";
      return "";
    case kClients:
      return num(1, 64, p.clients);
    case kServeClients:
      return num(0, 1000000, p.serve_clients);
    case kReconnectFor:
      if (!to_seconds(v, p.reconnect_for) || p.reconnect_for < 0 || p.reconnect_for > 86400)
        return "option --reconnect-for: '" + v + "' is not a number of seconds in [0, 86400]";
      return "";
    case kCm:
      p.cm = true;
      return "";
    case kIsolate:
      if (v == "peer" || v == "none") {
        p.isolate = v == "peer";
        return "";
      }
      return "option --isolate: '" + v + "' is neither peer nor none";
    case kMaxRefusals: {
      const size_t slash = v.find('/');
      char* end = nullptr;
      const unsigned long cnt = std::strtoul(v.c_str(), &end, 10);
      if (slash == std::string::npos || end != v.c_str() + slash || slash == 0 || cnt == 0 ||
          cnt > UINT32_MAX || !to_seconds(v.substr(slash + 1), p.refusal_window) ||
          p.refusal_window <= 0 || p.refusal_window > 86400)
        return "option --max-refusals: '" + v +
               "' is not N/SECONDS (N >= 1, SECONDS in (0, 86400])";
      p.max_refusals = static_cast<uint32_t>(cnt);
      return "";
    }
    case kWire:
      return nonempty(p.wire, "a name");
    case kNoVerify:
      p.verify = false;
      return "";
    case kShowTopology:
      p.show_topology = true;
      return "";
    case kStrict:
      p.strict = true;
      return "";
    case kEmuThreads:
      if (v == "shared")
        p.emu_thread_per_port = false;
      else if (v == "per-port")
        p.emu_thread_per_port = true;
      else
        return "option --emu-threads: '" + v + "' is neither shared nor per-port";
      return "";
    case kEmuIdleSpin:
      return num(0, UINT32_MAX, p.emu_idle_spin);
    case kFaultEvery:
      return num(1, UINT64_MAX / 4, p.fault_every);
    case kFaultKinds:
      if ((p.fault_kinds = parse_fault_kinds(v)) == 0)
        return "option --fault-kinds: '" + v +
               "' is not a list of error-cqe, qp-error, unreachable, delay (or all)";
      return "";
    case kFaultSeed:
      return num(0, UINT64_MAX, p.fault_seed);
    case kCorruptEvery:
      return num(1, UINT64_MAX, p.corrupt_every);
    case kForgeRkeyEvery:
      return num(1, UINT64_MAX, p.forge_rkey_every);
    case kRpcRemoteInvalidate:
      if (v != "on" && v != "off") return "option " + name + ": '" + v + "' is neither on nor off";
      p.rpc_remote_invalidate = v == "on";
      return "";
    case kForgeHandleEvery:
      return num(1, UINT64_MAX, p.forge_handle_every);
    case kMetadata:
      if (std::string e = num(0, 128, p.metadata); !e.empty()) return e;
      return p.metadata && p.metadata < 4 ? "option --metadata: '" + v + "': 0 or 4..128" : "";
  }
  return "unknown option";
}

}  // namespace

// getopt_long over the application arguments (the convention of every rdmx tool,
// rdmx/core/cli.hpp): `--opt value` and `--opt=value`, unique prefixes of long options, and
// "--" ends the options; any argument that is not an option is refused.
ParseOutcome parse_params(const std::vector<std::string>& args, Params& p) {
  ParseOutcome o;
  auto fail = [&](std::string msg) {
    // One line whatever the arguments held (found by fuzz_rdmafwd_args: a value with a newline
    // was echoed as is): control characters are shown as '?'.
    for (char& ch : msg)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
    o.error = std::move(msg);
    return o;
  };
  std::vector<std::string> store;
  store.reserve(args.size() + 1);
  store.emplace_back("rdmafwd");
  store.insert(store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : store) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int argc = static_cast<int>(store.size());
  opterr = 0;
  optind = 0;  // glibc: a full re-initialisation (main may have run getopt before)
  struct Reset {
    ~Reset() { rdmx::cli::getopt_reset(); }  // argv dies with this function
  } reset;
  for (;;) {
    int li = -1;
    const int c = getopt_long(argc, argv.data(), ":hia", kOptions, &li);
    if (c == -1) break;
    if (c == '?' || c == ':') return fail(rdmx::cli::getopt_problem(c, argv.data()));
    if (c == 'h') {
      o.help = true;
      return o;
    }
    // The name as the user typed its long form (getopt_long accepts unique prefixes).
    const std::string name =
        li >= 0 ? std::string("--") + kOptions[li].name : std::string("-") + static_cast<char>(c);
    const std::string v = optarg ? optarg : "";
    if (std::string e = apply_option(c, name, v, p); !e.empty()) return fail(std::move(e));
  }
  if (optind < argc) return fail("unexpected argument '" + store[optind] + "'");
  if (p.max_pages == 0)
    p.max_pages = std::max<uint32_t>(
        p.pages_per_io + metadata_pages(p.pages_per_io, p.metadata, p.page_size), 16);
  if (p.windows_per_core == 0) p.windows_per_core = 2 * p.io_depth + 16;
  if (std::string e = check_params(p); !e.empty()) return fail(std::move(e));
  return o;
}

std::string check_params(const Params& p) {
  const DeviceKind dk = device_kind(p);
  const Engine* e = find_engine(p.fwd);
  if (!e) return "unknown forwarding mode '" + p.fwd + "'";
  if (p.pages_per_io > p.max_pages) {
    return "--pages-per-io " + std::to_string(p.pages_per_io) + " is larger than the windows (" +
           std::to_string(p.max_pages) + " pages; see --max-pages)";
  }
  if (p.metadata) {
    if (p.fwd != "rpc") return "--metadata is for --fwd rpc";
    if (p.page_size != 4096)
      return "--metadata needs --page-size 4096 (a repeat block's stride is a 16-bit field)";
    const uint64_t wire = uint64_t{p.pages_per_io} * (p.page_size + p.metadata);
    if (wire > uint64_t{p.max_pages} * p.page_size)
      return "--metadata " + std::to_string(p.metadata) + ": " + std::to_string(wire) +
             " bytes of data + metadata per I/O do not fit windows of " +
             std::to_string(p.max_pages) + " pages (see --max-pages)";
  }
  if (p.fwd == "relay" && p.pages_per_io > 16) {
    return "--fwd relay receives each message into at most 16 chunk pages (--pages-per-io <= 16)";
  }
  if (p.windows_per_core < 2 * p.io_depth) {
    return "--windows-per-core " + std::to_string(p.windows_per_core) +
           " is too small for --io-depth " + std::to_string(p.io_depth) +
           " (at least 2 x io-depth: the peer keeps io-depth windows mapped in write/read)";
  }
  const bool tcp = !p.listen.empty() || !p.peer.empty();
  if (!p.listen.empty() && p.role != Role::kServer)
    return "--listen is for the server (--role server)";
  if (!p.peer.empty() && p.role != Role::kClient) return "--peer is for the client (--role client)";
  if (p.rendezvous_timeout > 0 && !tcp) return "--rendezvous-timeout is for --listen/--peer";
  if (p.max_refusals && p.role != Role::kServer)
    return "--max-refusals is for the server (--role server)";
  if (p.isolate && p.role != Role::kServer) return "--isolate is for the server (--role server)";
  if (p.cm && !tcp) return "--cm is for two processes meeting over --listen/--peer";
  if (p.cm && dk != DeviceKind::kMlx5)
    return "--cm connects the QPs through rdma_cm: an mlx5 device only (--device mlx5_N); emu "
           "devices meet over the TCP rendezvous alone";
  if (p.reconnect_for > 0 && p.peer.empty())
    return "--reconnect-for is for a client that meets its server over TCP (--role client "
           "--peer HOST[:PORT])";
  // A server that restarts makes a new shared-memory wire: only a client on a network finds it.
  const bool on_network = dk == DeviceKind::kMlx5 || p.device.find("@roce:") != std::string::npos;
  if (p.reconnect_for > 0 && !on_network)
    return "--reconnect-for needs a device on a network (emu@roce:ADDR or mlx5): a restarted "
           "server makes a new emu shared-memory wire";
  if (p.serve_clients != 1 && p.listen.empty())
    return "--serve-clients is for a server that listens (--role server --listen [ADDR:]PORT)";
  if (p.serve_clients != 1 && p.clients > 1)
    return "--serve-clients is for a server of one client at a time (not with --clients)";
  // emu's shared-memory wire is one link to one client process: a client killed holds its side
  // of the wire to the end. Over a network the next client reaches the same QPs.
  if (p.serve_clients != 1 && dk != DeviceKind::kMlx5 &&
      p.device.find("@roce:") == std::string::npos)
    return "--serve-clients " + std::to_string(p.serve_clients) +
           " needs a device on a network (emu@roce:ADDR or mlx5): emu's shared-memory wire "
           "joins one client process";
  if (p.clients > 1 && p.listen.empty())
    return "--clients is for a server that listens (--role server --listen [ADDR:]PORT)";
  if (p.clients > 1 && dk != DeviceKind::kMlx5 && p.device.find("@roce:") == std::string::npos)
    return "--clients " + std::to_string(p.clients) +
           " needs a device on a network (emu@roce:ADDR or mlx5): emu's shared-memory wire "
           "joins two processes";
  if (p.role != Role::kBoth) {
    // Two processes meet over the TCP rendezvous only (one host: loopback), as a session.
    if (!tcp)
      return p.role == Role::kServer
                 ? "--role server needs --listen [ADDR:]PORT (one host: --listen 127.0.0.1:PORT)"
                 : "--role client needs --peer HOST[:PORT] (one host: --peer 127.0.0.1:PORT)";
    // The server answers rpc; a client may also run umr (its maps and unmaps need a connected
    // QP, and the server then only answers its goodbye), write or read (through windows the
    // server maps at the rendezvous).
    const bool client_only =
        p.fwd == "umr" || p.fwd == "write" || p.fwd == "read" || p.fwd == "relay";
    if (!e->two_process && !(p.role == Role::kClient && client_only))
      return "two-process mode runs --fwd rpc (a client may also run umr, write, read or relay)";
  } else if (!p.wire.empty()) {
    return "--wire is for two-process mode (give --role server or --role client)";
  }
  if (dk == DeviceKind::kEmuInline)
    return "--device emu-inline runs the device on the doorbell, in one thread; rdmafwd's lanes "
           "run on their own lcores: use --device emu (threaded)";
  if (dk == DeviceKind::kEmuSink && e->needs_data) {
    return "--device emu-sink moves no data: --fwd " + p.fwd + " needs --device emu";
  }
  if (p.fault_every && (p.role != Role::kBoth || dk == DeviceKind::kMlx5))
    return "--fault-every injects emulated-device faults: single-process --device emu only";
  if (p.fault_every && p.strict)
    return "--fault-every recovers QPs through the control path (system calls): not with "
           "--strict-no-syscalls";
  if (p.auto_start && !p.interactive) return "--auto-start is for interactive mode (-i)";
  return "";
}

DeviceKind device_kind(const Params& p) {
  auto s = endpoint::parse_device_spec(p.device, nullptr);
  if (!s) return DeviceKind::kNone;
  if (s.value().backend == endpoint::Backend::kMlx5) return DeviceKind::kMlx5;
  switch (s.value().mode) {
    case emu::Mode::kInline:
      return DeviceKind::kEmuInline;
    case emu::Mode::kSink:
      return DeviceKind::kEmuSink;
    case emu::Mode::kThreaded:
      break;
  }
  return DeviceKind::kEmuThreaded;
}

}  // namespace rdmafwd
