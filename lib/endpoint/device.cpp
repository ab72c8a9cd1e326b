// The device opener (grammar and meanings: include/rdmx/endpoint/device.hpp).
#include <cerrno>
#include <charconv>
#include <thread>

#include <rdmx/dv/dv_device.hpp>
#include <rdmx/emu/profile.hpp>
#include <rdmx/endpoint/device.hpp>

namespace rdmx::endpoint {

namespace {

constexpr std::string_view kEmuNames[] = {"emu", "emu-threaded", "emu-inline", "emu-sink"};
constexpr emu::Mode kEmuModes[] = {emu::Mode::kThreaded, emu::Mode::kThreaded, emu::Mode::kInline,
                                   emu::Mode::kSink};

Result<long> number(std::string_view key, std::string_view v, long lo, long hi) {
  long n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi)
    return make_error(Errc::kInvalidArgument, "device option " + std::string(key) + "=" +
                                                  std::string(v) + ": not a number in " +
                                                  std::to_string(lo) + ".." + std::to_string(hi));
  return n;
}

constexpr std::string_view kOptionNames =
    "port=N, gid=N, side=0|1, timeout=MS, loss=PCT, reorder=PCT, dup=PCT, seed=N, mtu=N, "
    "pcap=FILE, ack_timeout=0..31, retry_cnt=0..7";

Result<double> percent(std::string_view key, std::string_view v) {
  double d = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || end != v.data() + v.size() || !(d >= 0) || !(d < 100))
    return make_error(Errc::kInvalidArgument, "device option " + std::string(key) + "=" +
                                                  std::string(v) +
                                                  ": not a percentage in [0, 100)");
  return d;
}

Status apply_option(std::string_view opt, DeviceOptions& o) {
  const size_t eq = opt.find('=');
  if (eq == std::string_view::npos)
    return make_error(Errc::kInvalidArgument, "device option '" + std::string(opt) +
                                                  "' is not key=value (" +
                                                  std::string(kOptionNames) + ")");
  const std::string_view k = opt.substr(0, eq), v = opt.substr(eq + 1);
  if (k == "port") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, 1, 255));
    o.ib_port = static_cast<uint8_t>(n);
  } else if (k == "gid") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, -1, 255));
    o.gid_index = static_cast<int>(n);
  } else if (k == "side") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, 0, 1));
    o.side = static_cast<int>(n);
  } else if (k == "timeout") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, 0, 3'600'000));
    o.attach_timeout = std::chrono::milliseconds(n);
  } else if (k == "loss" || k == "reorder" || k == "dup") {
    RDMX_TRY_ASSIGN(const double pct, percent(k, v));
    (k == "loss" ? o.roce.loss : k == "reorder" ? o.roce.reorder : o.roce.duplicate) = pct / 100;
  } else if (k == "seed") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, 0, 0x7FFFFFFF));
    o.roce.seed = static_cast<uint64_t>(n);
  } else if (k == "mtu") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, 256, 4096));
    if ((n & (n - 1)) != 0)
      return make_error(Errc::kInvalidArgument,
                        "device option mtu=" + std::string(v) + ": not a power of two");
    o.roce.mtu = static_cast<uint32_t>(n);
  } else if (k == "ack_timeout") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, 0, 31));
    o.emu.timers.timeout = static_cast<uint8_t>(n);
  } else if (k == "retry_cnt") {
    RDMX_TRY_ASSIGN(const long n, number(k, v, 0, 7));
    o.emu.timers.retry_cnt = static_cast<uint8_t>(n);
  } else if (k == "pcap") {
    if (v.empty()) return make_error(Errc::kInvalidArgument, "device option pcap= needs a file");
    o.roce.pcap = std::string(v);
  } else {
    return make_error(Errc::kInvalidArgument, "unknown device option '" + std::string(k) + "' (" +
                                                  std::string(kOptionNames) + ")");
  }
  return {};
}

bool is_roce(const std::string& wire) {
  return wire.rfind("roce:", 0) == 0;
}

// What runs, as the device grammar names it: "emu-threaded@roce:10.0.0.1" on a RoCE wire.
std::string backend_name(const DeviceSpec& s) {
  if (s.backend == Backend::kMlx5) return "mlx5";
  const std::string mode = s.mode == emu::Mode::kInline ? "emu-inline"
                           : s.mode == emu::Mode::kSink ? "emu-sink"
                                                        : "emu-threaded";
  return is_roce(s.wire) ? mode + "@" + s.wire : mode;
}

