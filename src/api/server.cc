// The API server's socket, accept loop and per-connection request loop (see server.h).
#include "api/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <thread>

#include "api/exchange.h"
#include "api/router.h"
#include "common/fd_stream.h"
#include "tls/tunnel.h"

namespace space::api {
namespace {

namespace http = boost::beast::http;
namespace fs = std::filesystem;

Result<sockaddr_un> unix_address(const fs::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& s = path.native();
  if (s.empty() || s.size() >= sizeof addr.sun_path) {
    return fail(Code::kInvalidArgument, "socket path \"" + s + "\" must be 1 to " +
                                            std::to_string(sizeof addr.sun_path - 1) +
                                            " bytes long; choose a shorter --socket");
  }
  std::memcpy(addr.sun_path, s.data(), s.size());
  return addr;
}

// Creates the missing directories above the socket, each mode 0700 (root-only).
Result<void> make_parent_dirs(const fs::path& dir) {
  if (dir.empty()) return {};
  fs::path partial;
  for (const auto& part : dir) {
    partial /= part;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return fail_sys("mkdir", "\"" + partial.native() + "\"");
    }
  }
  return {};
}

// An existing socket file is replaced only if nothing answers on it.
Result<void> remove_stale_socket(const fs::path& path, const sockaddr_un& addr) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return fail_sys("lstat", "\"" + path.native() + "\"");
  }
  if (!S_ISSOCK(st.st_mode)) {
    return fail(Code::kAlreadyExists, path.native() +
                                          " exists and is not a socket; remove it or choose "
                                          "another --socket");
  }
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe) return fail_sys("socket", "AF_UNIX");
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 ||
      errno == EAGAIN) {
    return fail(Code::kAlreadyExists, "another daemon is answering on " + path.native() +
                                          "; stop it first or pass a different --socket");
  }
  if (errno != ECONNREFUSED) return fail_sys("connect", "\"" + path.native() + "\"");
  spdlog::info("api: removing stale socket {}", path.native());
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return fail_sys("unlink", "\"" + path.native() + "\"");
  }
  return {};
}

// Writes a complete error response on a connection that has no Exchange (bad HTTP, limits).
void write_plain_error(FdStream& stream, Code code, const std::string& message) {
  http::response<http::string_body> res;
  res.version(11);
  res.result(static_cast<http::status>(http_status(code)));
  res.set(http::field::server, "spaced");
  res.set(http::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = json_text(error_body(Error(code, message))) + "\n";
  res.prepare_payload();
  stream.set_write_timeout(std::chrono::milliseconds(5000));
  boost::system::error_code ec;
  http::write(stream, res, ec);
}

// After answering a request whose body we did not read, keep reading (and discarding) for a
// moment before closing: closing with unread data could make the client's send fail before
// it reads our answer.
void linger_close(FdStream& stream) {
  stream.shutdown(SHUT_WR);
  stream.set_read_timeout(std::chrono::milliseconds(0));
  stream.set_read_deadline(FdStream::Clock::now() + std::chrono::seconds(2));
  char buf[64 * 1024];
  size_t total = 0;
  boost::system::error_code ec;
  while (!ec && total < (64u << 20)) {
    total += stream.read_some(boost::asio::buffer(buf), ec);
  }
}

// Only root and spaced's own user may use the Unix socket. Its mode (0600) says so already;
// this check also holds if someone loosens the mode or hands the socket to another process.
bool unix_peer_allowed(int fd, uid_t& uid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  uid = cred.uid;
  return cred.uid == 0 || cred.uid == ::geteuid();
}

}  // namespace

