// The REST API server of spaced: HTTP/1.1 over a Unix domain socket (and optionally a TCP
// port: loopback in plain HTTP, any address with TLS), a thread per connection. A thread whose
// connection ended waits a while for the next one (at most kMaxIdleThreads wait), so a client that
// opens a connection per request does not pay a thread's creation and teardown each time.
//
//   auto server = TRY(api::ApiServer::listen("/run/space/space.sock", service));
//   std::thread t([&] { server->serve(); });   // or serve() on the main thread
//   ...                                        // on SIGTERM: server->stop(); t.join();
//
// listen() creates the socket file mode 0600 (its parent directory 0700 if missing), replacing
// a stale socket only if nothing answers on it. Each transport has its own connection budget
// (max_connections on the Unix socket, max_tcp_connections on the TCP listener), so that no
// number of TCP clients, authenticated or not, can keep root out of the Unix socket; a
// connection beyond its transport's budget gets a 503. A request header must arrive within
// idle_timeout of the previous request, and on TCP the first one within first_request_timeout
// (so neither a slow-loris client nor a pile of silent connections can pin threads), a body may not
// stall for longer than body_timeout (except exec's stdin, which is interactive), JSON bodies are
// limited to 1 MiB, headers to 16 KiB, and what a connection buffers besides the body bytes being
// moved (a chunk-size line with its extensions, a trailer field) to buffer_limit: a longer line is
// a 400 and the connection is closed, so no single "line" of a request can grow the daemon's
// memory.
//
// Who may call (docs/api-auth.md): on the Unix socket, only peers whose uid (SO_PEERCRED) is
// root's or spaced's own are served at all (others get a 403); without an Authorization header
// they are the root operator. On the TCP listener every request needs an API token.
//
// With TLS (Options::tls) each accepted TCP connection gets a terminator thread of its own
// (tls/tunnel.h): it completes the handshake within tls_handshake_timeout and relays plaintext
// to a socketpair whose other end is served like any connection, so exec's two threads and the
// ports' raw relay never share an SSL object. A TLS connection counts against
// max_tcp_connections from its accept on; over the limit it is closed (a plaintext 503 would mean
// nothing to it).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "api/auth.h"
#include "api/metrics.h"
#include "api/router.h"
#include "api/token_load.h"
#include "common/error.h"
#include "common/fd.h"
#include "common/tcp_listen.h"
#include "daemon/service.h"
#include "daemon/tokens.h"
#include "tls/api_certs.h"

