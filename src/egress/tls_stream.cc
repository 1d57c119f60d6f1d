// TlsStream: OpenSSL on a non-blocking socket, every wait bounded by a timeout and a cancel fd.
#include "egress/tls_stream.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <vector>

#include "tls/x509.h"

namespace space::egress {

std::string tls_error_text() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

TlsStream::TlsStream(int fd, std::shared_ptr<SSL_CTX> ctx, int cancel_fd)
    : fd_(fd), cancel_fd_(cancel_fd), ctx_(std::move(ctx)) {
  ssl_ = SSL_new(ctx_.get());
  if (ssl_) SSL_set_fd(ssl_, fd_);
}

TlsStream::~TlsStream() {
  if (ssl_) SSL_free(ssl_);
}

TlsStream::error_code TlsStream::wait_for(int ssl_error, Clock::time_point deadline) {
  short events;
  if (ssl_error == SSL_ERROR_WANT_READ) {
    events = POLLIN;
  } else if (ssl_error == SSL_ERROR_WANT_WRITE) {
    events = POLLOUT;
  } else if (ssl_error == SSL_ERROR_ZERO_RETURN) {
    return boost::asio::error::eof;
  } else if (ssl_error == SSL_ERROR_SYSCALL) {
    ERR_clear_error();
    return errno != 0 ? error_code(errno, boost::system::system_category())
                      : error_code(boost::asio::error::eof);
  } else {
    ERR_clear_error();
    return boost::asio::error::no_protocol_option;  // a TLS protocol failure
  }
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return boost::asio::error::timed_out;
    pollfd fds[2] = {{fd_, events, 0}, {cancel_fd_, POLLIN, 0}};
    int r = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (r < 0) {
      if (errno == EINTR) continue;
      return error_code(errno, boost::system::system_category());
    }
    if (fds[1].revents != 0) return boost::asio::error::operation_aborted;
    if (fds[0].revents != 0) return {};
  }
}

size_t TlsStream::read_raw(void* data, size_t size, error_code& ec) {
  ec = {};
  if (!ssl_) {
    ec = boost::asio::error::no_memory;
    return 0;
  }
  auto deadline = Clock::now() + timeout_;
  for (;;) {
    size_t got = 0;
    errno = 0;
    if (SSL_read_ex(ssl_, data, size, &got) == 1) return got;
    int err = SSL_get_error(ssl_, 0);
    ec = wait_for(err, deadline);
    if (ec) return 0;
  }
}

size_t TlsStream::read_now(void* data, size_t size, error_code& ec) {
  ec = {};
  if (!ssl_) {
    ec = boost::asio::error::no_memory;
    return 0;
  }
  size_t got = 0;
  errno = 0;
  if (SSL_read_ex(ssl_, data, size, &got) == 1) return got;
  int err = SSL_get_error(ssl_, 0);
  if (err == SSL_ERROR_WANT_READ) {
    ec = boost::asio::error::would_block;
    return 0;
  }
  // WANT_WRITE (a key update to send) waits for the socket; anything else is the error.
  ec = wait_for(err, Clock::now() + timeout_);
  if (!ec) ec = boost::asio::error::would_block;
  return 0;
}

size_t TlsStream::write_raw(const void* data, size_t size, error_code& ec) {
  ec = {};
  if (!ssl_) {
    ec = boost::asio::error::no_memory;
    return 0;
  }
  auto deadline = Clock::now() + timeout_;
  for (;;) {
    size_t put = 0;
    errno = 0;
    if (SSL_write_ex(ssl_, data, size, &put) == 1) return put;
    int err = SSL_get_error(ssl_, 0);
    ec = wait_for(err, deadline);
    if (ec) return 0;
  }
}