Result<ListenAddress> parse_listen_address(std::string_view text, bool with_tls) {
  const std::string quoted = "api_listen \"" + std::string(text.substr(0, 100)) + "\"";
  auto a = parse_host_port(text);
  if (!a)
    return fail(
        Code::kInvalidArgument,
        quoted + (with_tls ? ": expected ADDRESS:PORT, e.g. 0.0.0.0:7443, [::]:7443 or "
                             "127.0.0.1:7443"
                           : ": expected HOST:PORT with a loopback HOST, e.g. 127.0.0.1:7070 "
                             "or [::1]:7070"));
  if (!a->loopback && !with_tls)
    return fail(Code::kInvalidArgument,
                quoted +
                    " is not a loopback address: without TLS spaced serves plain HTTP only on "
                    "127.0.0.0/8 or [::1], so that API tokens never cross a network "
                    "unencrypted. To serve other hosts, add \"api_tls\": \"auto\" (spaced "
                    "makes its own CA) or \"api_tls\": {\"cert\": ..., \"key\": ...} to the "
                    "config (docs/api-auth.md, \"Remote access\")");
  if (!a->loopback) {
    unsigned char addr[16];
    if (::inet_pton(a->family, a->host.c_str(), addr) != 1)
      return fail(Code::kInvalidArgument,
                  quoted +
                      ": the host must be a numeric address (0.0.0.0 for every IPv4 "
                      "interface, [::] for every IPv6 one, or one interface's address), "
                      "not a name");
  }
  return std::move(*a);
}

Result<std::unique_ptr<ApiServer>> ApiServer::listen(const fs::path& socket_path,
                                                     daemon::SandboxService& service,
                                                     Options options) {
  // The TCP listener first: if it fails, there is no socket file to clean up.
  UniqueFd tcp_fd;
  uint16_t tcp_port = 0;
  if (!options.tcp_listen.empty()) {
    ListenAddress a = TRY(parse_listen_address(options.tcp_listen, options.tls != nullptr));
    std::tie(tcp_fd, tcp_port) = TRY(listen_tcp(a));
    spdlog::info("{}: listening on {}:{} ({}; every request needs an API token)", options.name,
                 a.family == AF_INET6 ? "[" + a.host + "]" : a.host, tcp_port,
                 options.tls ? "TLS, " + options.tls->describe() : std::string("TCP"));
  }
  if (socket_path.empty()) {
    if (!tcp_fd) return fail(Code::kInvalidArgument, options.name + ": no address to listen on");
    UniqueFd stop_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_fd) return fail(Error::sys("eventfd").wrap(options.name + ": listening"));
    std::unique_ptr<ApiServer> server(
        new ApiServer(socket_path, service, options, UniqueFd(), std::move(stop_fd), 0));
    server->tcp_fd_ = std::move(tcp_fd);
    server->tcp_port_ = tcp_port;
    return server;
  }
  const std::string where = "listening on " + socket_path.native();
  sockaddr_un addr = TRY_CTX(unix_address(socket_path), where);
  TRY_VOID_CTX(make_parent_dirs(socket_path.parent_path()), where);
  TRY_VOID_CTX(remove_stale_socket(socket_path, addr), where);

  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail(Error::sys("socket", "AF_UNIX").wrap(where));
  // umask so the socket is never, even briefly, connectable by other users; chmod after in
  // case the filesystem ignores it.
  mode_t old_mask = ::umask(0177);
  int rc = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  ::umask(old_mask);
  if (rc != 0) return fail(Error::sys("bind", "\"" + socket_path.native() + "\"", bind_errno));
  if (::chmod(socket_path.c_str(), 0600) != 0) {
    return fail(Error::sys("chmod", "\"" + socket_path.native() + "\" 0600").wrap(where));
  }
  if (::listen(fd.get(), 512) != 0) return fail(Error::sys("listen").wrap(where));
  struct stat st;
  if (::stat(socket_path.c_str(), &st) != 0) return fail(Error::sys("stat").wrap(where));
  UniqueFd stop_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd) return fail(Error::sys("eventfd").wrap(where));
  spdlog::info("api: listening on {}", socket_path.native());
  std::unique_ptr<ApiServer> server(
      new ApiServer(socket_path, service, options, std::move(fd), std::move(stop_fd), st.st_ino));
  server->tcp_fd_ = std::move(tcp_fd);
  server->tcp_port_ = tcp_port;
  return server;
}

