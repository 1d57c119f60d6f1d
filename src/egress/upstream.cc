// The gateway's side towards the outside: resolving a host (resolver overrides first, then the
// system resolver), refusing every address the sandbox's policy does not allow, dialing exactly
// an address that was checked, and moving tunneled bytes under the sandbox's bandwidth limit.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "egress/internal.h"

namespace space::egress {

void RateLimiter::take(size_t n, int cancel_fd) {
  if (rate_ == 0) return;
  double wait_s = 0;
  {
    std::lock_guard lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (last_ == std::chrono::steady_clock::time_point{}) {
      last_ = now;
      tokens_ = static_cast<double>(rate_) / 10;  // a small initial burst
    }
    tokens_ = std::min<double>(
        static_cast<double>(rate_),
        tokens_ + std::chrono::duration<double>(now - last_).count() * static_cast<double>(rate_));
    last_ = now;
    tokens_ -= static_cast<double>(n);
    if (tokens_ < 0) wait_s = -tokens_ / static_cast<double>(rate_);
  }
  if (wait_s <= 0) return;
  pollfd p{cancel_fd, POLLIN, 0};
  ::poll(&p, cancel_fd >= 0 ? 1 : 0, static_cast<int>(wait_s * 1000) + 1);
}

size_t RateLimiter::chunk(size_t max) const {
  if (rate_ == 0) return max;
  return std::clamp<size_t>(rate_ / 20, 512, max);
}

namespace {

struct Target {
  IpAddress addr;
  uint16_t port;
};

std::string endpoint_text(const IpAddress& a, uint16_t port) {
  return a.is_v6() ? "[" + a.to_string() + "]:" + std::to_string(port)
                   : a.to_string() + ":" + std::to_string(port);
}

// The resolver override for host[:port], if any: its address and port.
std::optional<Result<Target>> override_for(const Shared& g, const Host& host, uint16_t port) {
  auto& m = g.options.resolve;
  auto it = m.find(host.name + ":" + std::to_string(port));
  if (it == m.end()) it = m.find(host.name);
  if (it == m.end()) return std::nullopt;
  auto a = parse_authority(it->second, port);
  if (!a || !a->host.is_ip())
    return Result<Target>(fail(Code::kInvalidArgument,
                               "resolver override for " + host.name + " is not address[:port]"));
  return Result<Target>(Target{*a->host.ip, a->port});
}

Result<std::vector<Target>> resolve(const Shared& g, const Host& host, uint16_t port) {
  if (host.is_ip()) return std::vector<Target>{{*host.ip, port}};
  if (auto o = override_for(g, host, port)) {
    if (!*o) return fail(std::move(o->error()));
    return std::vector<Target>{**o};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.name.c_str(), nullptr, &hints, &res);
  if (rc != 0)
    return fail(Code::kUnavailable, "resolving " + host.name + ": " + ::gai_strerror(rc));
  std::vector<Target> out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      boost::asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &sin->sin_addr, 4);
      out.push_back({boost::asio::ip::address_v4(b), port});
    } else if (ai->ai_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      boost::asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &sin6->sin6_addr, 16);
      out.push_back({boost::asio::ip::address_v6(b), port});
    }
  }
  ::freeaddrinfo(res);
  if (out.empty()) return fail(Code::kUnavailable, "resolving " + host.name + ": no addresses");
  return out;
}

Result<UniqueFd> connect_to(const Target& t, std::chrono::milliseconds timeout, int cancel_fd) {
  sockaddr_storage ss{};
  socklen_t len;
  IpAddress a = t.addr;
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  if (a.is_v4()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(t.port);
    auto b = a.to_v4().to_bytes();
    std::memcpy(&sin->sin_addr, b.data(), 4);
    len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(t.port);
    auto b = a.to_v6().to_bytes();
    std::memcpy(&sin6->sin6_addr, b.data(), 16);
    len = sizeof(sockaddr_in6);
  }
  UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail_sys("socket");
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string what = endpoint_text(a, t.port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) return fail_sys("connect", what);
    pollfd p[2] = {{fd.get(), POLLOUT, 0}, {cancel_fd, POLLIN, 0}};
    int r;
    do {
      r = ::poll(p, 2, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return fail(Code::kTimeout, "connect " + what + ": timed out");
    if (p[1].revents) return fail(Code::kUnavailable, "connect " + what + ": sandbox gone");
    int err = 0;
    socklen_t el = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) return fail_sys("connect", what, err);
  }
  return fd;
}

}  // namespace

