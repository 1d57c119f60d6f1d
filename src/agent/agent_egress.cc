// Egress for microVMs: a guest has no network device, so the agent listens on loopback
// addresses inside the guest (--egress-listen: the proxy's, and the transparent HTTP and TLS
// ones) and carries each accepted TCP connection to the daemon over the channel, on a stream
// the agent opens (id with kAgentStreamBit set). The daemon connects it to the sandbox's egress
// gateway (src/daemon/egress_relay.h).
//
// Per connection: `connect` {"port"} (the listener's port it came to) goes out; the daemon
// answers `response` ok (the guest's bytes then flow) or an error (the guest connection is reset).
// Bytes travel as `data` frames both ways, an empty one is EOF in that direction (SHUT_WR on the
// guest socket), `reset` aborts. Flow control both ways: the agent sends at most kStreamWindow
// bytes the daemon has not credited, and credits the daemon for bytes it wrote into the guest
// socket, so a slow reader on either side blocks the writer instead of growing memory. See
// docs/agent-protocol.md, "Egress".
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agent/agent.h"
#include "agent/response.h"

namespace space::agent {
namespace {

// Closes a guest socket with a TCP reset, so the guest's client sees an abort, not a clean EOF.
void close_with_reset(UniqueFd& fd) {
  linger l{1, 0};
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  fd.reset();
}

}  // namespace

// A microVM's loopback interface starts down. As init the agent brings it up (the only
// network configuration it ever does), so guest processes can reach its listener there.
void bring_up_loopback() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && !(ifr.ifr_flags & IFF_UP)) {
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
      log_line(Error::sys("ioctl", "SIOCSIFFLAGS lo up").message());
  }
  ::close(s);
}

Result<void> Agent::start_egress_listener(size_t index) {
  const auto& addr = opts_.egress_listen[index];
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail_sys("socket", "AF_INET for --egress-listen");
  UniqueFd sock(fd);
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
    return fail_sys("setsockopt", "SO_REUSEADDR");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr.ip;
  sa.sin_port = htons(addr.port);
  // In a fresh network namespace (a VM's) 127.0.0.1 binds while lo is down, but nothing can
  // connect to it; so a loopback listen address brings lo up first (a no-op if it is up).
  if ((ntohl(addr.ip) >> 24) == 127) bring_up_loopback();
  int r = ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
  if (r < 0)
    return fail_sys("bind", "--egress-listen " + addr.text +
                                " (is the address configured in the guest and the port free?)");
  if (::listen(fd, 128) < 0) return fail_sys("listen", "--egress-listen " + addr.text);
  TRY_VOID(epoll_add(fd, EPOLLIN, key(kEgressListen, index)));
  if (egress_listeners_.size() <= index) egress_listeners_.resize(index + 1);
  egress_listeners_[index] = std::move(sock);
  return {};
}

void Agent::on_egress_accept(uint64_t index) {
  if (index >= egress_listeners_.size()) return;
  const uint16_t port = opts_.egress_listen[index].port;
  for (;;) {
    int fd =
        ::accept4(egress_listeners_[index].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        log_line(Error::sys("accept4", "egress listener").message());
      return;
    }
    UniqueFd sock(fd);
    if (!channel_) {
      close_with_reset(sock);  // no daemon to carry it to (it will reattach, or never)
      continue;
    }
    if (egress_.size() >= proto::kMaxEgressConns) {
      log_line("egress: " + std::to_string(proto::kMaxEgressConns) +
               " connections are open; refusing another");
      close_with_reset(sock);
      continue;
    }
    const uint32_t stream = new_agent_stream();
    auto c = std::make_unique<EgressConn>();
    c->serial = next_serial_++;
    c->stream = stream;
    c->fd = std::move(sock);
    // Nothing is read from the guest until the daemon has answered the connect.
    if (auto r = epoll_add(c->fd.get(), 0, key(kEgressConn, c->serial)); !r) {
      log_line(r.error().message());
      close_with_reset(c->fd);
      continue;
    }
    c->in_epoll = true;
    egress_streams_[stream] = c->serial;
    send(proto::FrameType::kConnect, stream, dump_json({{"port", port}}));
    egress_.emplace(c->serial, std::move(c));
  }
}

