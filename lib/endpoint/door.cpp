// The server's door (include/rdmx/endpoint/door.hpp): non-blocking admission of clients.
#include <string>
#include <utility>

#include <rdmx/endpoint/door.hpp>

namespace rdmx::endpoint {

Result<std::optional<Door::Arrival>> Door::poll() {
  // Accept what is pending. Beyond the cap, a connection is closed at once: it costs the server
  // one accept and one line, never a slot.
  for (;;) {
    RDMX_TRY_ASSIGN(std::optional<Channel> ch, l_->try_accept());
    if (!ch) break;
    last_refused_ = ch->peer();
    if (open_.size() >= cfg_.max_half_open)
      return make_error(Errc::kBusy, "peer " + ch->peer() +
                                         " not admitted: " + std::to_string(open_.size()) +
                                         " connections already wait for their hello (the limit)");
    open_.push_back({std::move(*ch), Clock::now() + cfg_.hello_timeout});
  }
  const auto now = Clock::now();
  for (size_t i = 0; i < open_.size(); ++i) {
    Result<std::optional<Frame>> f = open_[i].ch.try_recv();
    if (f && !f.value() && now < open_[i].deadline) continue;
    HalfOpen h = std::move(open_[i]);
    open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
    last_refused_ = h.ch.peer();
    if (!f) return f.error();
    if (!f.value())
      return make_error(Errc::kTimeout, "peer " + h.ch.peer() + " sent no hello within " +
                                            std::to_string(cfg_.hello_timeout.count()) + " ms");
    if (f.value()->type != FrameType::kHello)
      return make_error(Errc::kProtocol, "peer " + h.ch.peer() + " sent " +
                                             frame_type_name(f.value()->type) +
                                             " where its hello was due");
    return std::optional<Arrival>(Arrival{std::move(h.ch), std::move(*f.value())});
  }
  return std::optional<Arrival>();
}

}  // namespace rdmx::endpoint
