// EgressRelay: serves the agent's egress streams (see egress_relay.h), and connect_in_netns.
//
// One connection, in order: dial; answer the agent's connect (`response` ok, or an error when
// the dial failed: the guest's client then sees its connection reset); then two threads:
//   agent -> socket: pops the stream's frames; `data` is written to the gateway socket (a slow
//     gateway blocks this write, so credits stop and the agent stops reading the guest) and
//     then credited; empty `data` shuts the socket's write side; `reset` cuts.
//   socket -> agent: reads the gateway socket; each chunk waits for room in the agent's window
//     (Stream::reserve_stdin, fed by the agent's `credit` frames) before it is sent as `data`;
//     EOF becomes an empty `data`.
// The connection ends when both directions have ended, or is cut: on a reset from either side,
// a socket error, channel loss or stop(). Cutting sends the agent `reset` (unless the agent
// reset or the channel is gone) and resets the gateway's TCP connection. Anything unexpected
// from the agent on the stream (a frame type that has no place there, data after its EOF)
// cuts that connection; malformed frames and window overruns close the whole channel in
// AgentConn, as for every stream.
#include "daemon/egress_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace space::daemon {

using proto::FrameType;

namespace {
constexpr std::chrono::milliseconds kWriteSlice{200};
}  // namespace

Result<UniqueFd> socket_in_netns(int netns_fd, int type) {
  // A socket belongs to the network namespace of the thread that made it. setns() changes only
  // the calling thread, and this thread exits right after, so the daemon's other threads never
  // run in the sandbox's namespace.
  int sock = -1;
  std::optional<Error> err;
  std::thread([&] {
    if (::setns(netns_fd, CLONE_NEWNET) < 0) {
      err = Error::sys("setns", "CLONE_NEWNET fd " + std::to_string(netns_fd));
      return;
    }
    sock = ::socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0) err = Error::sys("socket", "AF_INET");
  }).join();
  if (err) return fail(std::move(*err));
  return UniqueFd(sock);
}

Result<NetnsConnect> start_connect_in_netns(int netns_fd, int type, const std::string& ip,
                                            uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1)
    return fail(Code::kInvalidArgument, "\"" + ip + "\" is not an IPv4 address");
  NetnsConnect c;
  c.where = ip + ":" + std::to_string(port) + (type == SOCK_DGRAM ? "/udp" : "") + " in netns fd " +
            std::to_string(netns_fd);
  c.fd = TRY_CTX(socket_in_netns(netns_fd, type), "connecting to " + c.where);
  if (::connect(c.fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) < 0) {
    if (errno != EINPROGRESS) return fail_sys("connect", c.where);
    c.in_progress = true;
  }
  return c;
}

Result<UniqueFd> connect_in_netns(int netns_fd, const std::string& ip, uint16_t port,
                                  std::chrono::milliseconds timeout) {
  auto [fd, where, in_progress] = TRY(start_connect_in_netns(netns_fd, SOCK_STREAM, ip, port));
  if (in_progress) {
    pollfd p{fd.get(), POLLOUT, 0};
    auto deadline = Clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        return fail(Code::kTimeout, "connect " + where + ": no answer within " +
                                        std::to_string(timeout.count()) + " ms");
      int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r > 0) break;
      if (r < 0 && errno != EINTR) return fail_sys("poll", "connect " + where);
    }
    int so = 0;
    socklen_t len = sizeof so;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so, &len) < 0)
      return fail_sys("getsockopt", "SO_ERROR");
    if (so != 0) {
      errno = so;
      return fail_sys("connect", where);
    }
  }
  int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) < 0)
    return fail_sys("fcntl", "clearing O_NONBLOCK");
  return std::move(fd);
}

struct EgressRelay::Conn {
  std::shared_ptr<Stream> s;
  uint16_t port = 0;
  std::mutex mu;  // guards sock against cut() while it is being set or closed
  UniqueFd sock;
  std::atomic<bool> aborted{false};
  std::atomic<bool> agent_eof{false};  // the agent's empty data arrived
  std::atomic<bool> up_done{false};    // the gateway's EOF was sent to the agent
  std::thread main, up;
};

EgressRelay::EgressRelay(AgentConn& conn, Dial dial, std::string name)
    : conn_(conn), dial_(std::move(dial)), name_(std::move(name)) {}

EgressRelay::~EgressRelay() { stop(); }

void EgressRelay::start() {
  {
    std::lock_guard lock(mu_);
    if (started_ || stopping_) return;
    started_ = true;
  }
  conn_.set_on_agent_stream(
      [this](std::shared_ptr<Stream> s, uint16_t port) { on_stream(std::move(s), port); });
}

size_t EgressRelay::active() const {
  std::lock_guard lock(mu_);
  return conns_.size();
}

void EgressRelay::reap_finished(const Conn* keep) {
  std::vector<std::shared_ptr<Conn>> done;
  {
    std::lock_guard lock(mu_);
    done.swap(finished_);
    auto self = std::find_if(done.begin(), done.end(), [&](auto& c) { return c.get() == keep; });
    if (self != done.end()) {
      finished_.push_back(std::move(*self));
      done.erase(self);
    }
  }
  for (auto& c : done)
    if (c->main.joinable()) c->main.join();
}

// On AgentConn's reader thread: must not block (a thread per connection does the work).
void EgressRelay::on_stream(std::shared_ptr<Stream> s, uint16_t port) {
  reap_finished();
  auto c = std::make_shared<Conn>();
  c->s = std::move(s);
  c->port = port;
  std::lock_guard lock(mu_);
  if (stopping_) {
    conn_.close_stream(c->s->id());  // the channel is about to close; the agent resets then
    return;
  }
  conns_[c->s->id()] = c;
  served_.fetch_add(1);
  // The Conn is kept alive by conns_/finished_ until its thread is joined.
  c->main = std::thread([this, p = c.get()] { serve(*p); });
}

