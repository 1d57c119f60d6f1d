// The gateway's lifecycle: binding each sandbox's listeners inside its network namespace, one
// epoll thread that accepts connections (each then served on its own thread by proxy.cc) and
// answers the DNS stub's queries, and detaching (listeners closed, connections cut).
#include "egress/gateway.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cstring>

#include "egress/dns.h"
#include "egress/internal.h"
#include "proto/guest_boot.h"

namespace space::egress {

// A microVM guest's side of the stub's address must be this one (its agent listens there).
static_assert(proto::kDnsStubIp == std::string_view(kDnsStubAddress) &&
              proto::kDnsStubPort == kDnsStubPort);

std::vector<std::string> sandbox_env(const std::vector<Grant>& grants, const SecretStore& secrets) {
  std::vector<std::string> env;
  for (const char* k :
       {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"})
    env.push_back(std::string(k) + "=" + kProxyUrl);
  for (const char* k : {"NO_PROXY", "no_proxy"})
    env.push_back(std::string(k) + "=localhost,127.0.0.1,::1");
  for (const char* k : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                        "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT", "NPM_CONFIG_CAFILE"})
    env.push_back(std::string(k) + "=" + kCaBundlePath);
  for (auto& g : grants) {
    const SecretDef* def = secrets.find(g.name);
    env.push_back((def && !def->env_var.empty() ? def->env_var : g.name) + "=" + g.placeholder);
  }
  return env;
}

struct Gateway::Impl {
  Shared shared;
  UniqueFd epoll;
  UniqueFd stop;  // eventfd
  std::thread poller;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<State>> sandboxes;  // guarded by mu
  struct Listener {
    std::weak_ptr<State> st;
    ListenerKind kind;
  };
  std::map<int, Listener> listeners;  // guarded by mu
  std::condition_variable idle;       // connection threads ended (with mu)
  bool stopped = false;
};

Gateway::Gateway(Options options, std::shared_ptr<SecretStore> secrets)
    : impl_(std::make_unique<Impl>()) {
  impl_->shared.options = std::move(options);
  impl_->shared.secrets = std::move(secrets);
}

Result<std::unique_ptr<Gateway>> Gateway::start(Options options,
                                                std::shared_ptr<SecretStore> secrets) {
  if (!secrets) secrets = std::make_shared<SecretStore>(std::map<std::string, SecretDef>{});
  // The extra CAs are loaded now (a bad file is a start-up error); the system trust store is
  // added on the first upstream TLS connection (Shared::upstream()).
  auto ctx = TRY_CTX(upstream_context(options.upstream_ca_files, options.upstream_ca_pems, false),
                     "egress gateway");
  std::unique_ptr<Gateway> g(new Gateway(std::move(options), std::move(secrets)));
  g->impl_->shared.upstream_ctx = std::move(ctx);
  g->impl_->epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!g->impl_->epoll) return fail_sys("epoll_create1");
  g->impl_->stop.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!g->impl_->stop) return fail_sys("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = g->impl_->stop.get();
  if (::epoll_ctl(g->impl_->epoll.get(), EPOLL_CTL_ADD, ev.data.fd, &ev) != 0)
    return fail_sys("epoll_ctl");
  g->impl_->poller = std::thread([gw = g.get()] { gw->poll_loop(); });
  return g;
}

Gateway::~Gateway() { stop(); }

void Gateway::stop() {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (auto& [id, st] : impl_->sandboxes) ids.push_back(id);
  }
  uint64_t one = 1;
  (void)::write(impl_->stop.get(), &one, sizeof one);
  if (impl_->poller.joinable()) impl_->poller.join();
  for (auto& id : ids) detach(id);
  std::unique_lock lock(impl_->mu);
  impl_->idle.wait(lock, [&] { return impl_->shared.active.load() == 0; });
}

