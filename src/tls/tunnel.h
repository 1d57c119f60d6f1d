// TLS termination as a byte relay. OpenSSL's SSL object must not be used by two threads at
// once, but the code that speaks HTTP over a connection does exactly that (exec reads stdin on
// one thread while another writes output; ports relay raw bytes both ways). So TLS is ended
// next to that code instead of inside it: one thread owns the SSL connection (a non-blocking TCP
// socket) and moves plaintext between it and one end of a socketpair; the other end is what the
// HTTP code reads and writes, exactly as it would a plain TCP connection.
//
// Ends are carried over: end of input from the plaintext side becomes close_notify (the TLS
// peer may keep sending, as HTTP upgrades do), close_notify or end of input from the TLS peer
// becomes shutdown(SHUT_WR) of the plaintext side. Bounded: the handshake has a deadline,
// pending output that makes no progress for stall_timeout ends the relay, and a cancel eventfd
// ends it at once.
//
// Server side (spaced's api_listen with api_tls):
//   UniqueFd plain = TRY(tls::serve_tls(std::move(tcp), ctx, options));  // starts nothing
// Client side (the CLI's https://): see ClientTunnel.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/fd.h"
#include "tls/x509.h"

namespace space::tls {

struct TunnelOptions {
  // The TLS handshake must complete within this.
  std::chrono::milliseconds handshake_timeout{10'000};
  // Output waiting to be sent (either way) that makes no progress for this long ends the relay.
  std::chrono::milliseconds stall_timeout{60'000};
  // An eventfd (-1 = none): once readable, the handshake and the relay end.
  int cancel_fd = -1;
};

// A connected socketpair (SOCK_STREAM, close-on-exec): {the relay's end, the application's end}.
[[nodiscard]] Result<std::pair<UniqueFd, UniqueFd>> plaintext_pair();

// Server side, on the calling thread: the handshake on `tcp` with `ctx`, then the relay between
// it and `plain` until both directions have ended, an error, a stall or the cancel fd. A client
// that speaks plain HTTP to the port gets a short HTTP 400 saying to use https://. Errors say
// what went wrong (for the log); the fds are closed on return.
[[nodiscard]] Result<void> serve_tls(UniqueFd tcp, UniqueFd plain, SSL_CTX* ctx,
                                     const TunnelOptions& options);

// A client context: TLS 1.2+, peer verification on, ALPN http/1.1; trusting only the PEM
// certificates in `ca_file`, or the system's trust store when it is empty.
[[nodiscard]] Result<std::shared_ptr<SSL_CTX>> client_context(const std::string& ca_file);
// Makes `ctx` present `kc` (and its chain) to servers that ask for a client certificate
// (mutual TLS: a gateway calling a cluster node, docs/cluster.md).
[[nodiscard]] Result<void> set_client_certificate(SSL_CTX* ctx, const KeyCert& kc);

// The client side of a tunnel: the handshake on the caller's thread (verifying the server's
// certificate for `host`, a DNS name or an IP address), then a relay thread. The caller speaks
// plaintext on the returned fd. Destroying the tunnel waits up to a second for the relay to
// send what is pending and close_notify once the caller closed its fd, then cancels it.
class ClientTunnel {
 public:
  // `tcp`: a connected (blocking or not) socket. Errors for an untrusted certificate or a name
  // mismatch have code kPermissionDenied and say which.
  [[nodiscard]] static Result<std::pair<std::unique_ptr<ClientTunnel>, UniqueFd>> start(
      UniqueFd tcp, std::shared_ptr<SSL_CTX> ctx, const std::string& host,
      const TunnelOptions& options);
  ~ClientTunnel();
  ClientTunnel(const ClientTunnel&) = delete;
  ClientTunnel& operator=(const ClientTunnel&) = delete;

 private:
  ClientTunnel() = default;
  UniqueFd cancel_;  // eventfd that stops the relay
  std::future<void> done_;
  std::thread thread_;
};

}  // namespace space::tls
