// A TLS connection over a raw non-blocking socket, as a Beast SyncReadStream/SyncWriteStream
// (the adaptor's shared half, SyncStreamOps, is common/fd_stream.h's) with the same timeouts
// and cancellation as FdStream (every wait is a poll() on the socket plus a cancel eventfd). The
// gateway uses it on both sides of an intercepted connection: as a server towards the sandbox
// (presenting a leaf of the sandbox's CA) and as a client towards the upstream (verifying it
// normally). OpenSSL is driven directly (SSL_set_fd) rather than through Asio's ssl::stream, whose
// synchronous operations cannot time out.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "common/error.h"
#include "common/fd_stream.h"

namespace space::egress {

class TlsStream : public SyncStreamOps<TlsStream> {
 public:
  using Clock = std::chrono::steady_clock;
  using error_code = boost::system::error_code;
  using SyncStreamOps::read_some;
  using SyncStreamOps::write_some;

  // `fd` is borrowed (owned by the caller's FdStream) and must be non-blocking.
  TlsStream(int fd, std::shared_ptr<SSL_CTX> ctx, int cancel_fd);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // Server side: completes the handshake; `sni` receives the name the client asked for.
  Result<void> accept(std::string* sni);
  // Client side: SNI `host`, verify the chain against the context's trust and the name
  // (DNS name, or IP address when `host` is one).
  Result<void> connect(const std::string& host, bool host_is_ip);
  // Sends close_notify (best effort, bounded by the timeout).
  void shutdown();
  // Client side, before connect(): the ALPN protocols to offer (wire format), instead of the
  // context's.
  void offer_alpn(std::string_view wire);
  // The protocol ALPN settled on ("h2", "http/1.1"), or "" if none, after the handshake.
  std::string alpn() const;
  // The OpenSSL connection, for an event loop that drives it without blocking (h2_server.cc).
  SSL* native_handle() { return ssl_; }

  // For a relay that waits on several sockets itself (WebSocket): reads what is ready without
  // waiting for the peer; `ec` is would_block when nothing is, eof when the peer closed.
  size_t read_now(void* data, size_t size, error_code& ec);
  int fd() const { return fd_; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b(*it);
      if (b.size() == 0) continue;
      return read_raw(b.data(), b.size(), ec);
    }
    ec = {};
    return 0;
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::const_buffer b(*it);
      if (b.size() == 0) continue;
      return write_raw(b.data(), b.size(), ec);
    }
    ec = {};
    return 0;
  }

 private:
  size_t read_raw(void* data, size_t size, error_code& ec);
  size_t write_raw(const void* data, size_t size, error_code& ec);
  // Waits for what SSL_get_error asked for; returns an error on timeout/cancel/failure.
  error_code wait_for(int ssl_error, Clock::time_point deadline);
  Result<void> handshake(bool server, std::string_view what);

  int fd_;
  int cancel_fd_;
  std::shared_ptr<SSL_CTX> ctx_;
  SSL* ssl_ = nullptr;
  std::chrono::milliseconds timeout_{60'000};
};

// A client context for upstream connections: TLS 1.2+, the system trust store (unless
// `system_store` is false: parsing it costs tens of milliseconds) plus `extra_ca_files` and
// `extra_ca_pems`, peer verification on, ALPN http/1.1.
Result<std::shared_ptr<SSL_CTX>> upstream_context(
    const std::vector<std::string>& extra_ca_files,
    const std::vector<std::string>& extra_ca_pems = {}, bool system_store = true);
// Adds the system trust store to `ctx` (what upstream_context does unless told not to).
Result<void> add_system_trust(SSL_CTX* ctx);

// The OpenSSL error queue as text (and cleared), for error messages.
std::string tls_error_text();

}  // namespace space::egress
