// Sessions (protocol, states and events: include/rdmx/endpoint/session.hpp).
#include <poll.h>

#include <algorithm>

#include <rdmx/endpoint/session.hpp>

namespace rdmx::endpoint {

namespace {

// A frame of a few bytes: only a peer that reads nothing at all makes this wait, 1 s at most.
constexpr std::chrono::milliseconds kSendBudget{1000};
constexpr int kSliceMs = 50;  // longest sleep of wait_event() between two looks at the flags

bool cancelled(const Wait& w) {
  return (w.cancel && w.cancel->load()) || (w.cancel_flag && *w.cancel_flag);
}

}  // namespace

// ---- Fields ------------------------------------------------------------------------------------

std::string fields_text(const Fields& f) {
  std::string out;
  for (const Field& x : f) out.append(x.key).append(" ").append(x.value).append("\n");
  return out;
}

Fields parse_fields(std::string_view text) {
  Fields out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) continue;
    out.push_back({std::string(line.substr(0, sp)), std::string(line.substr(sp + 1))});
  }
  return out;
}

const std::string* field(const Fields& f, std::string_view key) {
  for (const Field& x : f)
    if (x.key == key) return &x.value;
  return nullptr;
}

std::string disagreement(const Fields& theirs, const Fields& mine, std::string_view they,
                         std::string_view us) {
  for (const Field& m : mine) {
    const std::string* t = field(theirs, m.key);
    if (!t || *t != m.value)
      return std::string(they) + " " + m.key + " " + (t ? *t : std::string("(not stated)")) + ", " +
             std::string(us) + " " + m.value;
  }
  return "";
}

std::string link_refusal(const Fields& theirs, std::string_view mine) {
  const Fields want{{std::string(kLinkField), std::string(mine)}};
  std::string why = disagreement(theirs, want, "the client runs", "this server");
  if (!why.empty())
    why +=
        ": start both on one link: --device emu on both (shared memory, one host), or "
        "emu@roce:ADDR or mlx5 on both (RoCE v2)";
  return why;
}

const char* session_state_name(SessionState s) noexcept {
  switch (s) {
    case SessionState::kHello:
      return "hello";
    case SessionState::kInfo:
      return "info";
    case SessionState::kReady:
      return "ready";
    case SessionState::kRunning:
      return "running";
    case SessionState::kClosing:
      return "closing";
    case SessionState::kClosed:
      return "closed";
    case SessionState::kDropped:
      return "dropped";
  }
  return "?";
}

const char* session_event_name(SessionEvent e) noexcept {
  switch (e) {
    case SessionEvent::kNone:
      return "none";
    case SessionEvent::kWelcome:
      return "welcome";
    case SessionEvent::kInfos:
      return "infos";
    case SessionEvent::kReady:
      return "ready";
    case SessionEvent::kBye:
      return "bye";
    case SessionEvent::kClosed:
      return "closed";
    case SessionEvent::kDropped:
      return "dropped";
  }
  return "?";
}

// ---- Session -----------------------------------------------------------------------------------

Result<Session> Session::client(Channel ch, const Fields& hello, Config c) {
  Session s;
  s.ch_ = std::move(ch);
  s.cfg_ = c;
  s.client_ = true;
  Fields all;
  if (!c.link.empty()) all.push_back({std::string(kLinkField), c.link});  // first: see The link
  all.insert(all.end(), hello.begin(), hello.end());
  RDMX_TRY(s.ch_.send_text(FrameType::kHello, fields_text(all), {kSendBudget}));
  s.state_ = SessionState::kHello;
  s.arm();
  return s;
}

Session Session::server(Door::Arrival a, Config c) {
  Session s;
  s.ch_ = std::move(a.ch);
  s.cfg_ = c;
  s.hello_ = parse_fields(a.hello.text());
  s.state_ = SessionState::kHello;
  return s;
}

Session Session::after_hello(Channel ch, Config c, bool client) {
  Session s;
  s.ch_ = std::move(ch);
  s.cfg_ = c;
  s.client_ = client;
  s.after_hello_ = true;
  s.state_ = SessionState::kInfo;
  return s;
}

SessionEvent Session::fail(Error e) {
  error_ = std::move(e);
  state_ = SessionState::kDropped;
  ch_.close();
  return SessionEvent::kDropped;
}

