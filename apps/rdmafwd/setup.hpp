// rdmafwd setup: devices, arenas, window pools, poll cores, QP connections, buffers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <rdmx/endpoint/cm.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/endpoint/rendezvous.hpp>
#include <rdmx/endpoint/session.hpp>

#include "rdmafwd.hpp"

namespace rdmafwd {

// Set by SIGINT/SIGTERM (main installs the handler before anything else, EAL start-up included).
// Every wait on the setup path polls it, so Ctrl-C in any phase ends the process cleanly.
extern std::atomic<bool> g_signal;

struct Testbed {
  Params prm;
  std::shared_ptr<void> wire;  // the devices' wire (emu), kept until they are gone
  // Side A: client/source/sink, B: peer/relay. Each side present in this process is one
  // endpoint (lib/endpoint's builder: device, arena, window pool, the poll cores of its lanes);
  // open_* hold the devices from opening until the endpoints take them.
  endpoint::OpenedDevice open_a, open_b;
  endpoint::Endpoint side_a, side_b;
  mlx5::Device* dev_a = nullptr;  // the sides' parts (nullptr: the side is in the peer process)
  mlx5::Device* dev_b = nullptr;
  endpoint::EmuControl emu_a;  // the sides' emulated devices (empty on mlx5, or not here)
  endpoint::EmuControl emu_b;
  std::unique_ptr<endpoint::SharedDeviceThread> emu_thread;  // threaded emu, shared: both
  mem::Arena* arena_a = nullptr;
  mem::Arena* arena_b = nullptr;
  win::WindowPool* pool_a = nullptr;
  win::WindowPool* pool_b = nullptr;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::vector<std::string> notes;  // how devices and cores are used (printed at start)
  // Two-process mode: per peer (a server's clients; a client's server) its session
  // (lib/endpoint/session.hpp: hello to goodbye over the TCP rendezvous), kept open for the run
  // (a peer that goes away is seen at once, see watch_peer) and closed with the testbed.
  struct Peer {
    endpoint::Session s;
    std::string name;  // "ADDR:PORT"
    std::string fwd;   // server: the engine this client runs (rpc; umr, write, read: nothing
                       // to serve)
    unsigned first_lane = 0, n_lanes = 0;  // server: the lanes that serve this client
    bool dropped = false;                  // server: cut off for breaking the protocol
    // Server: what the client sent on the rendezvous socket during the run that it may not
    // (anything but its goodbye: a second INFO, ...); police_peers drops it. Empty: nothing.
    std::string violation;
    // Server: the client went away without a goodbye while others are served: police_peers
    // drops it alone (a server left with no client ends instead: watch_peer's kGone).
    bool lost = false;
    // Server with --serve-clients: a client whose run is over (goodbye, gone or dropped); kept
    // for the per-client statistics, watched no more.
    bool retired = false;
  };
  std::vector<Peer> peers;
  // Server (and one process): the file handle its rpc clients use (RFC 1813 nfs_fh3: opaque,
  // made by the server), random for each run and handed out in every welcome.
  std::vector<uint8_t> file_handle;
  // Server: the clients refused at the rendezvous (address, why), for the per-client statistics.
  std::vector<std::pair<std::string, std::string>> refused_clients;
  int lost_peer = -1;  // the peer watch_peer saw go away
  // Server: the rendezvous listener, kept for the next client (--serve-clients), and whether
  // the lanes' QPs served a client before (the next one's connect recovers them first).
  endpoint::Listener listener;
  bool lanes_used = false;
  // --cm: rdma_cm through the library (the server's listener, every lane's connection;
  // disconnected at teardown).
  std::unique_ptr<endpoint::CmPeer> cm;
  // Server: the peer a lane serves, by name ("ADDR:PORT"); "" without TCP.
  std::string peer_name(const Lane& l) const;
  // Server: does any client run `fwd` (any engine when empty)? Do all run something else?
  bool any_client_runs(const std::string& fwd) const;

