// The cluster's own HTTP/1.1 client: the calls that discovery (etcd's JSON gateway, the
// Kubernetes API) and the shared snapshot store (S3) make to other services. Synchronous, with
// deadlines and cancellation: Beast reads and writes a common/fd_stream.h FdStream (poll() with
// a timeout and a stop eventfd on every wait), over the TCP socket for http:// or over the
// plaintext end of a tls::ClientTunnel for https:// (OpenSSL 3: a CA file or the system's
// trust store, an optional client certificate + key for mutual TLS, SNI, and the host name or
// address verified against the server's certificate), so TLS is the same code as the CLI's.
//
// Two ways to read an answer: request() returns the whole response (the body up to a limit) and
// keeps the connection for the next request (keep-alive, a small pool, safe from several
// threads); stream() returns the status and headers of a response on a connection of its own and
// then hands out its body (chunked transfer decoded) piece by piece or line by line, for watches.
//
// Errors name the service and its URL: "etcd at http://127.0.0.1:2379: connecting: Connection
// refused (ECONNREFUSED)". Connecting or a broken connection is kUnavailable, a deadline
// kTimeout, a stop kUnavailable ("stopped"), a refused certificate kPermissionDenied, a malformed
// answer kProtocol. An HTTP error status is not an Error here: the caller reads the status.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace space::cluster {

// "http://HOST[:PORT][/PATH]" or "https://..." (HOST a name, an IPv4 address or [IPv6]).
struct HttpUrl {
  bool https = false;
  std::string host;   // without brackets
  uint16_t port = 0;  // 80 / 443 when the URL has none
  std::string path;   // "" or "/..." without a trailing '/'
  // "http://HOST:PORT" (IPv6 in brackets, the port always), for messages.
  std::string origin() const;
  // "HOST[:PORT]", what the Host header carries (and what S3 signs): IPv6 in brackets, the port
  // left out when it is the scheme's default (80, 443), as curl and browsers send it.
  std::string authority() const;
};
// kInvalidArgument naming `url` for anything else (userinfo, query, fragment, a bad port).
[[nodiscard]] Result<HttpUrl> parse_http_url(std::string_view url);

struct HttpTlsOptions {
  std::string ca_file;    // PEM certificates to trust; "" = the system's trust store
  std::string cert_file;  // client certificate (PEM, may hold its chain) for mutual TLS; "" = none
  std::string key_file;   // its private key (PEM); required with cert_file
};

struct HttpOptions {
  // What the server is, for messages: "etcd", "the Kubernetes API", "S3".
  std::string service = "server";
  HttpTlsOptions tls;
  // Connecting (TCP, and the TLS handshake) must finish within this.
  std::chrono::milliseconds connect_timeout{5'000};
  // Each read of a whole response (request()) and each write must make progress within this;
  // a stream's reads use HttpStream::set_read_timeout.
  std::chrono::milliseconds io_timeout{30'000};
  // request(): a larger response body is kPayloadTooLarge.
  size_t body_limit = 64u << 20;
  // An eventfd (-1 = none), owned by the caller and outliving the client: once readable, every
  // wait of every connection fails at once ("stopped").
  int stop_fd = -1;
  // Idle keep-alive connections kept for reuse.
  size_t max_idle = 4;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method = "GET";
  std::string target = "/";  // origin-form: path and query (percent-encoded by the caller)
  HttpHeaders headers;       // Host, Content-Length and User-Agent are added
  std::string body;
};

// The value of header `name` (case-insensitive), "" if absent.
std::string find_header(const HttpHeaders& headers, std::string_view name);

struct HttpResponse {
  int status = 0;
  HttpHeaders headers;
  std::string body;
  std::string header(std::string_view name) const { return find_header(headers, name); }
};

// A response being read, on a connection of its own (closed with it).
class HttpStream {
 public:
  ~HttpStream();
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;

  int status() const { return status_; }
  const HttpHeaders& headers() const { return headers_; }
  std::string header(std::string_view name) const { return find_header(headers_, name); }

  // Each read must make progress within `timeout` (0 = wait for ever, until the stop fd).
  void set_read_timeout(std::chrono::milliseconds timeout);
  // The next body bytes (at most `n`); 0 once the body has ended.
  [[nodiscard]] Result<size_t> read_some(char* out, size_t n);
  // The next line of the body without its "\n" (nor a "\r" before it); nullopt once the body
  // has ended (a last line without "\n" is returned first). A longer line is kProtocol.
  [[nodiscard]] Result<std::optional<std::string>> read_line(size_t limit = 16u << 20);
  // The rest of the body (for an error answer); longer than `limit` is kPayloadTooLarge.
  [[nodiscard]] Result<std::string> read_all(size_t limit = 1u << 20);

  struct Conn;  // a connection (http_client.cc)

 private:
  friend class HttpClient;
  HttpStream() = default;
  std::string origin_;  // "etcd at http://...", for messages
  std::unique_ptr<Conn> conn_;
  int status_ = 0;
  HttpHeaders headers_;
  std::string pending_;  // body bytes read past the last line handed out
  bool ended_ = false;
  std::chrono::milliseconds read_timeout_{0};  // for messages
};

class HttpClient {
 public:
  // Checks the URL and loads the TLS files (for https) now, so that a bad path fails here.
  // `base_url`'s path, if any, is prefixed to every request's target.
  [[nodiscard]] static Result<std::unique_ptr<HttpClient>> create(std::string_view base_url,
                                                                  HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  const HttpUrl& url() const { return url_; }
  const HttpOptions& options() const { return options_; }

  // The whole response. A kept-alive connection that turns out closed before any answer is
  // retried once on a new one. Safe to call from several threads.
  [[nodiscard]] Result<HttpResponse> request(const HttpRequest& req);
  // The response's status and headers, its body to be read from the stream.
  [[nodiscard]] Result<std::unique_ptr<HttpStream>> stream(const HttpRequest& req);

 private:
  HttpClient() = default;
  // "etcd at http://127.0.0.1:2379"
  std::string origin() const;
  Result<std::unique_ptr<HttpStream::Conn>> connect();
  Result<HttpResponse> exchange(HttpStream::Conn& c, const HttpRequest& req, bool* nothing_read);

  HttpUrl url_;
  HttpOptions options_;
  std::shared_ptr<SSL_CTX> ctx_;
  std::mutex mu_;
  std::vector<std::unique_ptr<HttpStream::Conn>> idle_;
};

}  // namespace space::cluster
