// A session: one peer's connection from hello to goodbye, owned by the library (as eRPC's
// rpc_sm_*: the application sees sessions and events, never the frames of the handshake).
//
// The protocol over one rendezvous Channel (rendezvous.hpp frames):
//
//   client                                        server (SessionServer admits, door.hpp)
//   HELLO   fields ("key value" lines)  ------->
//                                       <-------  WELCOME fields | REFUSE (fields disagree)
//   INFO    its QPs (ConnectInfo codec) ------->
//                                       <-------  INFO    its QPs
//       each side checks the peer's infos (check_peer_infos), connects its QPs, posts receives
//   READY   text                        ------->
//                                       <-------  READY   text
//       RDMA flows; the connection stays open: a peer that goes away is seen at once
//   BYE     text                        ------->
//                                       <-------  BYE     text (optional: a closed socket after
//                                                          this side's goodbye ends it too)
//
// The two INFO and the two READY frames cross: each side sends its own as soon as it can and
// reads the peer's after, so neither order nor a slow peer matters.
//
// States (state()) and the events step() returns on the way:
//
//   HELLO --welcome--> INFO --peer infos (kInfos)--> . --ready()--> READY --peer ready--> RUNNING
//     |                  |                                            |        (kReady)     |
//     |                  |                                            |       peer BYE (kBye)|
//     |                  |                                            |          close()    v
//     +------------------+-------- refused, junk, peer gone, ----------+------------> CLOSING
//                                  step deadline, drop()                                   |
//                                         v                            peer BYE / peer gone |
//                                      DROPPED (error(): why)          after our BYE, or    v
//                                                                      close() after its > CLOSED
//
// A client's session starts in HELLO (its hello sent, the welcome awaited: kWelcome); a server's
// comes from admit() in HELLO with the client's hello read: the server answers welcome() (which
// checks the fields both must agree on, once, and refuses the peer otherwise) or refuse().
// Session::after_hello() starts in INFO for a caller that exchanged its own hello (the C API).
//
// The link (Config::link: "shm" or "network", device_link()): the two ends must share one. emu's
// shared-memory wire joins two processes of one host; emu@roce and mlx5 speak RoCE v2 on a
// network; a client on one and a server on the other would meet only when one of them found no
// peer on its wire (a shared wire that never appears, a QP that never answers), seconds later
// and in words that do not say why. So every hello states the link and the server refuses a
// mismatch first, before any other field, in one line naming both links and what to run
// (link_refusal()):
//   - client(): the hello's first field is "link L" (when Config::link is set);
//   - a server's session refuses a client whose link differs (or is not stated) in
//     SessionServer::try_admit(), before the application sees the hello, and in welcome();
//   - after_hello() (the caller's own hello, which knows no device: the C API), the link goes
//     at the start of the exchange, when the QPs' device is known (set_link()): the client's
//     send_info() sends a HELLO frame "link L" before its INFO; the server reads it before
//     anything else and sends its own INFO only once the links agree (else it refuses).
// A side whose Config::link is empty states and checks none.
//
// After the peer's goodbye, a QP error ends the session; it is not a failure. The peer may leave
// as soon as it has this side's last reply, before that reply's ACK reaches this side (as a TCP
// FIN's last ACK may never come): this side's retransmission then ends in
// transport-retry-exceeded (IBTA 9.7.6.1.3: the requester retries an unacknowledged request
// retry_cnt times, then completes it in error and moves the QP to the error state). The goodbye
// is a BYE frame, or one the application read on the data path (peer_bye_in_band(): blockd's
// STOP, an RPC NULL call); qp_error() applies the rule.
//
// Time: each wait on the peer (its welcome, infos, ready; its goodbye after ours) has
// Config::step_timeout from the moment this side sent its own frame; past it the session is
// DROPPED (kTimeout). step() never waits; wait_event() blocks on top of it, for at most its
// budget. Everything here is setup path (system calls, allocation), one thread per session.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/endpoint/door.hpp>
#include <rdmx/endpoint/rendezvous.hpp>
#include <rdmx/mlx5/connect_info.hpp>