  ~Testbed();
  // Window census of both pools (no lane running). Text lines; ok=false on an inconsistency.
  struct PoolCensus {
    std::string pool;
    bool ok = true;
    std::string error;
    win::Census c;
  };
  std::string census(bool& ok, std::vector<PoolCensus>* out = nullptr);
  // Emulated device: PRM checker reports so far (0 for dv).
  uint64_t checker_reports(std::string* dump = nullptr) const;
};

// Builds everything for `lcores` (one lane each). Errors carry Errc::kNoDevice when the device
// does not exist (exit 3), kInvalidArgument for impossible parameters or a peer that runs with
// other sizes (exit 2), kState when interrupted (exit 130). `say` receives the announcements of
// the waits ("waiting for a client on 0.0.0.0:7471 ..."), `warn` the clients a server refused.
using Say = std::function<void(const std::string&)>;
Result<std::unique_ptr<Testbed>> make_testbed(Params& p, const std::vector<unsigned>& lcores,
                                              const Say& say = {}, const Say& warn = {});

// Two-process mode over TCP, while forwarding (main thread, no wait): kHere while the peer is
// connected, kBye once it said goodbye, kGone when it went away without one (it died).
enum class PeerState { kHere, kBye, kGone };
PeerState watch_peer(Testbed& tb);
// Server, main thread, while forwarding: a client one of whose lanes refused a request
// (engines/peer_checks.hpp), that sent anything but its goodbye on the rendezvous socket, or
// that went away while other clients are served (watch_peer), is dropped, alone: one line through
// `warn` naming it, the lane and what was wrong, then drop_peer(). Returns how many clients it
// dropped this time.
unsigned police_peers(Testbed& tb, const Say& warn);
// Cuts client `i` off: its lanes' QPs to the error state (its RDMA stops at once; the lanes end
// without counting a failure of this process), its rendezvous socket closed (the client sees
// the server gone). The other clients are served on.
void drop_peer(Testbed& tb, size_t i);

// Server with --serve-clients, after a client's run (its goodbye, its death or its drop): its
// session retired, each lane's QPs to the error state and drained (bounded), the lanes' run
// state cleared; the next client's connect recovers the QPs (lib/endpoint recover_core: RESET,
// reconnected, every window invalidated and back in the cache).
Status release_lanes(Testbed& tb);
// Server with --serve-clients: waits (Params::rendezvous_timeout, Ctrl-C) for the next client
// and connects it on the released lanes, as at start-up. kState when interrupted, kTimeout when
// none came.
Status next_client(const Params& p, Testbed& tb, const Say& say, const Say& warn);

// Client with --reconnect-for, its lanes stopped after the connection failed (the server went
// away, a QP error): its session dropped, each lane's QPs to the error state, drained and to
// RESET, then a new session with the server at --peer (retried within `budget`), the QPs
// recovered towards the new infos (recover_core: reconnected, every window invalidated) and the
// receives posted, as at start-up.
Status reconnect_client(Params& p, Testbed& tb, const Say& say, std::chrono::milliseconds budget);

// The client's goodbye over TCP, after its run (the server then stops without an error); for
// --fwd write it carries the sequence number and checksum of each slot's last write.
void say_bye(Testbed& tb, const Params& p, uint64_t ios);
// Server, after the run: waits (bounded) for the client's goodbye if it has not come yet (the
// RDMA goodbye stops the lanes first). False when none came.
bool await_bye(Testbed& tb, std::chrono::milliseconds within);
// Server of a --fwd write client, after the run: its slots against the goodbye. Mismatches are
// counted as verification failures; `note` says what was checked.
uint64_t check_client_writes(Testbed& tb, const Params& p, std::string& note);

// Posts every receive slot of the lane's c, p and s cores (setup, and after recovery).
Status post_lane_recvs(Lane& l);
// After a QP error, once the engine has polled what it accounts for: the library's recovery
// (lib/endpoint recover_cores: drain, reconnect, every window invalidated, back in the cache) for
// each connection of the lane, then its receives re-posted. Single-process mode only.
Status reconnect_lane(Testbed& tb, Lane& l);

}  // namespace rdmafwd