SessionEvent Session::timed_out(const char* what) {
  return fail(make_error(Errc::kTimeout, "peer " + peer() + " sent no " + what + " within " +
                                             std::to_string(cfg_.step_timeout.count()) + " ms"));
}

SessionEvent Session::step(Clock::time_point now) {
  switch (state_) {
    case SessionState::kHello: {
      // Server: the client waits for the welcome and may send nothing meanwhile.
      Result<std::optional<Frame>> f =
          client_ ? ch_.try_expect(FrameType::kWelcome) : ch_.try_recv();
      if (!f) return fail(std::move(f).error());
      if (f.value() && !client_)
        return fail(make_error(Errc::kProtocol, "peer " + peer() + " sent " +
                                                    frame_type_name(f.value()->type) +
                                                    " before its welcome"));
      if (!f.value()) return now < deadline_ ? SessionEvent::kNone : timed_out("welcome");
      welcome_ = parse_fields(f.value()->text());
      state_ = SessionState::kInfo;
      deadline_ = Clock::time_point::max();
      return SessionEvent::kWelcome;
    }
    case SessionState::kInfo: {
      if (!info_sent_ || have_infos_) return SessionEvent::kNone;  // this side's move
      if (link_pending_) {
        const SessionEvent e = step_link(now);
        if (e != SessionEvent::kNone || link_pending_) return e;
      }
      // One info per QP, no QPN twice, every field in the codec's rules, before any is used.
      auto got = ch_.try_recv_info(expected_);
      if (!got) {
        // Infos that break the rules are refused (the peer learns why); a peer that left is not.
        Error e = std::move(got).error();
        if (!ch_.peer_gone()) (void)ch_.refuse(e.code, e.message, {kSendBudget});
        return fail(std::move(e));
      }
      if (!got.value()) return now < deadline_ ? SessionEvent::kNone : timed_out("connection info");
      infos_ = std::move(*got.value());
      have_infos_ = true;
      deadline_ = Clock::time_point::max();
      return SessionEvent::kInfos;
    }
    case SessionState::kReady: {
      auto f = ch_.try_expect(FrameType::kReady);
      if (!f) return fail(std::move(f).error());
      if (!f.value()) return now < deadline_ ? SessionEvent::kNone : timed_out("ready");
      ready_text_ = f.value()->text();
      state_ = SessionState::kRunning;
      deadline_ = Clock::time_point::max();
      return SessionEvent::kReady;
    }
    case SessionState::kRunning:
      return step_running();
    case SessionState::kClosing:
      return step_closing(now);
    case SessionState::kClosed:
    case SessionState::kDropped:
      return SessionEvent::kNone;
  }
  return SessionEvent::kNone;
}

// Server after after_hello(): the client's link comes first, in a HELLO frame of its own (see The
// link); this side's infos go once it agrees. Any other first frame states no link.
SessionEvent Session::step_link(Clock::time_point now) {
  auto f = ch_.try_recv();
  if (!f) return fail(std::move(f).error());
  if (!f.value()) return now < deadline_ ? SessionEvent::kNone : timed_out("link");
  const Fields theirs =
      f.value()->type == FrameType::kHello ? parse_fields(f.value()->text()) : Fields{};
  // Anything but a link statement here is the application's own message (rdmx_conn_send) that
  // this side did not read before its exchange, or a client that states no link: say which.
  if (!field(theirs, kLinkField)) {
    refuse(Errc::kInvalidArgument,
           "the client's first frame at the exchange states no link (an application message "
           "not read before the exchange, or a client that states none)");
    return SessionEvent::kDropped;
  }
  if (std::string why = link_refusal(theirs, cfg_.link); !why.empty()) {
    refuse(Errc::kInvalidArgument, why);
    return SessionEvent::kDropped;
  }
  link_pending_ = false;
  const std::vector<mlx5::ConnectInfo> mine = std::move(pending_infos_);
  pending_infos_.clear();
  if (auto s = ch_.send_info(mine, {kSendBudget}); !s) return fail(s.error());
  arm();
  return SessionEvent::kNone;
}