Result<std::shared_ptr<emu::Wire>> roce_wire(const std::string& spec, const DeviceOptions& o) {
  if (o.side != 0)
    return make_error(Errc::kInvalidArgument,
                      "wire " + spec + ": a RoCE wire has no sides (side=1 is for shm wires)");
  emu::RoceOptions r = o.roce;
  RDMX_TRY_ASSIGN(r.local_ipv4, emu::parse_ipv4(spec.substr(5)), "wire " + spec);
  auto w = emu::make_roce_wire(r);
  if (!w) return add_context(std::move(w).error(), "wire " + spec);
  return w;
}

Result<std::shared_ptr<emu::Wire>> wire_from_spec(const std::string& spec, const DeviceOptions& o) {
  if (is_roce(spec)) return roce_wire(spec, o);
  if (spec.rfind("shm:", 0) != 0 || spec.size() == 4)
    return make_error(Errc::kInvalidArgument,
                      "wire \"" + spec + "\" is neither empty, \"shm:NAME\" nor \"roce:A.B.C.D\"");
  const std::string name = spec.substr(4);
  if (o.side == 0) {
    auto w = emu::create_shm_wire(name);
    if (!w) return add_context(std::move(w).error(), "create wire " + spec);
    return w;
  }
  // Side 1: side 0 creates the wire; wait for it, in time (not in attempts).
  const auto end = std::chrono::steady_clock::now() + o.attach_timeout;
  for (;;) {
    auto w = emu::attach_shm_wire(name);
    if (w) return w;
    if (o.cancel && o.cancel->load())
      return make_error(Errc::kState, "interrupted while waiting for side 0 of wire " + spec);
    if (std::chrono::steady_clock::now() >= end)
      return make_error(Errc::kTimeout,
                        "wire " + spec + " (side 1): no side 0 after " +
                            std::to_string(o.attach_timeout.count()) +
                            " ms (is the other process running?): " + w.error().message);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Result<OpenedDevice> open_emu(const DeviceSpec& s, const DeviceOptions& o,
                              std::shared_ptr<emu::Wire> wire, bool shared_memory) {
  OpenedDevice d;
  d.wire = std::move(wire);
  emu::Options eo = o.emu;
  eo.mode = s.mode;
  // Inline execution cannot reach a peer in another process: such a device runs threaded.
  if (shared_memory && eo.mode == emu::Mode::kInline) eo.mode = emu::Mode::kThreaded;
  eo.name = o.emu_name.empty() ? "emu" + std::to_string(o.side) : o.emu_name;
  eo.start_thread = o.start_thread;
  if (!s.profile.empty()) eo.profile = s.profile;
  RDMX_TRY_ASSIGN(auto dev, emu::EmuDevice::open(d.wire, o.side, eo), eo.name);
  d.emu = dev.get();
  d.dev = std::move(dev);
  DeviceSpec opened = s;
  opened.mode = eo.mode;
  d.backend = backend_name(opened);
  return d;
}

Result<OpenedDevice> open_mlx5(const DeviceSpec& s, const DeviceOptions& o) {
  dv::DvOptions dopt;
  dopt.port = o.ib_port;
  dopt.gid_index = o.gid_index;
  dopt.timers = o.emu.timers;  // the RC timers of the device's QPs, on either backend
  OpenedDevice d;
  RDMX_TRY_ASSIGN(d.dev, dv::DvDevice::open(s.verbs_name, dopt));
  d.backend = "mlx5";
  return d;
}

}  // namespace

const char* device_names_help() noexcept {
  return "emu, emu-threaded, emu-inline, emu-sink (each also as NAME@roce:ADDR on a RoCE v2 wire "
         "and NAME:PROFILE), mlx5, mlx5_N";
}

Result<DeviceSpec> parse_device_spec(std::string_view spec, DeviceOptions* opts) {
  DeviceOptions scratch;
  DeviceOptions& o = opts ? *opts : scratch;
  DeviceSpec s;
  std::string_view rest = spec;
  const size_t comma = rest.find(',');
  std::string_view options = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  rest = rest.substr(0, comma);
  const size_t at = rest.find('@');
  if (at != std::string_view::npos) {
    s.wire = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
  }
  const size_t colon = rest.find(':');
  if (colon != std::string_view::npos) {
    s.profile = std::string(rest.substr(colon + 1));
    rest = rest.substr(0, colon);
  }
  if (rest.empty())
    return make_error(Errc::kNoDevice,
                      "empty device name (" + std::string(device_names_help()) + ")");
  if (rest.substr(0, 3) == "emu") {
    size_t i = 0;
    while (i < std::size(kEmuNames) && kEmuNames[i] != rest) ++i;
    if (i == std::size(kEmuNames))
      return make_error(Errc::kNoDevice, "unknown emulated device '" + std::string(rest) + "' (" +
                                             device_names_help() + ")");
    s.backend = Backend::kEmu;
    s.mode = kEmuModes[i];
  } else {
    s.backend = Backend::kMlx5;
    s.verbs_name = rest == "mlx5" ? "" : std::string(rest);
    if (!s.wire.empty())
      return make_error(Errc::kInvalidArgument,
                        "device '" + std::string(spec) + "': a wire (@...) is for emu only");
  }
  if (!s.profile.empty() && s.backend == Backend::kMlx5)
    return make_error(Errc::kInvalidArgument,
                      "device '" + std::string(spec) + "': a profile (:...) is for emu only");
  if (!s.profile.empty() && !emu::profile_by_name(s.profile))
    return make_error(Errc::kUnsupported, "device '" + std::string(spec) + "': no emu profile '" +
                                              s.profile + "' (" + emu::profile_names() + ")");
  while (!options.empty()) {
    const size_t c = options.find(',');
    RDMX_TRY(apply_option(options.substr(0, c), o), "device '" + std::string(spec) + "'");
    options = c == std::string_view::npos ? "" : options.substr(c + 1);
  }
  if (!s.wire.empty()) {
    // The spec's own wire replaces the caller's (e.g. a tool's shared-memory wire for its peer
    // process): the caller's side was for that wire, not this one, unless the spec gives one.
    if (o.wire != s.wire && spec.find(",side=") == std::string_view::npos) o.side = 0;
    o.wire = s.wire;
  }
  if (o.side != 0 && o.side != 1)
    return make_error(Errc::kInvalidArgument,
                      "emu wire side " + std::to_string(o.side) + " (0 or 1)");
  return s;
}

Result<OpenedDevice> open_device(std::string_view spec, DeviceOptions o) {
  RDMX_TRY_ASSIGN(const DeviceSpec s, parse_device_spec(spec, &o));
  if (s.backend == Backend::kMlx5) return open_mlx5(s, o);
  std::shared_ptr<emu::Wire> wire;
  if (o.wire.empty()) {
    wire = emu::make_wire();
  } else {
    RDMX_TRY_ASSIGN(wire, wire_from_spec(o.wire, o));
  }
  return open_emu(s, o, std::move(wire), !o.wire.empty());
}

Result<std::array<OpenedDevice, 2>> open_device_pair(std::string_view spec, DeviceOptions a,
                                                     DeviceOptions b) {
  RDMX_TRY_ASSIGN(const DeviceSpec s, parse_device_spec(spec, &a));
  if (s.backend == Backend::kMlx5) {
    RDMX_TRY_ASSIGN(OpenedDevice da, open_mlx5(s, a));
    RDMX_TRY_ASSIGN(OpenedDevice db, open_mlx5(s, b));
    return std::array<OpenedDevice, 2>{std::move(da), std::move(db)};
  }
  if (!a.wire.empty())
    return make_error(Errc::kInvalidArgument,
                      "device pair '" + std::string(spec) +
                          "': both ends are in this process; a shm wire joins two processes");
  a.side = 0;
  b.side = 1;
  const std::shared_ptr<emu::Wire> wire = emu::make_wire();
  RDMX_TRY_ASSIGN(OpenedDevice da, open_emu(s, a, wire, false));
  RDMX_TRY_ASSIGN(OpenedDevice db, open_emu(s, b, wire, false));
  return std::array<OpenedDevice, 2>{std::move(da), std::move(db)};
}

Result<std::unique_ptr<emu::EmuDevice>> take_emu(OpenedDevice&& d) {
  if (!d.emu)
    return make_error(Errc::kUnsupported,
                      "device " + d.dev->name() + " (" + d.backend + ") is not an emulated device");
  d.emu = nullptr;
  return std::unique_ptr<emu::EmuDevice>(static_cast<emu::EmuDevice*>(d.dev.release()));
}

DeviceKind device_kind(std::string_view spec) noexcept {
  DeviceOptions o;
  auto s = parse_device_spec(spec, &o);
  if (!s) return DeviceKind::kNone;
  if (s.value().backend == Backend::kMlx5) return DeviceKind::kMlx5;
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

bool device_on_network(std::string_view spec) noexcept {
  auto s = parse_device_spec(spec, nullptr);
  return s && (s.value().backend == Backend::kMlx5 || is_roce(s.value().wire));
}

const char* device_link(std::string_view spec) noexcept {
  if (!parse_device_spec(spec, nullptr)) return "";
  return device_on_network(spec) ? "network" : "shm";
}

bool device_is_sink(std::string_view spec) noexcept {
  return device_kind(spec) == DeviceKind::kEmuSink;
}

const char* device_kind_name(DeviceKind k) noexcept {
  switch (k) {
    case DeviceKind::kEmuThreaded:
      return emu::mode_name(emu::Mode::kThreaded);
    case DeviceKind::kEmuInline:
      return emu::mode_name(emu::Mode::kInline);
    case DeviceKind::kEmuSink:
      return emu::mode_name(emu::Mode::kSink);
    case DeviceKind::kMlx5:
      return "mlx5";
    case DeviceKind::kNone:
      break;
  }
  return "";
}

std::vector<ProfileInfo> device_profiles() {
  std::vector<ProfileInfo> v;
  for (const emu::Profile& p : emu::profiles()) v.push_back({p.name, p.about});
  return v;
}

std::string EmuControl::name() const {
  return dev_ ? dev_->name() : std::string();
}

LinkStats EmuControl::link_stats() const {
  if (!dev_) return {};
  const emu::EmuStats::Roce r = dev_->stats().roce;
  return {r.tx_packets,    r.rx_packets,    r.retransmits,      r.timeouts,
          r.seq_naks_sent, r.seq_naks_rcvd, r.duplicates,       r.acks_sent,
          r.rx_full,       r.injected_loss, r.injected_reorder, r.injected_dup};
}

uint64_t EmuControl::checker_reports(std::string* dump) const {
  if (!dev_) return 0;
  const uint64_t n = dev_->checker().total();
  if (dump && n) *dump += dev_->checker().dump();
  return n;
}

Status EmuControl::error_on_nth_wqe(mlx5::QpHandle qp, uint64_t n, uint8_t syndrome) {
  if (!dev_) return make_error(Errc::kUnsupported, "fault injection: not an emulated device");
  return dev_->faults().error_on_nth_wqe(qp, n, syndrome);
}

Status EmuControl::qp_to_error(mlx5::QpHandle qp) {
  if (!dev_) return make_error(Errc::kUnsupported, "fault injection: not an emulated device");
  return dev_->faults().qp_to_error(qp);
}

void EmuControl::set_peer_unreachable(bool on) {
  if (dev_) dev_->faults().set_peer_unreachable(on);
}

Status EmuControl::delay_completions(mlx5::QpHandle qp, uint32_t polls) {
  if (!dev_) return make_error(Errc::kUnsupported, "fault injection: not an emulated device");
  return dev_->faults().delay_completions(qp, polls);
}

Result<std::unique_ptr<SharedDeviceThread>> SharedDeviceThread::start(
    std::span<const EmuControl> devs, int cpu, uint32_t idle_spin) {
  std::vector<emu::EmuDevice*> v;
  for (const EmuControl& d : devs)
    if (d.dev_) v.push_back(d.dev_);
  emu::ThreadOptions to;
  to.cpu = cpu;
  to.idle_spin = idle_spin;
  auto t = std::unique_ptr<SharedDeviceThread>(new SharedDeviceThread());
  RDMX_TRY_ASSIGN(t->thread_, emu::DeviceThread::start(v, to));
  return t;
}

SharedDeviceThread::~SharedDeviceThread() = default;

int SharedDeviceThread::cpu() const noexcept {
  return thread_ ? thread_->options().cpu : -1;
}

size_t SharedDeviceThread::size() const noexcept {
  return thread_ ? thread_->size() : 0;
}

}  // namespace rdmx::endpoint