ApiServer::ApiServer(fs::path socket_path, daemon::SandboxService& service, Options options,
                     UniqueFd listen_fd, UniqueFd stop_fd, ino_t socket_ino)
    : socket_path_(std::move(socket_path)),
      service_(service),
      options_(options),
      listen_fd_(std::move(listen_fd)),
      stop_fd_(std::move(stop_fd)),
      socket_ino_(socket_ino) {}

ApiServer::~ApiServer() {
  stop();
  wait_connections();
  struct stat st;
  if (!socket_path_.empty() && ::stat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_ino_ &&
      S_ISSOCK(st.st_mode)) {
    ::unlink(socket_path_.c_str());
  }
}

void ApiServer::stop() {
  uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof one);
}

void ApiServer::wait_connections() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return active_ == 0 && tls_threads_ == 0; });
}

void ApiServer::serve() {
  for (;;) {
    // A TCP slot of -1 is ignored by poll.
    pollfd fds[3] = {{stop_fd_.get(), POLLIN, 0},
                     {listen_fd_ ? listen_fd_.get() : -1, POLLIN, 0},
                     {tcp_fd_ ? tcp_fd_.get() : -1, POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("api: poll: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents != 0) accept_one(listen_fd_.get(), Transport::kUnix);
    if (fds[2].revents != 0) accept_one(tcp_fd_.get(), Transport::kTcp);
  }
  // Idle threads leave at once, serving ones when their connection ends (stop_fd cuts it).
  std::unique_lock lock(mu_);
  stopping_ = true;
  work_cv_.notify_all();
  idle_cv_.wait(lock, [&] { return active_ == 0 && threads_ == 0 && tls_threads_ == 0; });
}

void ApiServer::accept_one(int listen_fd, Transport transport) {
  UniqueFd conn(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!conn) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
      spdlog::warn("api: accept: {}; pausing accepts for 100 ms", std::strerror(errno));
      ::usleep(100'000);
    }
    return;  // EAGAIN, EINTR, ECONNABORTED: nothing to do
  }
  const bool with_tls = transport == Transport::kTcp && options_.tls;
  const bool tcp = transport == Transport::kTcp;
  if (tcp) {
    // A response goes out as a header, then body pieces (an exec's events, a stream's chunks):
    // with Nagle's algorithm each small write after the first waits for the client's delayed
    // ACK, ~40 ms per answer on Linux.
    int one = 1;
    (void)::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  {
    // Each transport's own budget: TCP clients never use up the Unix socket's.
    std::lock_guard lock(mu_);
    const size_t limit = tcp ? options_.max_tcp_connections : options_.max_connections;
    if ((tcp ? active_tcp_ : active_ - active_tcp_) >= limit) {
      if (with_tls) {
        metrics_.connection_rejected();  // closed: it expects a handshake, not a 503
      } else {
        reject(std::move(conn), limit);
      }
      return;
    }
    if (tcp) ++active_tcp_;  // counted from here: a TLS handshake holds a thread too
  }
  if (with_tls) {
    auto plain = start_tls(std::move(conn));
    if (!plain) {
      spdlog::warn("api: {}", plain.error().message());
      std::lock_guard lock(mu_);
      --active_tcp_;
      idle_cv_.notify_all();
      return;
    }
    conn = std::move(*plain);
    // With a client CA the handshake refuses every client without a cluster certificate.
    if (options_.tls->mutual()) transport = Transport::kMutualTls;
  }
  {
    std::lock_guard lock(mu_);
    ++active_;
    metrics_.connection_opened();
    if (idle_ > handoff_.size()) {  // a waiting thread takes it
      handoff_.push_back({std::move(conn), transport});
      work_cv_.notify_one();
      return;
    }
    ++threads_;
  }
  try {
    std::thread([this, transport, fd = std::move(conn)]() mutable {
      connection_thread(std::move(fd), transport);
    }).detach();
  } catch (const std::system_error& e) {
    spdlog::warn("api: cannot start a connection thread: {}", e.what());
    metrics_.connection_closed();
    std::lock_guard lock(mu_);
    --active_;
    if (tcp) --active_tcp_;
    --threads_;
    idle_cv_.notify_all();
  }
}

void ApiServer::connection_thread(UniqueFd fd, Transport transport) {
  for (;;) {
    serve_connection(std::move(fd), transport);
    metrics_.connection_closed();
    std::unique_lock lock(mu_);
    --active_;
    if (transport != Transport::kUnix) --active_tcp_;
    bool got = false;
    if (!stopping_ && idle_ < kMaxIdleThreads) {
      ++idle_;
      got = work_cv_.wait_for(lock, kIdleThreadLinger, [&] {
        return stopping_ || !handoff_.empty();
      }) && !handoff_.empty();
      --idle_;
    }
    if (got) {
      fd = std::move(handoff_.back().fd);
      transport = handoff_.back().transport;
      handoff_.pop_back();
      continue;
    }
    --threads_;
    idle_cv_.notify_all();  // under the lock: the server may be destroyed right after
    return;
  }
}

Result<UniqueFd> ApiServer::start_tls(UniqueFd tcp) {
  auto [relay_end, app_end] = TRY_CTX(tls::plaintext_pair(), "starting a TLS connection");
  std::string reload_error;
  std::shared_ptr<SSL_CTX> ctx = options_.tls->context(&reload_error);
  if (!reload_error.empty())
    spdlog::warn("api: reloading the TLS certificate failed; still serving the previous one: {}",
                 reload_error);
  // The real TCP peer, for the log (the plaintext side only sees a socketpair).
  std::string peer = "?";
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[INET6_ADDRSTRLEN] = "";
  if (::getpeername(tcp.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
      peer = std::string(host) + ":" + std::to_string(ntohs(sin->sin_port));
    } else if (ss.ss_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
      peer = "[" + std::string(host) + "]:" + std::to_string(ntohs(sin6->sin6_port));
    }
  }
  tls::TunnelOptions o;
  o.handshake_timeout = options_.tls_handshake_timeout;
  o.stall_timeout = options_.body_timeout;
  o.cancel_fd = stop_fd_.get();
  {
    std::lock_guard lock(mu_);
    ++tls_threads_;
  }
  try {
    std::thread([this, ctx = std::move(ctx), o, peer = std::move(peer), tcp = std::move(tcp),
                 relay_end = std::move(relay_end)]() mutable {
      auto r = tls::serve_tls(std::move(tcp), std::move(relay_end), ctx.get(), o);
      if (!r) spdlog::debug("api: TLS connection from {}: {}", peer, r.error().message());
      std::lock_guard lock(mu_);
      --tls_threads_;
      idle_cv_.notify_all();  // under the lock: the server may be destroyed right after
    }).detach();
  } catch (const std::system_error& e) {
    std::lock_guard lock(mu_);
    --tls_threads_;
    return fail(Code::kResourceExhausted,
                std::string("cannot start a TLS connection thread: ") + e.what());
  }
  return std::move(app_end);
}

void ApiServer::reject(UniqueFd fd, size_t limit) {
  metrics_.connection_rejected();
  std::string body = json_text(error_body(Error(Code::kUnavailable,
                                                "too many connections (" + std::to_string(limit) +
                                                    " open on this listener); retry later"))) +
                     "\n";
  std::string res =
      "HTTP/1.1 503 Service Unavailable\r\nServer: spaced\r\n"
      "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  // Best effort and non-blocking: the accept loop must not wait on one client.
  (void)!::send(fd.get(), res.data(), res.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void ApiServer::serve_connection(UniqueFd fd, Transport transport) {
  uid_t peer_uid = 0;
  bool peer_allowed = transport != Transport::kUnix || unix_peer_allowed(fd.get(), peer_uid);
  FdStream stream(std::move(fd));
  stream.set_stop_fd(stop_fd_.get());
  // Bounded, as the egress gateway's: a request head is bounded by header_limit, but a chunk
  // line (chunk size, extensions) or a trailer field must be seen whole before the parser can
  // act, and without a bound one such line of 100 MiB is 100 MiB of the daemon's memory.
  // Beyond the bound, reads fail with buffer_overflow: 400 and close.
  boost::beast::flat_buffer buffer(
      std::max<size_t>(options_.buffer_limit, 2 * size_t{options_.header_limit}));
  ApiContext ctx{service_,           metrics_, transport,   options_.tokens,
                 &options_.profiles, nullptr,  &token_load_};
  for (bool first = true;; first = false) {
    RequestParser parser;
    parser.header_limit(options_.header_limit);
    // Handlers enforce their own limits. (Not boost::none: Boost 1.74 compares a Content-Length
    // against an empty optional as "greater", refusing every body.)
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    stream.set_read_timeout(std::chrono::milliseconds(0));
    // A TCP client proves nothing before its first request (which needs a token): it gets
    // first_request_timeout to send it, not idle_timeout.
    const bool tcp_first = first && transport != Transport::kUnix;
    stream.set_read_deadline(FdStream::Clock::now() +
                             (tcp_first
                                  ? std::min(options_.first_request_timeout, options_.idle_timeout)
                                  : options_.idle_timeout));
    boost::system::error_code ec;
    http::read_header(stream, buffer, parser, ec);
    if (ec) {
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        write_plain_error(stream, Code::kPayloadTooLarge,
                          "request header is larger than " +
                              std::to_string(options_.header_limit >> 10) + " KiB");
        metrics_.request_done("unmatched", 413);
      } else if (ec != http::error::end_of_stream && ec != http::error::partial_message &&
                 ec != boost::asio::error::eof && ec != boost::asio::error::timed_out &&
                 ec != boost::asio::error::operation_aborted &&
                 ec.category() == make_error_code(http::error::bad_target).category()) {
        write_plain_error(stream, Code::kInvalidArgument,
                          "malformed HTTP request (" + ec.message() + "); speak HTTP/1.1");
        metrics_.request_done("unmatched", 400);
      }
      return;  // idle timeout, client gone, stop(), or an error answered above
    }

    if (!peer_allowed) {
      // Answered after the request header, so the client reads a proper response.
      spdlog::warn("api: refused a request from uid {} on the Unix socket", peer_uid);
      write_plain_error(stream, Code::kPermissionDenied,
                        "uid " + std::to_string(peer_uid) +
                            " may not use this socket: only root and spaced's own user may; "
                            "other users need an API token on the TCP listener (api_listen)");
      metrics_.request_done("unmatched", 403);
      linger_close(stream);
      return;
    }

    // Ambiguous framing (RFC 9112 §6.1, §6.3): a Transfer-Encoding other than exactly
    // "chunked", or one beside a Content-Length, would let bytes after this request be read as
    // another one by a proxy in front of us. Refuse and close.
    {
      const auto& h = parser.get();
      auto te = h.find(http::field::transfer_encoding);
      bool has_cl = h.find(http::field::content_length) != h.end();
      if (te != h.end()) {
        std::string v(te->value());
        for (auto& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (v != "chunked" || has_cl || h.count(http::field::transfer_encoding) > 1) {
          write_plain_error(stream, Code::kInvalidArgument,
                            "ambiguous message framing (Transfer-Encoding must be exactly "
                            "\"chunked\" and may not come with Content-Length)");
          metrics_.request_done("unmatched", 400);
          return;
        }
      }
    }
    auto raw_target = parser.get().target();
    auto target = parse_target(std::string_view(raw_target.data(), raw_target.size()));
    Exchange ex(stream, buffer, parser, target ? std::move(*target) : Target{},
                options_.body_timeout);
    if (!target) {
      (void)ex.respond_error(target.error());
      metrics_.request_done("unmatched", ex.status());
    } else {
      if (options_.dispatch)
        options_.dispatch(ex, ctx);
      else
        dispatch(ex, ctx);
    }
    if (!ex.keep_alive()) {
      if (ex.responded() && !ex.body_done()) linger_close(stream);
      return;
    }
  }
}

}  // namespace space::api