namespace rdmx::endpoint {

// ---- Fields: what a hello and a welcome carry ---------------------------------------------------

struct Field {
  std::string key, value;
};
using Fields = std::vector<Field>;
// "key value\n" per field, in order.
std::string fields_text(const Fields& f);
// Lines "key value" (a line without a space is skipped).
Fields parse_fields(std::string_view text);
// The value of `key`, or nullptr.
const std::string* field(const Fields& f, std::string_view key);
// Empty when `theirs` states every field of `mine` with the same value; else one line naming the
// first that differs: "THEY run KEY THEIRS, US MINE" ("(not stated)" when absent).
std::string disagreement(const Fields& theirs, const Fields& mine,
                         std::string_view they = "the peer runs",
                         std::string_view us = "this side");

// ---- Session -----------------------------------------------------------------------------------

// The rule above, for a reader that holds only the goodbye flag (a poll core): whether a QP
// error is a failure. Any thread; hot path.
constexpr bool qp_error_is_failure(bool peer_said_bye) noexcept {
  return !peer_said_bye;
}

enum class SessionState : uint8_t { kHello, kInfo, kReady, kRunning, kClosing, kClosed, kDropped };
enum class SessionEvent : uint8_t {
  kNone,     // nothing new
  kWelcome,  // client: the server welcomed it (welcome_fields()); send_info() next
  kInfos,    // the peer's infos arrived and passed check_peer_infos (peer_infos()): connect the
             // QPs, post receives, then ready() (or refuse())
  kReady,    // the peer is ready too (peer_ready_text()): RUNNING
  kBye,      // the peer said goodbye (bye_text()): CLOSING, close() answers it
  kClosed,   // the goodbye exchange is over (CLOSED)
  kDropped,  // the session ended abnormally (error())
};
const char* session_state_name(SessionState s) noexcept;
const char* session_event_name(SessionEvent e) noexcept;

struct SessionConfig {
  // How long the peer has for each of its frames, from this side's own (see Time above).
  std::chrono::milliseconds step_timeout{kDefaultExchangeTimeout};
  // This side's link, device_link() of its device ("shm" or "network"); "" states none and
  // checks none (see The link above).
  std::string link;
};

// The hello field that states the link.
inline constexpr std::string_view kLinkField = "link";
// Empty when `theirs` states `mine` as its link; else the server's refusal, one line: "the client
// runs link THEIRS, this server MINE: start both on one link: ..." ("(not stated)" when absent).
std::string link_refusal(const Fields& theirs, std::string_view mine);

class Session {
 public:
  using Clock = std::chrono::steady_clock;
  using Config = SessionConfig;

  Session() = default;
  Session(Session&&) noexcept = default;
  Session& operator=(Session&&) noexcept = default;

  // Client: sends `hello` on `ch` (already connected) and awaits the welcome (kWelcome).
  static Result<Session> client(Channel ch, const Fields& hello, Config c = {});
  // Server: the channel and hello a Door admitted (state HELLO; answer welcome() or refuse()).
  static Session server(Door::Arrival a, Config c = {});
  // Either side, the hello exchanged by the caller: starts in INFO. `client` is the side that
  // connected (it states the link at send_info(); the server checks it).
  static Session after_hello(Channel ch, Config c = {}, bool client = false);

  // Without waiting: reads what the peer sent, moves the state, returns what happened. A
  // session past its step deadline (measured against `now`) is dropped (kTimeout).
  SessionEvent step(Clock::time_point now = Clock::now());
  // Blocking: steps until an event other than kNone, for at most w.timeout (kTimeout then; the
  // session stays as it was; its own step deadline still drops it). kState when w's cancel flag
  // is set, or when the next move is this side's (nothing to wait for: send_info(), ready(),
  // welcome(), close()) or the session has ended.
  Result<SessionEvent> wait_event(Wait w);
  // Blocking: waits for event `e` (the next one must be it); a drop returns its error; another
  // event is kProtocol.
  Status await(SessionEvent e, Wait w);

  // Server, HELLO: checks the client's hello against `must_agree` (disagreement(): the sizes and
  // options both sides run with, negotiated here once); refuses the client on a mismatch
  // (kInvalidArgument: "the client runs KEY V, this server W", then ": " and what `explain`
  // says of that field when given) or welcomes it with `offer` (state INFO).
  // The link is checked first (check_link()).
  using Explain = std::string (*)(const Field& mine);
  Status welcome(const Fields& must_agree, const Fields& offer = {}, Explain explain = nullptr);
  // Server, HELLO: refuses the client (link_refusal(), kInvalidArgument) when its hello states
  // another link than Config::link, or none; nothing when the links agree or Config::link is "".
  Status check_link();
  // Refuses the peer (it reads `why` as its error) and drops the session: error() is `why`
  // with `code` (the caller names the peer in its own line).
  void refuse(Errc code, std::string_view why);
  // INFO: sends this side's QPs' infos; the peer's must be exactly `expected` (check_peer_infos).
  // After after_hello() with a link: a client sends its link first; a server sends its infos
  // once the client's link has come and agrees (step(); a mismatch drops the session, refused).
  Status send_info(std::span<const mlx5::ConnectInfo> mine, size_t expected);
  // INFO: the QPs are connected another way (rdma_cm carries the infos in its REQ/REP private
  // data): no INFO frame either way; ready() next. Both sides must agree to it (a hello field).
  Status connected_elsewhere();
  // INFO, the peer's infos received (kInfos): this side is connected and its receives posted;
  // sends READY with `text` (state READY until the peer's comes).
  Status ready(std::string_view text = {});
  // RUNNING or CLOSING after the peer's goodbye: sends this side's goodbye. CLOSED at once when
  // the peer's came already (or the peer is gone: nothing more to say), else CLOSING until the
  // peer's goodbye or its close (step()).
  Status close(std::string_view text = {});
  // Ends the session now, for the application's reason: the socket closes, DROPPED.
  void drop(Errc code, std::string_view why);
  // RUNNING: the peer's goodbye came on the data path (the application's own last message), not
  // as a BYE frame: CLOSING with peer_said_bye(), as a BYE frame would make it (close() may
  // answer). kState in any other state.
  Status peer_bye_in_band(std::string_view text = {});
  // A QP of the session went to the error state (`what` names it: "SEND failed: ..."). After the
  // peer's goodbye (CLOSING or CLOSED with peer_said_bye()) it ends the session, CLOSED, and
  // returns kClosed: not a failure (see above). Before, the session is DROPPED (kDropped,
  // error() names the peer and `what`, kDeviceError). A session that ended already: kNone.
  SessionEvent qp_error(std::string_view what);