Result<void> check_resolves(const Shared& g, const Gateway::State& st, const Host& host,
                            uint16_t port) {
  std::string refused;
  for (auto& t : TRY(resolve(g, host, port))) {
    Decision d = st.sb.policy.check_address(t.addr);
    if (d.allowed) return {};
    refused += (refused.empty() ? "" : "; ") + d.reason;
  }
  return fail(Code::kPermissionDenied,
              host.name + " resolves only to refused addresses (" + refused + ")");
}

Result<Dialed> dial(const Shared& g, const Gateway::State& st, const Host& host, uint16_t port) {
  auto targets = TRY(resolve(g, host, port));
  std::string refused;
  std::optional<Error> last;
  bool any_allowed = false;
  for (auto& t : targets) {
    Decision d = st.sb.policy.check_address(t.addr);
    if (!d.allowed) {
      if (!refused.empty()) refused += "; ";
      refused += d.reason;
      continue;
    }
    any_allowed = true;
    auto fd = connect_to(t, g.options.connect_timeout, st.cancel.get());
    if (fd) return Dialed{std::move(*fd), endpoint_text(t.addr, t.port)};
    last = std::move(fd.error());
  }
  if (!any_allowed)
    return fail(Code::kPermissionDenied,
                host.name + " resolves only to refused addresses (" + refused + ")");
  return fail(std::move(*last).wrap("connecting to " + host.name));
}

TunnelBytes tunnel(Shared& g, Gateway::State& st, int a, int b) {
  TunnelBytes out;
  struct Dir {
    int from, to;
    std::string buf;  // allocated once; [off, len) is waiting to be sent
    size_t len = 0;
    size_t off = 0;
    bool eof = false, done = false;
    uint64_t* count;
    RateLimiter* limit;
  };
  Dir up{a, b, std::string(st.up.chunk(64 * 1024), '\0'), 0, 0, false, false, &out.up, &st.up};
  Dir down{b,         a,       std::string(st.down.chunk(64 * 1024), '\0'), 0, 0, false, false,
           &out.down, &st.down};
  auto idle = g.options.idle_timeout;
  for (;;) {
    if (up.done && down.done) break;
    pollfd p[5];
    int n = 0;
    int idx[4] = {-1, -1, -1, -1};
    for (Dir* d : {&up, &down}) {
      int k = d == &up ? 0 : 2;
      if (d->done) continue;
      if (d->off < d->len) {
        idx[k + 1] = n;
        p[n++] = {d->to, POLLOUT, 0};
      } else if (!d->eof) {
        idx[k] = n;
        p[n++] = {d->from, POLLIN, 0};
      }
    }
    p[n++] = {st.cancel.get(), POLLIN, 0};
    int r = ::poll(p, n, static_cast<int>(idle.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;            // idle timeout or poll failure
    if (p[n - 1].revents) break;  // sandbox detached
    bool failed = false;
    for (Dir* d : {&up, &down}) {
      int k = d == &up ? 0 : 2;
      if (idx[k] >= 0 && p[idx[k]].revents) {
        ssize_t got = ::recv(d->from, d->buf.data(), d->buf.size(), MSG_DONTWAIT);
        if (got > 0) {
          d->len = static_cast<size_t>(got);
          d->off = 0;
          *d->count += static_cast<uint64_t>(got);
          d->limit->take(static_cast<size_t>(got), st.cancel.get());
          // Try to send at once: usually the socket is writable, saving a poll round.
          ssize_t put = ::send(d->to, d->buf.data(), d->len, MSG_DONTWAIT | MSG_NOSIGNAL);
          if (put > 0) {
            d->off = static_cast<size_t>(put);
          } else if (put < 0 && errno != EAGAIN && errno != EINTR) {
            failed = true;
          }
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          d->len = d->off = 0;
          d->eof = true;
          d->done = true;
          ::shutdown(d->to, SHUT_WR);
          if (got < 0) failed = true;
        }
      }
      if (idx[k + 1] >= 0 && p[idx[k + 1]].revents) {
        ssize_t put =
            ::send(d->to, d->buf.data() + d->off, d->len - d->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (put > 0) {
          d->off += static_cast<size_t>(put);
        } else if (put < 0 && errno != EAGAIN && errno != EINTR) {
          failed = true;
        }
      }
    }
    if (failed) break;
  }
  g.bytes_up += out.up;
  g.bytes_down += out.down;
  return out;
}

}  // namespace space::egress