Result<void> TlsStream::handshake(bool server, std::string_view what) {
  if (!ssl_) return fail(Code::kInternal, std::string(what) + ": SSL_new failed");
  auto deadline = Clock::now() + timeout_;
  for (;;) {
    errno = 0;
    int r = server ? SSL_accept(ssl_) : SSL_connect(ssl_);
    if (r == 1) return {};
    int err = SSL_get_error(ssl_, r);
    if (err == SSL_ERROR_SSL) {
      std::string detail = tls_error_text();
      long v = SSL_get_verify_result(ssl_);
      if (!server && v != X509_V_OK)
        detail =
            std::string("certificate verification failed: ") + X509_verify_cert_error_string(v);
      return fail(Code::kUnavailable, std::string(what) + ": " + detail);
    }
    error_code ec = wait_for(err, deadline);
    if (ec)
      return fail(ec == boost::asio::error::timed_out ? Code::kTimeout : Code::kUnavailable,
                  std::string(what) + ": " + ec.message());
  }
}

Result<void> TlsStream::accept(std::string* sni) {
  TRY_VOID(handshake(true, "TLS handshake with the sandbox"));
  if (sni) {
    const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
    *sni = name ? name : "";
  }
  return {};
}

Result<void> TlsStream::connect(const std::string& host, bool host_is_ip) {
  if (!ssl_) return fail(Code::kInternal, "SSL_new failed");
  if (!host_is_ip) SSL_set_tlsext_host_name(ssl_, host.c_str());
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  int ok = host_is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                      : X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  if (ok != 1) return fail(Code::kInternal, "setting the name to verify: " + tls_error_text());
  SSL_set_verify(ssl_, SSL_VERIFY_PEER, nullptr);
  return handshake(false, "TLS handshake with " + host);
}

void TlsStream::offer_alpn(std::string_view wire) {
  if (ssl_)
    SSL_set_alpn_protos(ssl_, reinterpret_cast<const unsigned char*>(wire.data()),
                        static_cast<unsigned>(wire.size()));
}

std::string TlsStream::alpn() const {
  const unsigned char* p = nullptr;
  unsigned len = 0;
  if (ssl_) SSL_get0_alpn_selected(ssl_, &p, &len);
  return p ? std::string(reinterpret_cast<const char*>(p), len) : std::string();
}

void TlsStream::shutdown() {
  if (!ssl_) return;
  auto deadline = Clock::now() + std::min(timeout_, std::chrono::milliseconds(2000));
  for (int i = 0; i < 4; ++i) {
    int r = SSL_shutdown(ssl_);
    if (r != 0 && r != -1) return;
    if (r == 0) return;  // close_notify sent; not waiting for the peer's
    int err = SSL_get_error(ssl_, r);
    if (wait_for(err, deadline)) return;
  }
}

Result<void> add_system_trust(SSL_CTX* ctx) {
  if (SSL_CTX_set_default_verify_paths(ctx) != 1)
    return fail(Code::kInternal, "loading the system trust store: " + tls_error_text());
  return {};
}

Result<std::shared_ptr<SSL_CTX>> upstream_context(const std::vector<std::string>& extra_ca_files,
                                                  const std::vector<std::string>& extra_ca_pems,
                                                  bool system_store) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (!ctx) return fail(Code::kInternal, "SSL_CTX_new: " + tls_error_text());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (system_store) TRY_VOID(add_system_trust(ctx.get()));
  for (auto& f : extra_ca_files) {
    if (SSL_CTX_load_verify_locations(ctx.get(), f.c_str(), nullptr) != 1)
      return fail(Code::kInvalidArgument,
                  "loading upstream CA file " + f + ": " + tls_error_text());
  }
  for (auto& pem : extra_ca_pems) {
    auto certs = TRY_CTX(tls::parse_certs_pem(pem), "an upstream CA");
    for (auto& c : certs)
      if (X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), c.get()) != 1)
        return fail(Code::kInvalidArgument, "adding an upstream CA: " + tls_error_text());
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof kAlpn);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

}  // namespace space::egress