  SessionState state() const noexcept { return state_; }
  bool is_client() const noexcept { return client_; }
  const std::string& peer() const noexcept { return ch_.peer(); }
  const Channel& channel() const noexcept { return ch_; }
  Channel& channel() noexcept { return ch_; }
  const Fields& hello_fields() const noexcept { return hello_; }      // server: the client's
  const Fields& welcome_fields() const noexcept { return welcome_; }  // client: the server's
  const std::vector<mlx5::ConnectInfo>& peer_infos() const noexcept { return infos_; }
  bool have_peer_infos() const noexcept { return have_infos_; }
  bool info_sent() const noexcept { return info_sent_; }
  const std::string& peer_ready_text() const noexcept { return ready_text_; }
  const std::string& bye_text() const noexcept { return bye_text_; }
  bool peer_said_bye() const noexcept { return peer_bye_; }
  // DROPPED because the peer's connection ended (closed or reset) rather than for what it sent.
  bool peer_went_away() const noexcept { return gone_; }
  // DROPPED: why (names the peer); meaningless in any other state.
  const Error& error() const noexcept { return error_; }
  void set_step_timeout(std::chrono::milliseconds t) noexcept { cfg_.step_timeout = t; }
  // This side's link (Config::link), for an after_hello() session before send_info().
  void set_link(std::string_view link) { cfg_.link = std::string(link); }
  const Config& config() const noexcept { return cfg_; }

 private:
  SessionEvent fail(Error e);
  SessionEvent timed_out(const char* what);
  void arm() { deadline_ = Clock::now() + cfg_.step_timeout; }
  SessionEvent step_running();
  SessionEvent step_closing(Clock::time_point now);
  SessionEvent step_link(Clock::time_point now);

  Channel ch_;
  Config cfg_;
  SessionState state_ = SessionState::kDropped;
  bool client_ = false;
  bool info_sent_ = false, have_infos_ = false;
  bool bye_sent_ = false, peer_bye_ = false, gone_ = false;
  bool after_hello_ = false;   // the link goes at send_info() (after_hello())
  bool link_pending_ = false;  // server: its infos wait for the client's link (pending_infos_)
  std::vector<mlx5::ConnectInfo> pending_infos_;
  size_t expected_ = 0;
  Clock::time_point deadline_{Clock::time_point::max()};
  Fields hello_, welcome_;
  std::vector<mlx5::ConnectInfo> infos_;
  std::string ready_text_, bye_text_;
  Error error_{Errc::kState, "no session"};
};

// Server: admits the next peer whose hello is complete, without waiting on any (the Door), as a
// Session in HELLO; nothing when none is. Each peer the door refuses (silent past its deadline,
// foreign bytes, too many at once, closed) or whose link differs from Session::Config::link
// (check_link(): refused first, before the application sees its hello) is one call of `log` (its
// address, the line saying why) and not returned; only a failed listening socket is an error
// (kDeviceError).
class SessionServer {
 public:
  using Log = void (*)(void* arg, const std::string& peer, const std::string& line);
  SessionServer() = default;
  SessionServer(Listener* l, Door::Config dc, Session::Config sc, Log log = nullptr,
                void* log_arg = nullptr) noexcept
      : door_(l, dc), sc_(sc), log_(log), log_arg_(log_arg) {}

  Result<std::optional<Session>> try_admit();
  Door& door() noexcept { return door_; }
  uint64_t refused() const noexcept { return refused_; }

 private:
  Door door_;
  Session::Config sc_;
  Log log_ = nullptr;
  void* log_arg_ = nullptr;
  uint64_t refused_ = 0;
};

}  // namespace rdmx::endpoint
