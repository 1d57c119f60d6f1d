// space-https: the CLI's https client, a helper executable so that `space` itself links no
// OpenSSL (libcrypto's relocations cost every CLI start ~1.7 ms, the Unix-socket default
// included). The CLI (src/cli/client.cc) runs it for SPACE_API=https://HOST:PORT as
//   space-https URL      with fd 3 = one end of a socketpair, SPACE_CA inherited
// It connects, does the TLS handshake (verifying the daemon's certificate for HOST against
// $SPACE_CA or the system's trust store), writes one status line to fd 3, "ok" or
// "error CODE MESSAGE" (CODE a space::Code name, MESSAGE on one line, with what to set), then
// relays plaintext between fd 3 and the TLS connection until both directions have ended. It
// exits as soon as the CLI's end goes away.
#include <fcntl.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "cli/tcp_url.h"
#include "common/error.h"
#include "common/fd.h"
#include "common/relay.h"
#include "tls/tunnel.h"

namespace space::cli {
namespace {

constexpr int kCliFd = 3;

// The client TLS context for $SPACE_CA (or the system's trust store), made once per process.
Result<std::shared_ptr<SSL_CTX>> client_context() {
  static std::mutex mu;
  static std::shared_ptr<SSL_CTX> ctx;
  std::lock_guard lock(mu);
  if (!ctx) {
    // Not the system's openssl.cnf: the client's TLS settings are all set in code
    // (tls::client_context), the same on every host.
    OPENSSL_init_ssl(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr);
    const char* ca = std::getenv("SPACE_CA");
    ctx = TRY(tls::client_context(ca != nullptr ? ca : ""));
  }
  return ctx;
}

// The TLS tunnel to an https:// daemon; errors say what to set.
Result<std::pair<std::unique_ptr<tls::ClientTunnel>, UniqueFd>> open_tls(const std::string& url,
                                                                         const TcpUrl& u,
                                                                         UniqueFd tcp,
                                                                         int stop_fd) {
  const char* ca = std::getenv("SPACE_CA");
  const bool ca_set = ca != nullptr && *ca != '\0';
  auto ctx = client_context();
  if (!ctx) {
    return fail(std::move(ctx.error())
                    .wrap("SPACE_CA: set it to the path of the CA certificate (PEM) that signed "
                          "the daemon's certificate, e.g. a copy of the daemon host's "
                          "/var/lib/space/tls/ca.pem"));
  }
  tls::TunnelOptions o;
  o.handshake_timeout = std::chrono::seconds(30);
  o.stall_timeout = std::chrono::hours(1);  // the daemon bounds its own side
  o.cancel_fd = stop_fd;
  auto t = tls::ClientTunnel::start(std::move(tcp), *ctx, u.host, o);
  if (!t) {
    Error e = std::move(t.error());
    if (e.code() != Code::kPermissionDenied)
      return fail(e.wrap("connecting to " + url + " (SPACE_API)"));
    std::string hint;
    if (e.message().find("not valid for") != std::string::npos) {
      hint = "; use a name the certificate holds in SPACE_API, or add \"" + u.host +
             "\" to api_tls.names in spaced's config (its own CA) and restart it";
    } else if (ca_set) {
      hint = std::string("; SPACE_CA=") + ca +
             " does not hold the CA that signed it: copy the daemon host's "
             "<state_dir>/tls/ca.pem (default /var/lib/space/tls/ca.pem) again";
    } else {
      hint =
          "; set SPACE_CA to a copy of the daemon host's <state_dir>/tls/ca.pem (default "
          "/var/lib/space/tls/ca.pem) when spaced makes its own CA (api_tls \"auto\")";
    }
    return fail(Code::kPermissionDenied,
                "connecting to " + url + " (SPACE_API): " + e.message() + hint);
  }
  return t;
}

bool write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Whether the CLI closed its end entirely (not just shut down writing, as a port forward does).
bool cli_gone() {
  pollfd p{kCliFd, 0, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)) != 0;
}

int run(const std::string& url) {
  // The CLI sends nothing before the status line: until then its end turning readable means it
  // went away (Ctrl-C, killed), which ends this process at once, mid-connect or mid-handshake.
  UniqueFd watch_stop(::eventfd(0, EFD_CLOEXEC));
  if (!watch_stop) return 1;
  std::thread watcher([stop = watch_stop.get()] {
    pollfd fds[2] = {{kCliFd, POLLIN, 0}, {stop, POLLIN, 0}};
    while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
    }
    if (fds[1].revents == 0) ::_exit(1);
  });
  auto stop_watching = [&] {
    uint64_t one = 1;
    (void)!::write(watch_stop.get(), &one, sizeof one);
    watcher.join();
  };
  auto tunnel = [&]() -> Result<std::pair<std::unique_ptr<tls::ClientTunnel>, UniqueFd>> {
    TcpUrl u = TRY(parse_url(url));
    if (!u.https) return fail(Code::kInvalidArgument, "space-https: " + url + " is not https://");
    UniqueFd tcp = TRY(connect_tcp(url, u));
    return open_tls(url, u, std::move(tcp), -1);
  }();
  stop_watching();
  if (!tunnel) {
    std::string message = tunnel.error().message();
    for (char& c : message) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    (void)write_all(
        kCliFd, "error " + std::string(code_name(tunnel.error().code())) + " " + message + "\n");
    return 1;
  }
  if (!write_all(kCliFd, "ok\n")) return 1;
  auto& [t, plain] = *tunnel;
  RelayOptions o;
  o.still_allowed = []() -> Result<void> {
    if (cli_gone()) return fail(Code::kUnavailable, "the CLI went away");
    return {};
  };
  auto r = relay(plain.get(), kCliFd, std::move(o));
  plain.reset();  // lets the tunnel send close_notify before it goes
  ::close(kCliFd);
  t.reset();
  return r ? 0 : 1;
}

}  // namespace
}  // namespace space::cli

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  if (argc != 2 || ::fcntl(3, F_GETFD) < 0) {
    std::fprintf(stderr,
                 "usage: space-https https://HOST:PORT (with fd 3 connected; the space CLI runs "
                 "it for SPACE_API=https://...)\n");
    return 2;
  }
  return space::cli::run(argv[1]);
}