namespace {

// Creates the listening sockets inside the namespace, on a scratch thread that joins it:
// setns(CLONE_NEWNET) only changes the calling thread, and sockets stay in the namespace they
// were created in after the thread is gone. The namespace is owned by the host's user
// namespace, so binding the privileged ports 80, 443 and 53 there needs spaced's own
// CAP_NET_BIND_SERVICE, which the sandbox (root only in its own user namespace) lacks: it can
// neither bind them first nor take them over.
Result<std::vector<std::pair<UniqueFd, ListenerKind>>> bind_listeners(int netns_fd) {
  Result<std::vector<std::pair<UniqueFd, ListenerKind>>> out =
      fail(Code::kInternal, "scratch thread did not run");
  std::thread t([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      out = fail_sys("setns", "CLONE_NEWNET");
      return;
    }
    std::vector<std::pair<UniqueFd, ListenerKind>> fds;
    struct Spec {
      const char* addr;
      uint16_t port;
      int type;
      ListenerKind kind;
    };
    for (Spec s :
         {Spec{"127.0.0.1", kProxyPort, SOCK_STREAM, ListenerKind::kProxy},
          Spec{"127.0.0.1", kTransparentTlsPort, SOCK_STREAM, ListenerKind::kTransparentTls},
          Spec{"127.0.0.1", kTransparentHttpPort, SOCK_STREAM, ListenerKind::kTransparentHttp},
          Spec{kDnsStubAddress, kDnsStubPort, SOCK_DGRAM, ListenerKind::kDns}}) {
      UniqueFd fd(::socket(AF_INET, s.type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      std::string what = std::string(s.addr) + ":" + std::to_string(s.port);
      if (!fd) {
        out = fail_sys("socket", what);
        return;
      }
      int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in sin{};
      sin.sin_family = AF_INET;
      sin.sin_port = htons(s.port);
      ::inet_pton(AF_INET, s.addr, &sin.sin_addr);
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
        out = fail_sys("bind", what);
        return;
      }
      if (s.type == SOCK_STREAM && ::listen(fd.get(), 128) != 0) {
        out = fail_sys("listen", what);
        return;
      }
      fds.emplace_back(std::move(fd), s.kind);
    }
    out = std::move(fds);
  });
  t.join();
  return out;
}

}  // namespace

Result<BoundListeners> Gateway::bind(int netns_fd) {
  auto fds = TRY(bind_listeners(netns_fd));
  BoundListeners out;
  for (auto& [fd, kind] : fds) out.fds.emplace_back(std::move(fd), static_cast<int>(kind));
  return out;
}

Result<void> Gateway::attach(SandboxEgress sandbox, int netns_fd) {
  std::string id = sandbox.id;
  auto bound = TRY_CTX(bind(netns_fd),
                       "binding the egress gateway's listeners in " + id + "'s network namespace");
  return attach(std::move(sandbox), std::move(bound));
}

Result<void> Gateway::attach(SandboxEgress sandbox, BoundListeners bound) {
  std::string id = sandbox.id;
  if (!sandbox.ca) return fail(Code::kInternal, "egress for " + id + ": no CA");
  if (bound.empty()) return fail(Code::kInternal, "egress for " + id + ": no listeners");
  auto st = std::make_shared<State>(std::move(sandbox));
  st->cancel.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!st->cancel) return fail_sys("eventfd");
  std::lock_guard lock(impl_->mu);
  if (impl_->stopped) return fail(Code::kUnavailable, "the egress gateway is stopping");
  if (impl_->sandboxes.count(id)) return fail(Code::kAlreadyExists, id + " is already attached");
  for (auto& [fd, kind_int] : bound.fds) {
    auto kind = static_cast<ListenerKind>(kind_int);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd.get();
    if (::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) {
      auto err = Error::sys("epoll_ctl", "ADD");
      for (auto& l : st->listeners) {
        ::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_DEL, l.get(), nullptr);
        impl_->listeners.erase(l.get());
      }
      return fail(std::move(err));
    }
    impl_->listeners[fd.get()] = {st, kind};
    st->listeners.push_back(std::move(fd));
  }
  impl_->sandboxes[id] = st;
  return {};
}

void Gateway::detach(const std::string& id) {
  std::shared_ptr<State> st;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->sandboxes.find(id);
    if (it == impl_->sandboxes.end()) return;
    st = it->second;
    impl_->sandboxes.erase(it);
    for (auto& l : st->listeners) {
      ::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_DEL, l.get(), nullptr);
      impl_->listeners.erase(l.get());
    }
    // Closing under the lock: the poll thread looks fds up under it too, so it never uses a
    // number that was closed and reused.
    st->listeners.clear();
  }
  st->detached = true;
  uint64_t one = 1;
  (void)::write(st->cancel.get(), &one, sizeof one);
}

Gateway::Stats Gateway::stats() const {
  Stats s;
  auto& g = impl_->shared;
  s.connections = g.connections;
  s.requests = g.requests;
  s.denied = g.denied;
  s.bytes_up = g.bytes_up;
  s.bytes_down = g.bytes_down;
  s.credential_uses = g.credential_uses;
  s.dns_queries = g.dns_queries;
  s.active_connections = g.active;
  std::lock_guard lock(impl_->mu);
  s.sandboxes = impl_->sandboxes.size();
  return s;
}

void Gateway::poll_loop() {
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(impl_->epoll.get(), events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("egress: epoll_wait: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == impl_->stop.get()) return;
      on_readable(events[i].data.fd);
    }
  }
}