uint32_t Agent::new_agent_stream() {
  // At most kMaxEgressConns + kMaxDnsInFlight ids are in use, so this ends quickly.
  uint32_t stream;
  do {
    next_egress_stream_ = (next_egress_stream_ + 1) & ~proto::kAgentStreamBit;
    stream = proto::kAgentStreamBit | next_egress_stream_;
  } while (next_egress_stream_ == 0 || egress_streams_.contains(stream) ||
           dns_queries_.contains(stream));
  return stream;
}

void Agent::on_egress_event(uint64_t serial, uint32_t events) {
  auto it = egress_.find(serial);
  if (it == egress_.end() || it->second->closed) return;
  EgressConn& c = *it->second;
  if (events & EPOLLERR) {
    egress_abort(c, true);  // the guest reset its connection
    return;
  }
  if (events & EPOLLOUT) egress_write_guest(c);
  if (c.closed) return;
  if (events & (EPOLLIN | EPOLLHUP)) {
    if (c.connected && !c.guest_eof && c.unacked < proto::kStreamWindow)
      egress_read_guest(c);
    else if (events & EPOLLHUP && !c.connected)
      egress_abort(c, true);  // the guest gave up before the daemon answered
    else if (events & EPOLLHUP)
      c.hup = true;  // both ways shut: parked out of epoll until it can read (no busy loop)
  }
}

