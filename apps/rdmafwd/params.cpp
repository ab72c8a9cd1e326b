// rdmafwd command line: the application arguments after `--` (EAL arguments come first).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <rdmx/core/cli.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/rendezvous.hpp>

#include "options.hpp"
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

namespace {

// Decimal only: `--burst 010` is refused rather than read as octal 8 (as base 0 would), and
// `0x10` too (doc/guides/rdmafwd.md, "Options").
bool to_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  for (char ch : s)
    if (ch < '0' || ch > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
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

using K = ArgKind;

std::string parse_fwd(const OptionDef&, const std::string& name, const std::string& v, Params& p) {
  if (!find_engine(v))
    return "option " + name + ": unknown mode '" + v + "' (one of " + engine_names(", ") + ")";
  p.fwd = v;
  return "";
}

std::string parse_keys(const OptionDef&, const std::string&, const std::string& v, Params& p) {
  return win::parse_key_policy(v.c_str(), &p.keys)
             ? ""
             : "option --keys: unknown policy '" + v + "' (random or increment)";
}

std::string parse_page_size(const OptionDef&, const std::string&, const std::string& v, Params& p) {
  uint64_t n = 0;
  if (!to_u64(v, n) || (n != 4096 && n != 65536 && n != (2u << 20)))
    return "option --page-size: '" + v + "' is not a chunk page size (4096, 65536 or 2097152)";
  p.page_size = static_cast<uint32_t>(n);
  return "";
}

std::string parse_status_period(const OptionDef&, const std::string&, const std::string& v,
                                Params& p) {
  if (!to_seconds(v, p.status_period) || p.status_period <= 0)
    return "option --status-period needs a number of seconds above 0";
  return "";
}

std::string parse_role(const OptionDef&, const std::string&, const std::string& v, Params& p) {
  if (v == "server")
    p.role = Role::kServer;
  else if (v == "client")
    p.role = Role::kClient;
  else
    return "option --role: '" + v + "' is neither server nor client";
  return "";
}

std::string parse_listen(const OptionDef&, const std::string&, const std::string& v, Params& p) {
  if (p.listen = v; v.empty()) return "option --listen needs [ADDR:]PORT";
  if (auto hp = endpoint::parse_listen_address(v); !hp)
    return "option --listen: " + hp.error().message;
  return "";
}

std::string parse_peer(const OptionDef&, const std::string&, const std::string& v, Params& p) {
  if (p.peer = v; v.empty()) return "option --peer needs HOST[:PORT]";
  if (auto hp = endpoint::parse_peer_address(v); !hp) return "option --peer: " + hp.error().message;
  return "";
}

std::string parse_rendezvous_timeout(const OptionDef&, const std::string&, const std::string& v,
                                     Params& p) {
  if (!to_seconds(v, p.rendezvous_timeout) || p.rendezvous_timeout <= 0 ||
      p.rendezvous_timeout > 86400)
    return "option --rendezvous-timeout: '" + v + "' is not a number of seconds in (0, 86400]";
  return "";
}

std::string parse_reconnect_for(const OptionDef&, const std::string&, const std::string& v,
                                Params& p) {
  if (!to_seconds(v, p.reconnect_for) || p.reconnect_for < 0 || p.reconnect_for > 86400)
    return "option --reconnect-for: '" + v + "' is not a number of seconds in [0, 86400]";
  return "";
}

std::string parse_rpc_remote_invalidate(const OptionDef&, const std::string&, const std::string& v,
                                        Params& p) {
  if (v != "on" && v != "off")
    return "option --rpc-remote-invalidate: '" + v + "' is neither on nor off";
  p.rpc_remote_invalidate = v == "on";
  return "";
}

std::string parse_isolate(const OptionDef&, const std::string&, const std::string& v, Params& p) {
  if (v != "peer" && v != "none") return "option --isolate: '" + v + "' is neither peer nor none";
  p.isolate = v == "peer";
  return "";
}

std::string parse_max_refusals(const OptionDef&, const std::string&, const std::string& v,
                               Params& p) {
  const size_t slash = v.find('/');
  char* end = nullptr;
  const unsigned long cnt = std::strtoul(v.c_str(), &end, 10);
  if (slash == std::string::npos || end != v.c_str() + slash || slash == 0 || cnt == 0 ||
      cnt > UINT32_MAX || !to_seconds(v.substr(slash + 1), p.refusal_window) ||
      p.refusal_window <= 0 || p.refusal_window > 86400)
    return "option --max-refusals: '" + v + "' is not N/SECONDS (N >= 1, SECONDS in (0, 86400])";
  p.max_refusals = static_cast<uint32_t>(cnt);
  return "";
}

std::string parse_emu_threads(const OptionDef&, const std::string&, const std::string& v,
                              Params& p) {
  if (v == "shared")
    p.emu_thread_per_port = false;
  else if (v == "per-port")
    p.emu_thread_per_port = true;
  else
    return "option --emu-threads: '" + v + "' is neither shared nor per-port";
  return "";
}

std::string parse_fault_kinds_opt(const OptionDef&, const std::string&, const std::string& v,
                                  Params& p) {
  if ((p.fault_kinds = parse_fault_kinds(v)) == 0)
    return "option --fault-kinds: '" + v +
           "' is not a list of error-cqe, qp-error, unreachable, delay (or all)";
  return "";
}

// After the range 0..128: 0 or 4..128.
std::string check_metadata(const OptionDef&, const std::string&, const std::string& v, Params& p) {
  return p.metadata && p.metadata < 4 ? "option --metadata: '" + v + "': 0 or 4..128" : "";
}

std::string show_keys(const Params& p) {
  return win::key_policy_name(p.keys);
}
std::string show_role(const Params& p) {
  return role_name(p.role);
}
std::string show_rpc_remote_invalidate(const Params& p) {
  return p.rpc_remote_invalidate ? "on" : "off";
}
std::string show_isolate(const Params& p) {
  return p.isolate ? "peer" : "none";
}
std::string show_emu_threads(const Params& p) {
  return p.emu_thread_per_port ? "per-port" : "shared";
}
std::string show_max_refusals(const Params& p) {
  if (!p.max_refusals) return "off";
  char b[64];
  std::snprintf(b, sizeof b, "%u/%g", p.max_refusals, p.refusal_window);
  return b;
}
std::string show_fault_kinds(const Params& p) {
  std::string s;
  for (uint32_t k = 0; k < kFaultKinds; ++k) {
    if (!(p.fault_kinds & (1u << k))) continue;
    if (!s.empty()) s += ',';
    s += fault_kind_name(k);
  }
  return s;
}

// The device profiles emu plays, one line each under --device.
std::string profile_lines() {
  std::string u;
  for (const endpoint::ProfileInfo& pr : endpoint::device_profiles()) {
    std::string n = std::string("                           ") + pr.name;
    n.resize(std::max<size_t>(n.size() + 2, 44), ' ');  // two spaces at least: help2man's column
    u += n + pr.about + "\n";
  }
  return u;
}

// Every option, in usage order. `{engines}` in a help text is engine_names("|").
const OptionDef kOptionTable[] = {
    {"device", 0, "NAME", K::kText, &Params::device, 0, 0, false,
     "emu (emulated mlx5, default), emu-sink (no data effect),\n"
     "emu@roce:ADDR (emulated mlx5 speaking RoCE v2 over UDP from\n"
     "this host's IPv4 address ADDR: two hosts without RDMA NICs)\n"
     "or an mlx5 device name (mlx5_0); emu:PROFILE plays a device\n"
     "profile (the HCA caps emu reports and enforces):"},
    {"fwd", 0, "MODE", K::kCustom, &Params::fwd, 0, 0, true,
     "forwarding engine: {engines} (default rpc);\n"
     "also --forward-mode=MODE (testpmd's spelling)",
     parse_fwd, "forward-mode"},
    {"nb-cores", 0, "N", K::kNumber, &Params::nb_cores, 1, 64, false,
     "poll lcores (default 1; needs N worker lcores in -l)"},
    {"pages-per-io", 0, "N", K::kNumber, &Params::pages_per_io, 1, 1024, true,
     "chunk pages per I/O (default 16)", nullptr, nullptr, "pages"},
    {"max-pages", 0, "N", K::kNumber, &Params::max_pages, 1, 1024, false,
     "translation entries per window (default max(pages-per-io, 16);\n"
     "with --metadata, pages-per-io plus the metadata's pages)"},
    {"metadata", 0, "BYTES", K::kNumber, &Params::metadata, 0, 128, false,
     "rpc: every page-sized block carries BYTES (4..128) of metadata\n"
     "kept in an array of its own; both sides map data + metadata\n"
     "into one interleaved window, one WRITE/READ moves both, both\n"
     "sides verify both (page size 4096 only)",
     check_metadata},
    {"rpc-remote-invalidate",
     0,
     "on|off",
     K::kCustom,
     {},
     0,
     0,
     false,
     "rpc client: offer remote invalidation to the server (RFC 8797\n"
     "private data in the hello; default on). off: the server replies\n"
     "with plain SENDs and the client invalidates each call's windows\n"
     "itself before the reply is handed on",
     parse_rpc_remote_invalidate,
     nullptr,
     nullptr,
     true,
     show_rpc_remote_invalidate},
    {"keys",
     0,
     "POLICY",
     K::kCustom,
     {},
     0,
     0,
     false,
     "window keys: random (default) or increment (debugging only)",
     parse_keys,
     nullptr,
     nullptr,
     true,
     show_keys},
    {"page-size", 0, "BYTES", K::kCustom, &Params::page_size, 0, 0, false,
     "chunk page size: 4096, 65536 or 2097152 (default 4096)", parse_page_size},
    {"windows-per-core", 0, "N", K::kNumber, &Params::windows_per_core, 1, 1u << 20, false,
     "windows per poll core (default 2*io-depth+16)"},
    {"burst", 0, "N", K::kNumber, &Params::burst, 1, 512, true,
     "most I/Os issued per loop iteration, one doorbell (default 16)"},
    {"io-depth", 0, "N", K::kNumber, &Params::io_depth, 1, 1024, false,
     "I/Os in flight per lane (default 32)"},
    {"stats-period", 0, "SEC", K::kSeconds, &Params::stats_period, 0, 0, false,
     "print statistics every SEC seconds (default: a one-line status\n"
     "every 10 s, so only runs longer than that print any)"},
    {"quiet", 0, nullptr, K::kFlag, &Params::quiet, 0, 0, false,
     "no status line on long runs (--stats-period still prints)"},
    {"duration", 0, "SEC", K::kSeconds, &Params::duration, 0, 0, false,
     "forward for SEC seconds, then stop (0, the default: until\n"
     "Ctrl-C, --io-count or `stop`)"},
    {"io-count", 0, "N", K::kNumber, &Params::io_count, 1, UINT64_MAX, false,
     "stop after N I/Os (all lanes together)"},
    {"json", 0, nullptr, K::kFlag, &Params::json, 0, 0, false,
     "machine-readable statistics (JSON lines on stdout)"},
    {"interactive", 'i', nullptr, K::kFlag, &Params::interactive, 0, 0, false,
     "interactive prompt (DPDK cmdline)"},
    {"auto-start", 'a', nullptr, K::kFlag, &Params::auto_start, 0, 0, false,
     "interactive: start forwarding at once"},
    {"cmdline-file", 0, "FILE", K::kText, &Params::cmdline_file, 0, 0, false,
     "run prompt commands from FILE (then the prompt with -i)"},
    {"role",
     0,
     "server|client",
     K::kCustom,
     {},
     0,
     0,
     false,
     "two-process mode (with --listen/--peer; one host: loopback)",
     parse_role,
     nullptr,
     nullptr,
     true,
     show_role},
    {"listen", 0, "[ADDR:]PORT", K::kCustom, &Params::listen, 0, 0, false,
     "server: wait for clients on this TCP address (rendezvous; the\n"
     "default address is 0.0.0.0, the usual port 7471)",
     parse_listen},
    {"peer", 0, "HOST[:PORT]", K::kCustom, &Params::peer, 0, 0, false,
     "client: meet the server at this TCP address (port 7471 if none)", parse_peer},
    {"rendezvous-timeout", 0, "SEC", K::kCustom, &Params::rendezvous_timeout, 0, 0, false,
     "longest wait for a client (server, default 120 s) or for the\n"
     "server (client, default 30 s)",
     parse_rendezvous_timeout},
    {"max-refusals",
     0,
     "N/SEC",
     K::kCustom,
     {},
     0,
     0,
     false,
     "server: disconnect the client when more than N of its remote\n"
     "accesses are refused within SEC seconds (default off)",
     parse_max_refusals,
     nullptr,
     nullptr,
     true,
     show_max_refusals},
    {"clients", 0, "N", K::kNumber, &Params::clients, 1, 64, false,
     "server: serve N clients at once, --nb-cores / N lanes each\n"
     "(needs a device on a network: emu@roce:ADDR or mlx5)"},
    {"serve-clients", 0, "N", K::kNumber, &Params::serve_clients, 0, 1000000, false,
     "server (one client at a time): serve N clients one after the\n"
     "other, then exit; 0: until Ctrl-C (default 1: the first\n"
     "client's end ends the server). A client that dies or is\n"
     "dropped counts as served; the server waits for the next\n"
     "(needs a device on a network: emu@roce:ADDR or mlx5)"},
    {"reconnect-for", 0, "SEC", K::kCustom, &Params::reconnect_for, 0, 0, false,
     "client: when the connection fails during the run (the server\n"
     "went away, a QP error), meet the server again within SEC\n"
     "seconds and carry on (default 10 on a network device:\n"
     "emu@roce:ADDR or mlx5; 0: off, the failure ends the client)",
     parse_reconnect_for},
    {"isolate",
     0,
     "peer|none",
     K::kCustom,
     {},
     0,
     0,
     false,
     "server: each lane's QP and windows in a protection domain of\n"
     "its own: no client's rkey works on another's QP (default none)",
     parse_isolate,
     nullptr,
     nullptr,
     true,
     show_isolate},
    {"cm", 0, nullptr, K::kFlag, &Params::cm, 0, 0, false,
     "mlx5: connect the QPs through rdma_cm (route-resolved device,\n"
     "port and GID) on the --listen/--peer port"},
    {"wire", 0, "NAME", K::kText, &Params::wire, 0, 0, false,
     "server: emu's shared-memory wire (/dev/shm/rdmx-emu-NAME;\n"
     "default one it picks), named to the client in the welcome"},
    {"no-verify", 0, nullptr, K::kFlag, &Params::verify, 0, 0, false,
     "do not check payload contents", nullptr, nullptr, nullptr, false},
    {"show-topology", 0, nullptr, K::kFlag, &Params::show_topology, 0, 0, false,
     "print the machine topology and the core placement"},
    {"emu-threads",
     0,
     "MODE",
     K::kCustom,
     {},
     0,
     0,
     false,
     "shared (default): one emu device thread for both ports, pinned\n"
     "to the placement's device CPU; per-port: a thread per port,\n"
     "placed by the kernel",
     parse_emu_threads,
     nullptr,
     nullptr,
     true,
     show_emu_threads},
    {"emu-idle-spin", 0, "N", K::kNumber, &Params::emu_idle_spin, 0, UINT32_MAX, false,
     "shared emu thread: empty polls before it sleeps (default 4096)"},
    {"strict-no-syscalls", 0, nullptr, K::kFlag, &Params::strict, 0, 0, false,
     "poll lcores run under a seccomp filter: any system call in the\n"
     "forwarding loop ends the process"},
    {"fault-every", 0, "N", K::kNumber, &Params::fault_every, 1, UINT64_MAX / 4, false,
     "tests: inject an emu fault every N I/Os on average (random in\n"
     "[N/2, 3N/2], per lane); rdmafwd recovers and counts it"},
    {"fault-kinds",
     0,
     "LIST",
     K::kCustom,
     {},
     0,
     0,
     false,
     "error-cqe,qp-error,unreachable,delay (default all)",
     parse_fault_kinds_opt,
     nullptr,
     nullptr,
     true,
     show_fault_kinds},
    {"fault-seed", 0, "N", K::kNumber, &Params::fault_seed, 0, UINT64_MAX, false,
     "seed of the fault schedule (default 1)"},
    {"status-period", 0, "SEC", K::kCustom, &Params::status_period, 0, 0, false,
     "tests: seconds between the default status lines (default 10)", parse_status_period},
    {"corrupt-every", 0, "N", K::kNumber, &Params::corrupt_every, 1, UINT64_MAX, false,
     "tests: the rpc server flips a payload byte every N requests\n"
     "(verification must catch it)"},
    {"forge-rkey-every", 0, "N", K::kNumber, &Params::forge_rkey_every, 1, UINT64_MAX, false,
     "tests: a two-process write/read client flips a key byte of\n"
     "the server's rkey every N one-sided operations (the server\n"
     "must refuse them)"},
    {"forge-handle-every", 0, "N", K::kNumber, &Params::forge_handle_every, 1, UINT64_MAX, false,
     "tests: an rpc client sends a forged file handle every N calls\n"
     "(the server must answer NFS3ERR_BADHANDLE and serve on)"},
    {"forge-twin-every", 0, "N", K::kNumber, &Params::forge_twin_every, 1, UINT64_MAX, false,
     "tests: an rpc client sends every N-th READ call twice for\n"
     "its slot, back to back (the server must not rewrite a reply\n"
     "in flight); needs --rpc-remote-invalidate off"},
    {"forge-credits", 0, nullptr, K::kFlag, &Params::forge_credits, 0, 0, false,
     "tests: an rpc client ignores the credits the server granted\n"
     "(io-depth calls from the first, a WRITE); the server must\n"
     "refuse the call past its grant"},
    {"help", 'h', nullptr, K::kHelp, {}, 0, 0, false, "this text"},
};

// The usage lines of one option: its names padded to the help column (25), or on a line of
// their own when longer; the help's further lines indented to the column.
std::string usage_lines(const OptionDef& o) {
  constexpr size_t kColumn = 25;
  const std::string indent(kColumn, ' ');
  std::string u = "  ";
  if (o.short_name) u += std::string("-") + o.short_name + ", ";
  u += std::string("--") + o.name;
  if (o.metavar) u += std::string(" ") + o.metavar;
  if (u.size() + 2 <= kColumn)
    u.resize(kColumn, ' ');
  else
    u += "\n" + indent;
  const std::string_view help = o.help;
  for (size_t at = 0; at < help.size();) {
    size_t nl = help.find('\n', at);
    if (nl == std::string_view::npos) nl = help.size();
    const std::string_view line = help.substr(at, nl - at);
    if (at) u += indent;
    if (const size_t e = line.find("{engines}"); e != std::string_view::npos)
      u += std::string(line.substr(0, e)) + engine_names("|") + std::string(line.substr(e + 9));
    else
      u += line;
    u += "\n";
    at = nl + 1;
  }
  return u;
}

}  // namespace

std::span<const OptionDef> options() noexcept {
  return kOptionTable;
}

const OptionDef* find_option(std::string_view name) noexcept {
  for (const OptionDef& o : kOptionTable)
    if (name == o.name || (o.alias && name == o.alias) || (o.prompt && name == o.prompt)) return &o;
  return nullptr;
}

std::string apply_option(const OptionDef& o, const std::string& name, const std::string& v,
                         Params& p) {
  switch (o.kind) {
    case K::kFlag:
      p.*std::get<bool Params::*>(o.field) = o.flag_value;
      return "";
    case K::kNumber: {
      uint64_t n = 0;
      if (!to_u64(v, n) || n < o.lo || n > o.hi)
        return "option " + name + ": '" + v + "' is not a decimal number in " +
               std::to_string(o.lo) + ".." + std::to_string(o.hi);
      if (auto* f = std::get_if<uint32_t Params::*>(&o.field)) p.*(*f) = static_cast<uint32_t>(n);
      if (auto* f = std::get_if<uint64_t Params::*>(&o.field)) p.*(*f) = n;
      return o.parse ? o.parse(o, name, v, p) : "";
    }
    case K::kSeconds:
      return to_seconds(v, p.*std::get<double Params::*>(o.field))
                 ? ""
                 : "option " + name + ": '" + v + "' is not a number of seconds";
    case K::kText:
      p.*std::get<std::string Params::*>(o.field) = v;
      if (!v.empty()) return "";
      return "option " + name + " needs " +
             (std::string_view(o.name) == "cmdline-file" ? "a file name"
              : std::string_view(o.name) == "wire"       ? "a name"
                                                         : "a value");
    case K::kCustom:
      return o.parse(o, name, v, p);
    case K::kHelp:
      break;
  }
  return "unknown option";
}

std::string option_value(const OptionDef& o, const Params& p) {
  if (o.show) return o.show(p);
  return std::visit(
      [&](auto f) -> std::string {
        using F = decltype(f);
        if constexpr (std::is_same_v<F, std::monostate>) {
          return "";
        } else if constexpr (std::is_same_v<F, bool Params::*>) {
          return p.*f == o.flag_value ? "on" : "off";
        } else if constexpr (std::is_same_v<F, double Params::*>) {
          char b[32];
          std::snprintf(b, sizeof b, "%g", p.*f);
          return b;
        } else if constexpr (std::is_same_v<F, std::string Params::*>) {
          return p.*f;
        } else {
          return std::to_string(p.*f);
        }
      },
      o.field);
}

std::string settable_names(const char* sep) {
  std::string s;
  for (const OptionDef& o : kOptionTable)
    if (o.settable) s += (s.empty() ? "" : sep) + std::string(o.name);
  return s;
}

std::string usage_text(const std::string& prog) {
  std::string u = "Usage: " + prog + " [EAL options] -- [rdmafwd options]\n\n";
  u += "For example: " + prog +
       " -l 0-1 --no-huge -m 256 -- --device emu --fwd rpc --duration 5\n\n";
  u += "rdmafwd options:\n";
  for (const OptionDef& o : kOptionTable) {
    u += usage_lines(o);
    if (o.field == OptionField(&Params::device)) u += profile_lines();
  }
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
  // getopt_long's table, from the option table: a short option's id is its character, a long
  // one's 256 + its index.
  std::vector<option> longs;
  std::string shorts = ":";
  const std::span<const OptionDef> table = options();
  for (size_t i = 0; i < table.size(); ++i) {
    const OptionDef& d = table[i];
    const int id = d.short_name ? d.short_name : 256 + static_cast<int>(i);
    const int has_arg = d.metavar ? required_argument : no_argument;
    longs.push_back({d.name, has_arg, nullptr, id});
    if (d.alias) longs.push_back({d.alias, has_arg, nullptr, id});
    if (d.short_name) shorts += d.short_name;
  }
  longs.push_back({nullptr, 0, nullptr, 0});
  for (;;) {
    int li = -1;
    const int c = getopt_long(argc, argv.data(), shorts.c_str(), longs.data(), &li);
    if (c == -1) break;
    if (c == '?' || c == ':') return fail(rdmx::cli::getopt_problem(c, argv.data()));
    const OptionDef* d = c >= 256 ? &table[static_cast<size_t>(c - 256)] : nullptr;
    for (const OptionDef& t : table)
      if (!d && t.short_name == c) d = &t;
    if (!d) return fail("unknown option");
    if (d->kind == ArgKind::kHelp) {
      o.help = true;
      return o;
    }
    // The name as the user typed its long form (getopt_long accepts unique prefixes).
    const std::string name = li >= 0 ? std::string("--") + longs[static_cast<size_t>(li)].name
                                     : std::string("-") + static_cast<char>(c);
    const std::string v = optarg ? optarg : "";
    if (std::string e = apply_option(*d, name, v, p); !e.empty()) return fail(std::move(e));
  }
  if (optind < argc) return fail("unexpected argument '" + store[optind] + "'");
  if (p.max_pages == 0)
    p.max_pages = std::max<uint32_t>(
        p.pages_per_io + metadata_pages(p.pages_per_io, p.metadata, p.page_size), 16);
  if (p.windows_per_core == 0) p.windows_per_core = 2 * p.io_depth + 16;
  if (std::string e = check_params(p); !e.empty()) return fail(std::move(e));
  return o;
}

namespace {

// Sizes: pages, metadata, windows.
std::string check_sizes(const Params& p) {
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
  return "";
}

// The network options: --listen/--peer and what needs them.
std::string check_network(const Params& p, endpoint::DeviceKind dk) {
  const bool tcp = !p.listen.empty() || !p.peer.empty();
  if (!p.listen.empty() && p.role != Role::kServer)
    return "--listen is for the server (--role server)";
  if (!p.peer.empty() && p.role != Role::kClient) return "--peer is for the client (--role client)";
  if (p.rendezvous_timeout > 0 && !tcp) return "--rendezvous-timeout is for --listen/--peer";
  if (p.max_refusals && p.role != Role::kServer)
    return "--max-refusals is for the server (--role server)";
  if (p.isolate && p.role != Role::kServer) return "--isolate is for the server (--role server)";
  if (p.cm && !tcp) return "--cm is for two processes meeting over --listen/--peer";
  if (p.cm && dk != endpoint::DeviceKind::kMlx5)
    return "--cm connects the QPs through rdma_cm: an mlx5 device only (--device mlx5_N); emu "
           "devices meet over the TCP rendezvous alone";
  if (p.reconnect_for > 0 && p.peer.empty())
    return "--reconnect-for is for a client that meets its server over TCP (--role client "
           "--peer HOST[:PORT])";
  // A server that restarts makes a new shared-memory wire: only a client on a network finds it.
  const bool on_network = endpoint::device_on_network(p.device);
  if (p.reconnect_for > 0 && !on_network)
    return "--reconnect-for needs a device on a network (emu@roce:ADDR or mlx5): a restarted "
           "server makes a new emu shared-memory wire";
  if (p.serve_clients != 1 && p.listen.empty())
    return "--serve-clients is for a server that listens (--role server --listen [ADDR:]PORT)";
  if (p.serve_clients != 1 && p.clients > 1)
    return "--serve-clients is for a server of one client at a time (not with --clients)";
  // emu's shared-memory wire is one link to one client process: a client killed holds its side
  // of the wire to the end. Over a network the next client reaches the same QPs.
  if (p.serve_clients != 1 && !on_network)
    return "--serve-clients " + std::to_string(p.serve_clients) +
           " needs a device on a network (emu@roce:ADDR or mlx5): emu's shared-memory wire "
           "joins one client process";
  if (p.clients > 1 && p.listen.empty())
    return "--clients is for a server that listens (--role server --listen [ADDR:]PORT)";
  if (p.clients > 1 && !on_network)
    return "--clients " + std::to_string(p.clients) +
           " needs a device on a network (emu@roce:ADDR or mlx5): emu's shared-memory wire "
           "joins two processes";
  return "";
}

// Two processes (--role): their rendezvous and engines; --wire only there.
std::string check_roles(const Params& p, const Engine* e) {
  const bool tcp = !p.listen.empty() || !p.peer.empty();
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
  return "";
}

// What the device can do: emu-inline, emu-sink, faults.
std::string check_device(const Params& p, endpoint::DeviceKind dk, const Engine* e) {
  if (dk == endpoint::DeviceKind::kEmuInline)
    return "--device emu-inline runs the device on the doorbell, in one thread; rdmafwd's lanes "
           "run on their own lcores: use --device emu (threaded)";
  if (dk == endpoint::DeviceKind::kEmuSink && e->needs_data) {
    return "--device emu-sink moves no data: --fwd " + p.fwd + " needs --device emu";
  }
  if (p.fault_every && (p.role != Role::kBoth || dk == endpoint::DeviceKind::kMlx5))
    return "--fault-every injects emulated-device faults: single-process --device emu only";
  if (p.fault_every && p.strict)
    return "--fault-every recovers QPs through the control path (system calls): not with "
           "--strict-no-syscalls";
  if (p.auto_start && !p.interactive) return "--auto-start is for interactive mode (-i)";
  return "";
}

}  // namespace

std::string check_params(const Params& p) {
  const endpoint::DeviceKind dk = endpoint::device_kind(p.device);
  const Engine* e = find_engine(p.fwd);
  if (!e) return "unknown forwarding mode '" + p.fwd + "'";
  // The first reply's SEND_WITH_INV would invalidate the window the second call names.
  if (p.forge_twin_every && p.rpc_remote_invalidate)
    return "--forge-twin-every needs --rpc-remote-invalidate off";
  for (std::string m :
       {check_sizes(p), check_network(p, dk), check_roles(p, e), check_device(p, dk, e)})
    if (!m.empty()) return m;
  return "";
}

bool verifies(const Params& p) {
  return p.verify && !endpoint::device_is_sink(p.device);
}

}  // namespace rdmafwd
