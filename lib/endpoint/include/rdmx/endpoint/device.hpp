// Opening a device by name: the one spec grammar every entry point takes (the C API's
// rdmx_port_open, rdmafwd --device, rdmx-perf --device, blockd --device, the test rigs).
//
// This lives in lib/ (the glue layer, above drivers/): it picks between the two backends,
// drivers/mlx5/emu and drivers/mlx5/dv, which sit side by side below it and know nothing of
// each other; lib/mlx5 (the Device interface) is below both.
//
//   spec     := name [":" profile] ["@" wire] {"," option}
//   name     := "emu"            the emulated mlx5 with its own device thread, like a NIC
//                                (the same as "emu-threaded"; works in every process layout)
//             | "emu-threaded"   the same, spelled out
//             | "emu-inline"     the emulated mlx5 executing work on the doorbell (and pumping an
//                                in-process peer): deterministic, single-threaded use only; on a
//                                shared-memory wire it runs threaded (inline cannot reach the peer)
//             | "emu-sink"       every work request completes successfully, no data moves
//             | "mlx5"           the first mlx5 device (rdma-core's verbs list)
//             | "mlx5_N", other  that verbs device (udev may rename them: any other word is one)
//   profile  := an emu device profile ("emu:wqe512", emu::profiles(); doc/guides/emu.md)
//   wire     := "shm:NAME"       emu only: a wire shared by two processes (/dev/shm/rdmx-emu-NAME)
//             | "roce:A.B.C.D"   emu only: RoCE v2 on the network from this local IPv4 address
//                                (raw sockets, CAP_NET_RAW; the device GID is ::ffff:A.B.C.D;
//                                the device runs threaded; doc/guides/emu.md "RoCEv2 wire")
//   option   := "port=N"         HCA port (mlx5)          -- DeviceOptions::ib_port
//             | "gid=N"          GID table index (mlx5)   -- DeviceOptions::gid_index
//             | "side=0|1"       emu wire side            -- DeviceOptions::side
//             | "timeout=MS"     shm attach wait (ms)     -- DeviceOptions::attach_timeout
//             | "loss=PCT" | "reorder=PCT" | "dup=PCT"
//                                roce wire: inject loss / reordering / duplication of sent packets
//                                (percent, e.g. 1 or 0.5)      -- DeviceOptions::roce
//             | "seed=N"         roce wire: seed of the injections
//             | "mtu=N"          roce wire: path MTU (256..4096, default 1024)
//             | "pcap=FILE"      roce wire: write every packet sent to FILE
//             | "ack_timeout=T"  RC local ACK timeout exponent of the device's QPs (4.096 us x
//                                2^T; default 18 = 1.07 s, rdma_cm's)  -- DeviceOptions::emu.timers
//             | "retry_cnt=N"    RC transport retries 0..7 (default 7)  --
//             DeviceOptions::emu.timers
//
// Options in the spec override the DeviceOptions passed with it. Errors: kNoDevice for a name
// that names no device (an unknown emu mode, a missing verbs device: the message lists the
// names), kInvalidArgument for a malformed wire or option or a profile on mlx5, kUnsupported
// for an unknown profile (the message lists them),
// kTimeout when side 1 finds no side 0 within attach_timeout.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/emu/emu.hpp>
#include <rdmx/mlx5/device.hpp>