namespace {

// An egress.denied event from the listener thread, within the sandbox's audit rate (see
// State::listener_audit_allowed); the count left out since the last one rides along.
void audit_listener_refusal(Shared& g, Gateway::State& st, nlohmann::json ev) {
  uint64_t suppressed = 0;
  if (!st.listener_audit_allowed(&suppressed)) return;
  if (suppressed) ev["suppressed"] = suppressed;
  g.audit(st, "egress.denied", std::move(ev));
}

// The DNS stub: every well-formed name resolves to the transparent listeners (127.0.0.1, A
// only), allowed or not, so that a client ignoring the proxy variables connects and gets the
// gateway's clear refusal (403 with the reason, over TLS or plain HTTP) instead of a lookup
// error. Names the policy denies are audited here too (the connection that follows is refused
// and audited again). Malformed names and address literals get NXDOMAIN. Nothing is ever sent
// to another resolver, so a query carries nothing out.
std::string answer_dns(Shared& g, Gateway::State& st, std::string_view datagram) {
  uint16_t id = 0;
  auto q = dns::parse_query(datagram, &id);
  if (!q) return dns::build_error(id, dns::Rcode::kFormErr);
  ++g.dns_queries;
  if (q->qclass != 1) return dns::build_response(*q, dns::Rcode::kRefused);
  static const std::array<uint8_t, 4> kLoopback = {127, 0, 0, 1};
  auto loopback = [&] {
    return dns::build_response(*q, dns::Rcode::kNoError,
                               q->qtype == uint16_t(dns::Type::kA)
                                   ? std::vector<std::array<uint8_t, 4>>{kLoopback}
                                   : std::vector<std::array<uint8_t, 4>>{});  // no AAAA etc.
  };
  // The sandbox's own host name (its id: sb_..., not a valid DNS name) is looked up by many
  // programs (git, Chromium, Python's getfqdn); it is this machine, as localhost is.
  if (q->name == "localhost" || q->name == st.sb.id) return loopback();
  auto host = normalize_host(q->name);
  if (!host || host->is_ip()) {
    ++g.denied;
    audit_listener_refusal(g, st,
                           {{"via", "dns"},
                            {"host", q->name.substr(0, 256)},
                            {"reason", host ? std::string("address literals are not names")
                                            : host.error().message()}});
    return dns::build_response(*q, dns::Rcode::kNxDomain);
  }
  bool allowed = false;
  std::string reason;
  for (uint16_t port : st.sb.policy.ports()) {
    Decision d = st.sb.policy.check_host(*host, port);
    if (d.allowed) {
      allowed = true;
      break;
    }
    if (reason.empty()) reason = d.reason;
  }
  if (!allowed) {
    if (reason.empty()) reason = "no port of " + host->name + " is allowed";
    ++g.denied;
    audit_listener_refusal(g, st,
                           {{"via", "dns"},
                            {"host", q->name.substr(0, 256)},
                            {"reason", reason + " (answered 127.0.0.1: connections to it are "
                                                "refused by the gateway with this reason)"}});
  }
  return loopback();
}

}  // namespace

void Gateway::on_readable(int fd) {
  std::shared_ptr<State> st;
  ListenerKind kind;
  UniqueFd conn;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->listeners.find(fd);
    if (it == impl_->listeners.end()) return;
    st = it->second.st.lock();
    kind = it->second.kind;
    if (!st) return;
    if (kind == ListenerKind::kDns) {
      // Answered inline: no I/O beyond this socket, nothing that blocks.
      for (int i = 0; i < 16; ++i) {
        char buf[1500];
        sockaddr_storage from{};
        socklen_t flen = sizeof from;
        ssize_t n = ::recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT,
                               reinterpret_cast<sockaddr*>(&from), &flen);
        if (n < 0) break;
        std::string out = answer_dns(impl_->shared, *st, std::string_view(buf, size_t(n)));
        ::sendto(fd, out.data(), out.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from),
                 flen);
      }
      return;
    }
    conn.reset(::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn) return;
  }
  // Responses go out as header then body: without TCP_NODELAY, Nagle plus the client's delayed
  // ACK add ~40 ms to every response (measured by bench/egress.py).
  int one = 1;
  ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (st->active.load() >= st->sb.policy.max_connections()) {
    ++impl_->shared.denied;
    audit_listener_refusal(impl_->shared, *st,
                           {{"via", "accept"},
                            {"reason", "connection limit reached (" +
                                           std::to_string(st->sb.policy.max_connections()) + ")"}});
    if (kind != ListenerKind::kTransparentTls) {
      static const char kBusy[] =
          "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)::send(conn.get(), kBusy, sizeof kBusy - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    return;
  }
  ++st->active;
  ++impl_->shared.active;
  ++impl_->shared.connections;
  std::thread([this, st, kind, c = std::move(conn)]() mutable {
    serve_connection(impl_->shared, st, std::move(c), kind);
    --st->active;
    std::lock_guard lock(impl_->mu);
    --impl_->shared.active;
    impl_->idle.notify_all();
  }).detach();
}

}  // namespace space::egress