namespace space::api {

using space::ListenAddress;
// "127.0.0.1:7070", "[::1]:7070", "localhost:7070" (= 127.0.0.1). Without `with_tls`, anything that
// is not a loopback address is refused with a message saying to add api_tls: bearer tokens
// must not cross a network unencrypted. With it, any numeric address ("0.0.0.0:7443",
// "[::]:7443", "10.0.0.5:7443"); a host name is refused (it would bind to nothing in
// particular).
Result<ListenAddress> parse_listen_address(std::string_view text, bool with_tls = false);

class ApiServer {
 public:
  struct Options {
    size_t max_connections = 512;      // on the Unix socket
    size_t max_tcp_connections = 256;  // on the TCP listener (tcp_listen)
    std::chrono::milliseconds idle_timeout{60'000};
    // A TCP connection's first request header must arrive within this (it proves nothing
    // before: every TCP request needs a token).
    std::chrono::milliseconds first_request_timeout{10'000};
    std::chrono::milliseconds body_timeout{60'000};
    uint32_t header_limit = 16 * 1024;
    // The most a connection's read buffer holds (at least twice header_limit is used).
    size_t buffer_limit = 64 * 1024;
    // Also listen on this TCP address (see parse_listen_address); "" = Unix socket only.
    std::string tcp_listen;
    // Serve TLS on tcp_listen with these credentials (null: plain HTTP, loopback only).
    std::shared_ptr<tls::ServerCredentials> tls;
    std::chrono::milliseconds tls_handshake_timeout{10'000};
    // API tokens; null: no tokens, only the root operator on the Unix socket may call.
    daemon::TokenStore* tokens = nullptr;
    // The profiles tokens may be scoped to (the daemon's configured profiles).
    std::set<std::string> profiles;
    // Requests one API token may have in progress at once, streams included (api/token_load.h).
    size_t max_requests_per_token = 64;
    // What answers each request: SPACE's REST API (api::dispatch) unless set. A second front
    // door on the same service (E2B's protocol, src/e2b) sets its own and listens on TCP only.
    std::function<void(Exchange&, ApiContext&)> dispatch;
    // For logs: "api", "e2b".
    std::string name = "api";
  };

  // Binds and listens (clients may connect from here on; they are served once serve() runs).
  // An empty socket_path: no Unix socket, the TCP listener only (tcp_listen must be set).
  static Result<std::unique_ptr<ApiServer>> listen(const std::filesystem::path& socket_path,
                                                   daemon::SandboxService& service,
                                                   Options options);
  static Result<std::unique_ptr<ApiServer>> listen(const std::filesystem::path& socket_path,
                                                   daemon::SandboxService& service) {
    return listen(socket_path, service, Options{});
  }

  // Stops, waits for the connections still open, and removes the socket file (if it is still
  // ours). serve() must have returned (or never run).
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Accepts and serves connections until stop(); returns after every connection has ended.
  void serve();
  // Makes serve() return: idempotent, callable from any thread and async-signal-safe. Open
  // connections are cut, running execs streamed to them are killed.
  void stop();

  const std::filesystem::path& socket_path() const { return socket_path_; }
  // The TCP listener's port (useful with port 0), 0 without one.
  uint16_t tcp_port() const { return tcp_port_; }
  const ApiMetrics& metrics() const { return metrics_; }

 private:
  ApiServer(std::filesystem::path socket_path, daemon::SandboxService& service, Options options,
            UniqueFd listen_fd, UniqueFd stop_fd, ino_t socket_ino);
  void serve_connection(UniqueFd fd, Transport transport);
  void accept_one(int listen_fd, Transport transport);
  void reject(UniqueFd fd, size_t limit);  // a 503 naming the listener's budget
  // Starts the TLS terminator of an accepted TCP connection; the plaintext end to serve.
  Result<UniqueFd> start_tls(UniqueFd tcp);
  void wait_connections();
  // A connection thread: serves `fd`, then, while fewer than kMaxIdleThreads wait, waits up to
  // kIdleThreadLinger for another handed over by accept_one.
  void connection_thread(UniqueFd fd, Transport transport);

  static constexpr size_t kMaxIdleThreads = 8;
  static constexpr std::chrono::seconds kIdleThreadLinger{10};
  struct Handoff {
    UniqueFd fd;
    Transport transport;
  };

  std::filesystem::path socket_path_;
  daemon::SandboxService& service_;
  Options options_;
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // eventfd: readable once stop() was called
  ino_t socket_ino_;
  UniqueFd tcp_fd_;  // the TCP listener, if any
  uint16_t tcp_port_ = 0;
  ApiMetrics metrics_;
  TokenLoad token_load_{options_.max_requests_per_token};

  std::mutex mu_;
  std::condition_variable idle_cv_;  // active_, threads_ or tls_threads_ went down
  std::condition_variable work_cv_;  // handoff_ got a connection, or stopping_
  size_t active_ = 0;                // connections being served; guarded by mu_
  size_t active_tcp_ = 0;            // of which TCP (with TLS: from the accept on); mu_
  size_t threads_ = 0;               // connection threads alive (serving or idle); guarded by mu_
  size_t idle_ = 0;                  // of those, waiting for a connection; guarded by mu_
  size_t tls_threads_ = 0;           // TLS terminators running; guarded by mu_
  std::vector<Handoff> handoff_;     // accepted, for an idle thread to take; guarded by mu_
  bool stopping_ = false;            // guarded by mu_
};

}  // namespace space::api