namespace rdmx::endpoint {

enum class Backend { kEmu, kMlx5 };

struct DeviceSpec {
  Backend backend = Backend::kEmu;
  emu::Mode mode = emu::Mode::kThreaded;  // emu
  std::string verbs_name;                 // mlx5: "" = the first mlx5 device
  std::string profile;                    // emu device profile ("" = Options::profile)
  std::string wire;                       // "" = in-process, "shm:NAME" or "roce:A.B.C.D"
};

struct DeviceOptions {
  std::string wire;  // emu: "" = a private in-process wire, or "shm:NAME"
  int side = 0;      // emu wire side: 0 creates a shm wire, 1 attaches to it
  std::chrono::milliseconds attach_timeout{5000};  // side 1: wait this long for side 0
  uint8_t ib_port = 1;                             // mlx5: HCA port
  int gid_index = -1;        // mlx5: -1 = RoCE v2 IPv4 GID / none on InfiniBand
  std::string emu_name;      // emu device name; "" = "emu<side>"
  bool start_thread = true;  // threaded emu: start the device's own thread (false: the caller
                             // drives it, e.g. with one emu::DeviceThread for several devices)
  const std::atomic<bool>* cancel = nullptr;  // side 1's attach wait stops when this is true
  emu::RoceOptions roce;  // emu@roce: link options (local_ipv4 comes from the wire)
  emu::Options emu;       // emu tuning (checker, idle backoff, transport model); its mode, name and
                          // start_thread come from the spec, emu_name and start_thread above.
                          // emu.timers are the RC timers of the device's QPs on mlx5 too.
};

struct OpenedDevice {
  std::shared_ptr<emu::Wire> wire;  // declared first: destroyed after the device
  std::unique_ptr<mlx5::Device> dev;
  emu::EmuDevice* emu = nullptr;  // the same device as emu, or nullptr on mlx5
  std::string backend;  // "emu-inline", "emu-threaded", "emu-sink" or "mlx5"; on a RoCE wire
                        // with it: "emu-threaded@roce:10.0.0.1"
};

// Parses a spec; `opts` (may be null) receives the spec's wire and options.
Result<DeviceSpec> parse_device_spec(std::string_view spec, DeviceOptions* opts);

// Opens one device.
Result<OpenedDevice> open_device(std::string_view spec, DeviceOptions opts = {});

// Two devices that can reach each other in this process: emu, sides 0 and 1 of one new
// in-process wire (a spec wire is refused); mlx5, the device opened twice (loopback).
Result<std::array<OpenedDevice, 2>> open_device_pair(std::string_view spec, DeviceOptions a = {},
                                                     DeviceOptions b = {});

// The emulated device as its own type (for emu-only tools: statistics, fault injection); the
// device keeps its wire alive. kUnsupported on mlx5.
Result<std::unique_ptr<emu::EmuDevice>> take_emu(OpenedDevice&& d);

// The device names ("emu, ..., emu-sink (each also as NAME@roce:ADDR ... and NAME:PROFILE),
// mlx5, mlx5_N"): for messages and usage texts.
const char* device_names_help() noexcept;

// ---- For applications that include no driver header (rdmafwd) --------------------------------

// What a spec names, without the backends' types. kNone: no device (a malformed spec).
enum class DeviceKind { kNone, kEmuThreaded, kEmuInline, kEmuSink, kMlx5 };
DeviceKind device_kind(std::string_view spec) noexcept;
// "threaded", "inline", "sink" (emu's mode names) or "mlx5"; "" for kNone.
const char* device_kind_name(DeviceKind k) noexcept;
// Whether the device reaches its peer over a network (mlx5, or emu on a RoCE v2 wire), so that
// the peer may be another host, restart, or be one of several clients; emu's in-process and
// shared-memory wires join two fixed sides on this host. false for a malformed spec.
bool device_on_network(std::string_view spec) noexcept;
// The link a session states for the device (session.hpp, SessionConfig::link): "network" when
// device_on_network(), else "shm" (emu's shared-memory and in-process wires); "" for a malformed
// spec. An OpenedDevice's backend ("emu-threaded@roce:10.0.0.1", "mlx5") is a spec too.
const char* device_link(std::string_view spec) noexcept;
// Whether the device is a sink: every work request completes and no data moves (emu-sink), so
// there is no payload to verify. false for a malformed spec.
bool device_is_sink(std::string_view spec) noexcept;

// The emu device profiles a spec may name ("emu:wqe512"): name and the one line it models.
struct ProfileInfo {
  const char* name;
  const char* about;
};
std::vector<ProfileInfo> device_profiles();

// An emu@roce device's RoCE v2 link: what the transport did (emu::EmuStats::Roce's counters).
struct LinkStats {
  uint64_t tx_packets = 0, rx_packets = 0, retransmits = 0, timeouts = 0;
  uint64_t seq_naks_sent = 0, seq_naks_rcvd = 0, duplicates = 0, acks_sent = 0, rx_full = 0;
  uint64_t injected_loss = 0, injected_reorder = 0, injected_dup = 0;
};

// The emulated device of an OpenedDevice, seen through what an application may do with it:
// statistics, the PRM checker's reports, fault injection (emu::Faults). Empty on mlx5 (every
// call then does nothing and reports nothing). A view: valid while the device lives (it moves
// with the OpenedDevice's unique_ptr into an Endpoint and stays where it is).
class EmuControl {
 public:
  EmuControl() = default;
  explicit EmuControl(const OpenedDevice& d) noexcept : dev_(d.emu) {}
  explicit operator bool() const noexcept { return dev_ != nullptr; }

  std::string name() const;
  LinkStats link_stats() const;
  // Reports of emu's PRM checker (and, with `dump`, their text appended).
  uint64_t checker_reports(std::string* dump) const;
  // emu::Faults: the n-th next WQE of qp's SQ completes in error with `syndrome`; the QP to the
  // error state now; requests unanswered (retry exceeded); completions held back for `polls`
  // device polls (0: off).
  Status error_on_nth_wqe(mlx5::QpHandle qp, uint64_t n, uint8_t syndrome);
  Status qp_to_error(mlx5::QpHandle qp);
  void set_peer_unreachable(bool on);
  Status delay_completions(mlx5::QpHandle qp, uint32_t polls);

 private:
  friend class SharedDeviceThread;
  emu::EmuDevice* dev_ = nullptr;
};

// One thread running several threaded emu devices opened with start_thread = false
// (emu::DeviceThread): pinned to `cpu` (-1: placed by the kernel), `idle_spin` empty polls
// before it sleeps. Stops when destroyed, before the devices go.
class SharedDeviceThread {
 public:
  static Result<std::unique_ptr<SharedDeviceThread>> start(std::span<const EmuControl> devs,
                                                           int cpu, uint32_t idle_spin);
  ~SharedDeviceThread();
  int cpu() const noexcept;      // the CPU it is pinned to, -1: none
  size_t size() const noexcept;  // the devices it runs

 private:
  std::unique_ptr<emu::DeviceThread> thread_;
};

}  // namespace rdmx::endpoint
