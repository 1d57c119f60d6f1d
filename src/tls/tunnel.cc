// TLS termination as a byte relay (see tunnel.h). One loop drives both directions with
// non-blocking calls: it reads and writes until nothing makes progress, then polls for exactly
// what the stalled calls asked for (SSL_ERROR_WANT_READ/WANT_WRITE on the TCP socket,
// readability or writability of the plaintext socket). OpenSSL writes to the TCP socket with
// write(2): the processes using this (spaced, space) ignore SIGPIPE.
#include "tls/tunnel.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "tls/x509.h"

namespace space::tls {
namespace {

using Clock = std::chrono::steady_clock;

void set_nonblocking_nodelay(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int poll_timeout(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Drives SSL_accept or SSL_connect to completion by `deadline`. `plain_http`: set when the
// peer spoke plain HTTP instead (OpenSSL recognizes "GET ", "POST " ... as the first bytes).
Result<void> handshake(SSL* ssl, int tcp, Clock::time_point deadline, int cancel_fd,
                       bool* plain_http = nullptr) {
  for (;;) {
    ERR_clear_error();
    int r = SSL_do_handshake(ssl);
    if (r == 1) return {};
    int e = SSL_get_error(ssl, r);
    short events = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (events == 0) {
      if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        return fail(Code::kUnavailable, "the TLS handshake failed: the peer closed the connection");
      }
      unsigned long err = ERR_peek_error();
      if (plain_http != nullptr && ERR_GET_LIB(err) == ERR_LIB_SSL &&
          ERR_GET_REASON(err) == SSL_R_HTTP_REQUEST) {
        *plain_http = true;
      }
      return fail_ossl("the TLS handshake failed", Code::kUnavailable);
    }
    pollfd fds[2] = {{tcp, events, 0}, {cancel_fd, POLLIN, 0}};
    int timeout = poll_timeout(deadline);
    int n = timeout == 0 ? 0 : ::poll(fds, 2, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("poll");
    if (fds[1].revents != 0) {
      return fail(Code::kUnavailable, "the TLS handshake was cancelled");
    }
    if (n == 0) return fail(Code::kTimeout, "the TLS handshake did not complete in time");
  }
}

// The relay proper (see tunnel.h for what it carries over and when it ends).
Result<void> relay(SSL* ssl, int tcp, int plain, const TunnelOptions& o, int cancel_b) {
  constexpr size_t kBuf = 16 * 1024;           // one TLS record
  auto up = std::make_unique<char[]>(kBuf);    // plaintext -> TLS
  auto down = std::make_unique<char[]>(kBuf);  // TLS -> plaintext
  size_t up_off = 0, up_len = 0, down_off = 0, down_len = 0;
  bool plain_eof = false;    // the plaintext side sent its last byte
  bool notify_sent = false;  // ... and we passed that on as close_notify
  bool tls_eof = false;      // the TLS peer sent its last byte (close_notify or TCP EOF)
  bool plain_shut = false;   // ... and we passed that on as shutdown(SHUT_WR)
  Clock::time_point last_progress = Clock::now();
  for (;;) {
    bool progress = false;
    short tcp_events = 0, plain_events = 0;
    auto want = [&](int ssl_error) -> bool {
      if (ssl_error == SSL_ERROR_WANT_READ)
        tcp_events |= POLLIN;
      else if (ssl_error == SSL_ERROR_WANT_WRITE)
        tcp_events |= POLLOUT;
      else
        return false;
      return true;
    };

    // Plaintext side -> TLS.
    if (up_off == up_len && !plain_eof) {
      ssize_t n = ::recv(plain, up.get(), kBuf, MSG_DONTWAIT);
      if (n > 0) {
        up_off = 0;
        up_len = static_cast<size_t>(n);
        progress = true;
      } else if (n == 0) {
        plain_eof = true;
        progress = true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        plain_events |= POLLIN;
      } else if (errno != EINTR) {
        return fail_sys("recv", "(the plaintext side)");
      }
    }
    if (up_off < up_len) {
      ERR_clear_error();
      int n = SSL_write(ssl, up.get() + up_off, static_cast<int>(up_len - up_off));
      if (n > 0) {
        up_off += static_cast<size_t>(n);
        if (up_off == up_len) up_off = up_len = 0;
        progress = true;
      } else if (!want(SSL_get_error(ssl, n))) {
        return fail_ossl("sending to the TLS peer", Code::kUnavailable);
      }
    }
    if (plain_eof && up_off == up_len && !notify_sent) {
      ERR_clear_error();
      int r = SSL_shutdown(ssl);
      if (r >= 0) {
        notify_sent = true;
        progress = true;
      } else if (!want(SSL_get_error(ssl, r))) {
        notify_sent = true;  // the peer is gone; what it still sends is read below
        ERR_clear_error();
      }
    }

    // TLS -> plaintext side.
    if (down_off == down_len && !tls_eof) {
      ERR_clear_error();
      int n = SSL_read(ssl, down.get(), static_cast<int>(kBuf));
      if (n > 0) {
        down_off = 0;
        down_len = static_cast<size_t>(n);
        progress = true;
      } else {
        int e = SSL_get_error(ssl, n);
        if (e == SSL_ERROR_ZERO_RETURN) {
          tls_eof = true;
          progress = true;
        } else if (want(e)) {
        } else if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
          tls_eof = true;  // TCP EOF without close_notify: HTTP's own framing tells truncation
          progress = true;
        } else if (e == SSL_ERROR_SSL &&
                   ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
          ERR_clear_error();
          tls_eof = true;
          progress = true;
        } else {
          return fail_ossl("receiving from the TLS peer", Code::kUnavailable);
        }
      }
    }
    if (down_off < down_len) {
      ssize_t n =
          ::send(plain, down.get() + down_off, down_len - down_off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        down_off += static_cast<size_t>(n);
        if (down_off == down_len) down_off = down_len = 0;
        progress = true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        plain_events |= POLLOUT;
      } else if (errno == EPIPE || errno == ECONNRESET) {
        return {};  // the plaintext side closed: nobody is left to read what the peer sends
      } else if (errno != EINTR) {
        return fail_sys("send", "(the plaintext side)");
      }
    }
    if (tls_eof && down_off == down_len && !plain_shut) {
      ::shutdown(plain, SHUT_WR);
      plain_shut = true;
      progress = true;
    }
    if (notify_sent && plain_shut) return {};  // both directions have ended

    Clock::time_point now = Clock::now();
    if (progress) {
      last_progress = now;
      continue;
    }
    // Only what the stalled calls wait for; a socket nobody waits on is left out (-1), since
    // poll reports a hang-up whether asked or not. Once the plaintext side has ended and all of
    // it went out, its full close (POLLHUP) means nobody reads what the peer still sends.
    bool drained_up = plain_eof && notify_sent;
    int plain_fd = plain_events != 0 || drained_up ? plain : -1;
    bool pending = up_off < up_len || down_off < down_len || (plain_eof && !notify_sent);
    Clock::time_point deadline =
        pending ? last_progress + o.stall_timeout : Clock::time_point::max();
    pollfd fds[4] = {{tcp_events != 0 ? tcp : -1, tcp_events, 0},
                     {plain_fd, plain_events, 0},
                     {o.cancel_fd, POLLIN, 0},
                     {cancel_b, POLLIN, 0}};
    int timeout = poll_timeout(deadline);
    int n = timeout == 0 ? 0 : ::poll(fds, 4, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("poll");
    if (fds[2].revents != 0 || fds[3].revents != 0) {
      return fail(Code::kUnavailable, "the TLS connection was cancelled");
    }
    if (n == 0) {
      return fail(Code::kTimeout, "the TLS connection made no progress for " +
                                      std::to_string(o.stall_timeout.count() / 1000) + " s");
    }
    if (drained_up && down_off == down_len && (fds[1].revents & (POLLHUP | POLLERR)) != 0) {
      return {};
    }
  }
}

// What a plain-HTTP client gets from the TLS port: one short answer it can show.
void answer_plain_http(int tcp) {
  static constexpr std::string_view kBody =
      "{\"error\":{\"code\":\"invalid_argument\",\"message\":\"this port of spaced speaks "
      "HTTPS (api_tls): use https:// instead of http://\"}}\n";
  std::string res =
      "HTTP/1.1 400 Bad Request\r\nServer: spaced\r\nContent-Type: application/json\r\n"
      "Connection: close\r\nContent-Length: " +
      std::to_string(kBody.size()) + "\r\n\r\n" + std::string(kBody);
  (void)!::send(tcp, res.data(), res.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace

Result<std::pair<UniqueFd, UniqueFd>> plaintext_pair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) {
    return fail_sys("socketpair", "AF_UNIX");
  }
  return std::pair<UniqueFd, UniqueFd>(UniqueFd(sv[0]), UniqueFd(sv[1]));
}

Result<void> serve_tls(UniqueFd tcp, UniqueFd plain, SSL_CTX* ctx, const TunnelOptions& options) {
  set_nonblocking_nodelay(tcp.get());
  SslPtr ssl(SSL_new(ctx));
  if (!ssl || SSL_set_fd(ssl.get(), tcp.get()) != 1) return fail_ossl("SSL_new");
  SSL_set_mode(ssl.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
  SSL_set_accept_state(ssl.get());
  bool plain_http = false;
  auto shaken = handshake(ssl.get(), tcp.get(), Clock::now() + options.handshake_timeout,
                          options.cancel_fd, &plain_http);
  if (!shaken) {
    if (plain_http) answer_plain_http(tcp.get());
    return shaken;
  }
  return relay(ssl.get(), tcp.get(), plain.get(), options, -1);
}

Result<std::shared_ptr<SSL_CTX>> client_context(const std::string& ca_file) {
  CtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return fail_ossl("SSL_CTX_new");
  if (!SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION)) {
    return fail_ossl("setting TLS 1.2 as the minimum");
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      return fail_ossl("loading the system's trusted certificates");
    }
  } else {
    // Read here (not by OpenSSL) for a clear error about a missing or unreadable file.
    std::string pem = TRY_CTX(read_small_file(ca_file, false, true), "SPACE_CA");
    auto certs = TRY_CTX(parse_certs_pem(pem), "SPACE_CA " + ca_file);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    for (const auto& c : certs) {
      if (X509_STORE_add_cert(store, c.get()) != 1) {
        return fail_ossl("SPACE_CA " + ca_file + ": adding a certificate");
      }
    }
  }
  static constexpr unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  if (SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof kAlpn) != 0) {
    return fail_ossl("setting ALPN");
  }
  return std::shared_ptr<SSL_CTX>(ctx.release(), SSL_CTX_free);
}

Result<void> set_client_certificate(SSL_CTX* ctx, const KeyCert& kc) {
  if (!kc.key || !kc.cert) return fail(Code::kInvalidArgument, "no client certificate or key");
  if (SSL_CTX_use_certificate(ctx, kc.cert.get()) != 1) return fail_ossl("SSL_CTX_use_certificate");
  for (const auto& c : kc.chain)
    if (SSL_CTX_add1_chain_cert(ctx, c.get()) != 1) return fail_ossl("SSL_CTX_add1_chain_cert");
  if (SSL_CTX_use_PrivateKey(ctx, kc.key.get()) != 1) return fail_ossl("SSL_CTX_use_PrivateKey");
  if (SSL_CTX_check_private_key(ctx) != 1)
    return fail(Code::kInvalidArgument, "the client key does not match its certificate");
  return {};
}

Result<std::pair<std::unique_ptr<ClientTunnel>, UniqueFd>> ClientTunnel::start(
    UniqueFd tcp, std::shared_ptr<SSL_CTX> ctx, const std::string& host,
    const TunnelOptions& options) {
  set_nonblocking_nodelay(tcp.get());
  SslPtr ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), tcp.get()) != 1) return fail_ossl("SSL_new");
  SSL_set_mode(ssl.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_set_connect_state(ssl.get());
  if (is_ip_address(host)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), host.c_str()) != 1) {
      return fail_ossl("setting the address to verify");
    }
  } else if (SSL_set_tlsext_host_name(ssl.get(), host.c_str()) != 1 ||
             SSL_set1_host(ssl.get(), host.c_str()) != 1) {
    return fail_ossl("setting the host name to verify");
  }
  auto shaken =
      handshake(ssl.get(), tcp.get(), Clock::now() + options.handshake_timeout, options.cancel_fd);
  if (!shaken) {
    long v = SSL_get_verify_result(ssl.get());
    if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      return fail(Code::kPermissionDenied, "the daemon's TLS certificate is not valid for \"" +
                                               host + "\" (" + X509_verify_cert_error_string(v) +
                                               ")");
    }
    if (v != X509_V_OK) {
      return fail(Code::kPermissionDenied, std::string("the daemon's TLS certificate is not "
                                                       "trusted (") +
                                               X509_verify_cert_error_string(v) + ")");
    }
    return fail(std::move(shaken.error()));
  }
  auto [relay_end, app_end] = TRY(plaintext_pair());
  std::unique_ptr<ClientTunnel> t(new ClientTunnel());
  t->cancel_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!t->cancel_) return fail_sys("eventfd");
  std::promise<void> done;
  t->done_ = done.get_future();
  t->thread_ = std::thread([ssl = std::move(ssl), tcp = std::move(tcp), ctx = std::move(ctx),
                            plain = std::move(relay_end), options, cancel = t->cancel_.get(),
                            done = std::move(done)]() mutable {
    (void)relay(ssl.get(), tcp.get(), plain.get(), options, cancel);
    done.set_value();
  });
  return std::pair<std::unique_ptr<ClientTunnel>, UniqueFd>(std::move(t), std::move(app_end));
}

ClientTunnel::~ClientTunnel() {
  if (!thread_.joinable()) return;
  if (done_.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    uint64_t one = 1;
    (void)!::write(cancel_.get(), &one, sizeof one);
  }
  thread_.join();
}

}  // namespace space::tls