void Agent::egress_read_guest(EgressConn& c) {
  static char buf[kReadChunk];
  size_t cap = std::min<uint64_t>(sizeof buf, proto::kStreamWindow - c.unacked);
  ssize_t n = ::read(c.fd.get(), buf, cap);
  if (n > 0) {
    send(proto::FrameType::kData, c.stream, std::string_view(buf, static_cast<size_t>(n)));
    c.unacked += static_cast<uint64_t>(n);
    return;
  }
  if (n == 0) {
    c.guest_eof = true;
    send(proto::FrameType::kData, c.stream, "");
    egress_maybe_done(c);
    return;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
  egress_abort(c, true);
}

void Agent::egress_write_guest(EgressConn& c) {
  uint64_t written = 0;
  while (c.to_guest_off < c.to_guest.size()) {
    ssize_t n = ::send(c.fd.get(), c.to_guest.data() + c.to_guest_off,
                       c.to_guest.size() - c.to_guest_off, MSG_NOSIGNAL);
    if (n > 0) {
      c.to_guest_off += static_cast<size_t>(n);
      written += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    egress_abort(c, true);  // the guest is gone
    return;
  }
  if (written > 0) send(proto::FrameType::kCredit, c.stream, dump_json({{"bytes", written}}));
  if (c.to_guest_off == c.to_guest.size()) {
    c.to_guest.clear();
    c.to_guest_off = 0;
    if (c.to_guest.capacity() > kReadChunk) c.to_guest.shrink_to_fit();
    if (c.daemon_eof && !c.shut_wr) {
      ::shutdown(c.fd.get(), SHUT_WR);
      c.shut_wr = true;
      egress_maybe_done(c);
    }
  }
}

void Agent::on_egress_frame(proto::Frame& f) {
  using proto::FrameType;
  if (f.type == FrameType::kDns) {
    on_dns_answer(f);
    return;
  }
  auto s = egress_streams_.find(f.stream);
  if (s == egress_streams_.end()) return;  // a connection already closed: late frames
  EgressConn& c = *egress_.at(s->second);
  switch (f.type) {
    case FrameType::kResponse: {
      if (c.connected) return;
      auto j = parse_object(f.payload);
      bool ok = j && j->contains("ok") && (*j)["ok"].is_boolean() && (*j)["ok"].get<bool>();
      if (!ok) {
        // Dial failure (or a malformed answer): the guest's client sees a reset.
        std::string why = j && j->contains("error") ? dump_json((*j)["error"]) : f.payload;
        log_line("egress: the daemon refused a connection: " + why.substr(0, 300));
        egress_abort(c, false);
        return;
      }
      c.connected = true;
      return;
    }
    case FrameType::kData:
      if (!c.connected || c.daemon_eof) {
        log_line("egress: data on a connection that is not open for it; resetting it");
        egress_abort(c, true);
        return;
      }
      if (f.payload.empty()) {
        c.daemon_eof = true;
      } else if (c.to_guest.size() - c.to_guest_off + f.payload.size() > proto::kStreamWindow) {
        log_line("egress: the daemon overran the flow-control window; resetting the connection");
        egress_abort(c, true);
        return;
      } else {
        c.to_guest.append(f.payload);
      }
      egress_write_guest(c);
      return;
    case FrameType::kCredit: {
      auto j = parse_object(f.payload);
      if (!j) return;
      auto bytes = opt_int(*j, "bytes", 0, int64_t{1} << 53);
      if (!bytes || !*bytes) return;
      c.unacked -= std::min(static_cast<uint64_t>(**bytes), c.unacked);
      return;
    }
    case FrameType::kReset:
      egress_abort(c, false);
      return;
    default:
      log_line(std::string("egress: ignoring a \"") + proto::frame_type_name(f.type) +
               "\" frame on an egress stream");
      return;
  }
}

void Agent::egress_abort(EgressConn& c, bool tell_daemon) {
  if (c.closed) return;
  if (tell_daemon) send(proto::FrameType::kReset, c.stream, "");
  if (c.in_epoll) epoll_del(c.fd.get());
  c.in_epoll = false;
  close_with_reset(c.fd);
  c.closed = true;
  egress_streams_.erase(c.stream);
  egress_closing_.push_back(c.serial);
}

void Agent::egress_maybe_done(EgressConn& c) {
  if (c.closed || !c.guest_eof || !c.shut_wr) return;
  // Both directions ended cleanly; the daemon has the guest's EOF and sent its own.
  if (c.in_epoll) epoll_del(c.fd.get());
  c.in_epoll = false;
  c.fd.reset();
  c.closed = true;
  egress_streams_.erase(c.stream);
  egress_closing_.push_back(c.serial);
}

void Agent::update_egress_interest() {
  for (uint64_t serial : egress_closing_) egress_.erase(serial);
  egress_closing_.clear();
  const bool channel_room = channel_ && channel_->queued() < kOutputHighWater;
  for (auto& [serial, cp] : egress_) {
    EgressConn& c = *cp;
    bool want_in = c.connected && !c.guest_eof && c.unacked < proto::kStreamWindow && channel_room;
    bool want_out = c.to_guest_off < c.to_guest.size();
    uint32_t want = (want_in ? uint32_t{EPOLLIN} : 0u) | (want_out ? uint32_t{EPOLLOUT} : 0u);
    if (c.hup && want == 0) {
      // Parked: a hung-up socket reports EPOLLHUP whatever the interest set.
      if (c.in_epoll) epoll_del(c.fd.get());
      c.in_epoll = false;
      continue;
    }
    if (!c.in_epoll) {
      if (epoll_add(c.fd.get(), want, key(kEgressConn, serial))) {
        c.in_epoll = true;
        c.polled = want;
        c.hup = false;
      }
      continue;
    }
    if (want == c.polled) continue;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = key(kEgressConn, serial);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
    c.polled = want;
  }
}

void Agent::drop_egress() {
  // The streams belonged to the lost channel: every carried connection is aborted.
  for (auto& [serial, c] : egress_) egress_abort(*c, false);
  for (uint64_t serial : egress_closing_) egress_.erase(serial);
  egress_closing_.clear();
  drop_dns();
}

}  // namespace space::agent