void EgressRelay::cut(Conn& c, bool tell_agent) {
  if (c.aborted.exchange(true)) return;
  if (tell_agent) (void)conn_.send(FrameType::kReset, c.s->id(), "");
  {
    std::lock_guard lock(c.mu);
    if (c.sock) {
      // The gateway sees a reset (at close, in serve), not a clean end of the request; so no
      // SHUT_WR (it would send a FIN). SHUT_RD wakes a read blocked on the socket; a blocked
      // write wakes within kWriteSlice and sees `aborted`.
      linger l{1, 0};
      (void)::setsockopt(c.sock.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
      ::shutdown(c.sock.get(), SHUT_RD);
    }
  }
  c.s->abort(Error(Code::kUnavailable, "the egress connection was cut"));
}

void EgressRelay::serve(Conn& c) {
  const uint32_t id = c.s->id();
  auto fd = dial_(c.port);
  if (!fd) {
    spdlog::info("{}: egress connection (guest port {}) refused: {}", name_, c.port,
                 fd.error().message());
    if (!c.aborted)
      (void)conn_.send_json(
          FrameType::kResponse, id,
          {{"ok", false},
           {"error",
            {{"code", "unavailable"},
             {"message", "the egress gateway is unreachable: " + fd.error().message()}}}});
  } else {
    int fl = ::fcntl(fd->get(), F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) (void)::fcntl(fd->get(), F_SETFL, fl & ~O_NONBLOCK);
    timeval tv{0, static_cast<suseconds_t>(kWriteSlice.count() * 1000)};
    (void)::setsockopt(fd->get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    {
      std::lock_guard lock(c.mu);
      if (!c.aborted) c.sock = std::move(*fd);
    }
    if (c.sock && conn_.accept_agent_stream(*c.s)) {
      c.up = std::thread([this, &c] { socket_to_agent(c); });
      agent_to_socket(c);
      c.up.join();
    }
  }
  conn_.close_stream(id);
  {
    std::lock_guard lock(c.mu);
    c.sock.reset();
  }
  {
    std::lock_guard lock(mu_);
    auto it = conns_.find(id);
    if (it != conns_.end()) {
      finished_.push_back(std::move(it->second));
      conns_.erase(it);
    }
    if (stopping_) return;  // stop() joins every thread
  }
  reap_finished(&c);
}

namespace {

// Writes all of b to the gateway socket, which has SO_SNDTIMEO = kWriteSlice: a slow gateway
// blocks this (that is the flow control), but a cut is noticed within a slice.
bool write_all(int fd, std::string_view b, const std::atomic<bool>& aborted) {
  while (!b.empty()) {
    if (aborted) return false;
    ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return false;
    b.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

void EgressRelay::agent_to_socket(Conn& c) {
  for (;;) {
    auto f = c.s->pop();
    if (!f) {
      // Both directions ended (socket_to_agent woke us), or cut, or the channel is gone.
      if (!(c.agent_eof && c.up_done)) cut(c, false);
      return;
    }
    switch (f->type) {
      case FrameType::kData:
        if (c.agent_eof) {
          spdlog::warn("{}: the agent sent egress data after its EOF; resetting", name_);
          cut(c, true);
          return;
        }
        if (f->payload.empty()) {
          c.agent_eof = true;
          ::shutdown(c.sock.get(), SHUT_WR);
          if (c.up_done) return;
          continue;
        }
        if (!write_all(c.sock.get(), f->payload, c.aborted)) {
          cut(c, true);  // the gateway reset or closed its side (or a cut: then a no-op)
          return;
        }
        conn_.credit(*c.s, f->payload.size());
        continue;
      case FrameType::kReset:
        cut(c, false);
        return;
      default:
        spdlog::warn("{}: the agent sent a {} frame on an egress stream; resetting", name_,
                     proto::frame_type_name(f->type));
        cut(c, true);
        return;
    }
  }
}

void EgressRelay::socket_to_agent(Conn& c) {
  const uint32_t id = c.s->id();
  std::string buf(64 * 1024, '\0');
  for (;;) {
    ssize_t n = ::read(c.sock.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (c.aborted) return;
    if (n > 0) {
      // Waits while the agent has a full window of our bytes it has not written to the guest.
      if (!c.s->reserve_stdin(static_cast<size_t>(n))) return;  // cut or channel lost
      if (!conn_.send(FrameType::kData, id, std::string_view(buf.data(), static_cast<size_t>(n))))
        return cut(c, false);
      continue;
    }
    if (n == 0) {
      if (!conn_.send(FrameType::kData, id, "")) return cut(c, false);
      c.up_done = true;
      // Wake the other direction if it already has the agent's EOF and waits in pop().
      if (c.agent_eof) c.s->abort(Error(Code::kUnavailable, "egress connection finished"));
      return;
    }
    return cut(c, true);  // the gateway reset the connection
  }
}

void EgressRelay::stop() {
  conn_.set_on_agent_stream(nullptr);  // returns once no on_stream() call is running
  std::vector<std::shared_ptr<Conn>> all;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [id, c] : conns_) all.push_back(c);
  }
  for (auto& c : all) cut(*c, conn_.alive());
  for (auto& c : all)
    if (c->main.joinable()) c->main.join();
  reap_finished();
}

}  // namespace space::daemon