// During the run a peer sends nothing but its goodbye: anything else breaks the protocol, and a
// peer whose connection ends without one went away (it died, or its host did).
SessionEvent Session::step_running() {
  pollfd p{ch_.fd(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return SessionEvent::kNone;  // the common case: one system call
  auto f = ch_.try_recv();
  if (!f) {
    Error e = std::move(f).error();
    if (e.code == Errc::kProtocol && ch_.peer_gone()) {
      gone_ = true;
      e.message = "peer " + peer() + " went away without a goodbye (" + e.message + ")";
    }
    return fail(std::move(e));
  }
  if (!f.value()) return SessionEvent::kNone;
  if (f.value()->type != FrameType::kBye)
    return fail(make_error(Errc::kProtocol, "peer " + peer() + " sent " +
                                                frame_type_name(f.value()->type) + " (frame type " +
                                                std::to_string(int(f.value()->type)) +
                                                ") during the run"));
  peer_bye_ = true;
  bye_text_ = f.value()->text();
  state_ = SessionState::kClosing;
  return SessionEvent::kBye;
}

// This side said goodbye: the peer's goodbye, or its close, ends the session.
SessionEvent Session::step_closing(Clock::time_point now) {
  if (!bye_sent_) return SessionEvent::kNone;  // the peer's came: this side's close() is due
  auto f = ch_.try_recv();
  const bool gone = !f && ch_.peer_gone();
  if (!f && !gone) return fail(std::move(f).error());
  if (f && f.value() && f.value()->type != FrameType::kBye)
    return fail(make_error(
        Errc::kProtocol,
        "peer " + peer() + " sent " + frame_type_name(f.value()->type) + " after the goodbye"));
  if (f && !f.value()) return now < deadline_ ? SessionEvent::kNone : timed_out("goodbye");
  if (f) {
    peer_bye_ = true;
    bye_text_ = f.value()->text();
  }
  state_ = SessionState::kClosed;
  ch_.close();
  return SessionEvent::kClosed;
}

Status Session::check_link() {
  if (state_ != SessionState::kHello || client_)
    return make_error(Errc::kState,
                      "check_link: the session is not a server's awaiting its answer");
  if (cfg_.link.empty()) return {};
  if (std::string why = link_refusal(hello_, cfg_.link); !why.empty()) {
    refuse(Errc::kInvalidArgument, why);
    return error_;
  }
  return {};
}

Status Session::welcome(const Fields& must_agree, const Fields& offer, Explain explain) {
  if (state_ != SessionState::kHello || client_)
    return make_error(Errc::kState, "welcome: the session is not a server's awaiting its answer");
  RDMX_TRY(check_link());
  if (std::string why = disagreement(hello_, must_agree, "the client runs", "this server");
      !why.empty()) {
    if (explain)
      for (const Field& m : must_agree)
        if (const std::string* t = field(hello_, m.key); !t || *t != m.value) {
          why += ": " + explain(m);
          break;
        }
    refuse(Errc::kInvalidArgument, why);
    return error_;
  }
  if (auto s = ch_.send_text(FrameType::kWelcome, fields_text(offer), {kSendBudget}); !s) {
    fail(s.error());
    return error_;
  }
  state_ = SessionState::kInfo;
  return {};
}

void Session::refuse(Errc code, std::string_view why) {
  if (ch_.valid()) (void)ch_.refuse(code, why, {kSendBudget});
  fail(make_error(code, std::string(why)));
}

Status Session::send_info(std::span<const mlx5::ConnectInfo> mine, size_t expected) {
  if (state_ != SessionState::kInfo || info_sent_)
    return make_error(Errc::kState, std::string("send_info: the session is in state ") +
                                        session_state_name(state_) +
                                        (info_sent_ ? ", its infos sent already" : ""));
  info_sent_ = true;
  expected_ = expected;
  arm();
  if (after_hello_ && !cfg_.link.empty() && !client_) {  // after the client's link (step_link)
    pending_infos_.assign(mine.begin(), mine.end());
    link_pending_ = true;
    return {};
  }
  Status s;
  if (after_hello_ && !cfg_.link.empty())  // the client states its link first
    s = ch_.send_text(FrameType::kHello, fields_text({{std::string(kLinkField), cfg_.link}}),
                      {kSendBudget});
  if (s) s = ch_.send_info(mine, {kSendBudget});
  if (!s) {
    fail(s.error());
    return error_;
  }
  return {};
}

Status Session::connected_elsewhere() {
  if (state_ != SessionState::kInfo || info_sent_)
    return make_error(Errc::kState, std::string("connected_elsewhere: the session is in state ") +
                                        session_state_name(state_));
  info_sent_ = have_infos_ = true;
  return {};
}

Status Session::ready(std::string_view text) {
  if (state_ != SessionState::kInfo || !have_infos_)
    return make_error(Errc::kState, std::string("ready: the session is in state ") +
                                        session_state_name(state_) +
                                        (have_infos_ ? "" : ", without the peer's infos"));
  if (auto s = ch_.send_text(FrameType::kReady, text, {kSendBudget}); !s) {
    fail(s.error());
    return error_;
  }
  state_ = SessionState::kReady;
  arm();
  return {};
}

Status Session::close(std::string_view text) {
  if (state_ != SessionState::kRunning && !(state_ == SessionState::kClosing && !bye_sent_))
    return make_error(Errc::kState,
                      std::string("close: the session is in state ") + session_state_name(state_));
  const Status s = ch_.send_text(FrameType::kBye, text, {kSendBudget});
  bye_sent_ = true;
  if (peer_bye_ || !s) {  // nothing more to hear
    state_ = SessionState::kClosed;
    ch_.close();
    return {};
  }
  state_ = SessionState::kClosing;
  arm();
  return {};
}

void Session::drop(Errc code, std::string_view why) {
  fail(make_error(code, std::string(why)));
}

Status Session::peer_bye_in_band(std::string_view text) {
  if (state_ != SessionState::kRunning)
    return make_error(Errc::kState, std::string("peer_bye_in_band: the session is in state ") +
                                        session_state_name(state_));
  peer_bye_ = true;
  bye_text_ = std::string(text);
  state_ = SessionState::kClosing;
  return {};
}

SessionEvent Session::qp_error(std::string_view what) {
  if (state_ == SessionState::kDropped) return SessionEvent::kNone;
  if (!qp_error_is_failure(peer_bye_)) {
    if (state_ == SessionState::kClosed) return SessionEvent::kNone;
    state_ = SessionState::kClosed;
    ch_.close();
    return SessionEvent::kClosed;
  }
  return fail(make_error(
      Errc::kDeviceError,
      "peer " + peer() + ": a QP failed before the peer's goodbye (" + std::string(what) + ")"));
}

Result<SessionEvent> Session::wait_event(Wait w) {
  const auto end = Clock::now() + w.timeout;
  for (;;) {
    const auto now = Clock::now();
    const SessionEvent e = step(now);
    if (e != SessionEvent::kNone) return e;
    const bool ours = (state_ == SessionState::kHello && !client_) ||
                      (state_ == SessionState::kInfo && (!info_sent_ || have_infos_)) ||
                      (state_ == SessionState::kClosing && !bye_sent_) ||
                      state_ == SessionState::kClosed || state_ == SessionState::kDropped;
    if (ours)
      return make_error(Errc::kState, std::string("session with ") + peer() + " in state " +
                                          session_state_name(state_) +
                                          ": nothing to wait for from the peer");
    if (cancelled(w))
      return make_error(Errc::kState, "interrupted while waiting for peer " + peer());
    if (now >= end)
      return make_error(Errc::kTimeout, "peer " + peer() + ": nothing within " +
                                            std::to_string(w.timeout.count()) + " ms");
    // Until the peer sends, the budget ends or the step deadline passes; a slice at most.
    const auto until = std::min(end, deadline_);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    pollfd p{ch_.fd(), POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(std::clamp<long long>(left + 1, 0, kSliceMs)));
  }
}

Status Session::await(SessionEvent e, Wait w) {
  RDMX_TRY_ASSIGN(const SessionEvent got, wait_event(w));
  if (got == e) return {};
  if (got == SessionEvent::kDropped) return error_;
  return make_error(Errc::kProtocol, "peer " + peer() + ": " + session_event_name(got) + " where " +
                                         session_event_name(e) + " was due");
}

// ---- SessionServer -----------------------------------------------------------------------------

Result<std::optional<Session>> SessionServer::try_admit() {
  for (;;) {
    auto a = door_.poll();
    if (!a) {
      if (a.error().code == Errc::kDeviceError) return std::move(a).error();
      ++refused_;
      if (log_) log_(log_arg_, door_.last_refused(), a.error().message);  // one per peer
      continue;
    }
    if (!a.value()) return std::optional<Session>();
    Session s = Session::server(std::move(*a.value()), sc_);
    if (auto l = s.check_link(); !l) {  // refused first, one line like the door's
      ++refused_;
      if (log_) log_(log_arg_, s.peer(), l.error().message);
      continue;
    }
    return std::optional<Session>(std::move(s));
  }
}

}  // namespace rdmx::endpoint
