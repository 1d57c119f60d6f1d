// The cluster's HTTP/1.1 client (see http_client.h): URL parsing, connecting with a deadline,
// TLS through tls::ClientTunnel, requests written by hand and responses parsed by Beast on an
// FdStream.
#include "cluster/http_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>

#include "common/fd.h"
#include "common/fd_stream.h"
#include "common/tcp_connect.h"
#include "tls/tunnel.h"
#include "tls/x509.h"

namespace space::cluster {
namespace {
namespace http = boost::beast::http;
using HttpClock = std::chrono::steady_clock;
}  // namespace

struct HttpStream::Conn {
  // Declared before the stream: the plaintext end closes first, so the relay can send
  // close_notify and end (see tls::ClientTunnel's destructor).
  std::unique_ptr<tls::ClientTunnel> tunnel;
  std::unique_ptr<FdStream> stream;
  boost::beast::flat_buffer buffer;
  std::unique_ptr<http::response_parser<http::buffer_body>> parser;
  bool head_request = false;
};

namespace {

bool http_iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

std::string http_host_text(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

Error http_transport_error(const boost::system::error_code& ec, const std::string& origin,
                           std::string_view what, std::chrono::milliseconds timeout) {
  if (ec == boost::asio::error::operation_aborted) {
    return Error(Code::kUnavailable, origin + ": " + std::string(what) + ": stopped");
  }
  if (ec == boost::asio::error::timed_out) {
    return Error(Code::kTimeout, origin + ": " + std::string(what) + ": no progress within " +
                                     std::to_string(timeout.count()) + " ms");
  }
  if (ec == boost::asio::error::eof || ec == http::error::end_of_stream ||
      ec == http::error::partial_message) {
    return Error(Code::kUnavailable,
                 origin + ": " + std::string(what) + ": the server closed the connection");
  }
  Code code = ec.category() == boost::system::system_category() ||
                      ec.category() == boost::asio::error::get_system_category()
                  ? Code::kUnavailable
                  : Code::kProtocol;
  return Error(code, origin + ": " + std::string(what) + ": " + ec.message());
}

void http_tune_socket(int fd) {
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A peer that vanishes without a FIN (a node powered off) must not keep a watch waiting for
  // ever: keepalive probes after 30 s of silence, given up after 3 more at 10 s.
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 30, interval = 10, count = 3;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// Whether an idle kept-alive connection is still usable: nothing to read (a close from the
// server, or bytes it should not have sent, make it readable).
bool http_idle_usable(const HttpStream::Conn& c) {
  if (c.buffer.size() != 0) return false;
  pollfd p{c.stream->fd(), POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 0;
}

Result<void> http_read_head(HttpStream::Conn& c, const std::string& origin,
                            std::chrono::milliseconds timeout, bool* nothing_read) {
  for (;;) {
    c.parser = std::make_unique<http::response_parser<http::buffer_body>>();
    c.parser->header_limit(64 * 1024);
    // Not boost::none: Boost 1.74 then refuses every body with a Content-Length.
    c.parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (c.head_request) c.parser->skip(true);
    boost::system::error_code ec;
    http::read_header(*c.stream, c.buffer, *c.parser, ec);
    if (ec) {
      if (nothing_read != nullptr) {
        *nothing_read = (ec == http::error::end_of_stream || ec == boost::asio::error::eof ||
                         ec == boost::asio::error::connection_reset) &&
                        c.buffer.size() == 0;
      }
      return fail(http_transport_error(ec, origin, "reading the response", timeout));
    }
    if (nothing_read != nullptr) *nothing_read = false;
    int status = c.parser->get().result_int();
    if (status >= 200 || status == 101) return {};
  }
}

Result<size_t> http_read_body_some(HttpStream::Conn& c, const std::string& origin, char* out,
                                   size_t n, std::chrono::milliseconds timeout) {
  if (c.parser->is_done() || n == 0) return 0;
  for (;;) {
    auto& body = c.parser->get().body();
    body.data = out;
    body.size = n;
    body.more = true;
    boost::system::error_code ec;
    http::read_some(*c.stream, c.buffer, *c.parser, ec);
    size_t got = n - body.size;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return fail(http_transport_error(ec, origin, "reading the response body", timeout));
    if (got > 0 || c.parser->is_done()) return got;
  }
}

HttpHeaders http_headers_of(const http::response_parser<http::buffer_body>& p) {
  HttpHeaders h;
  for (const auto& f : p.get()) {
    h.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  return h;
}

Result<std::shared_ptr<SSL_CTX>> http_tls_context(const HttpTlsOptions& o,
                                                  const std::string& origin) {
  // The CA file is read here first for an error that names it (client_context words its own
  // for the CLI's SPACE_CA).
  if (!o.ca_file.empty()) {
    std::string pem =
        TRY_CTX(tls::read_small_file(o.ca_file, false, true), origin + ": CA file " + o.ca_file);
    TRY_CTX(tls::parse_certs_pem(pem), origin + ": CA file " + o.ca_file);
  }
  auto ctx = TRY_CTX(tls::client_context(o.ca_file), origin + ": TLS");
  if (o.cert_file.empty() != o.key_file.empty()) {
    return fail(Code::kInvalidArgument,
                origin + ": a client certificate needs both a certificate and a key file");
  }
  if (!o.cert_file.empty()) {
    std::string cert_pem = TRY_CTX(tls::read_small_file(o.cert_file, false, true),
                                   origin + ": client certificate " + o.cert_file);
    auto certs =
        TRY_CTX(tls::parse_certs_pem(cert_pem), origin + ": client certificate " + o.cert_file);
    std::string key_text = TRY_CTX(tls::read_small_file(o.key_file, false, true),
                                   origin + ": client key " + o.key_file);
    auto key =
        TRY_CTX(tls::parse_key_pem(std::move(key_text)), origin + ": client key " + o.key_file);
    if (SSL_CTX_use_certificate(ctx.get(), certs[0].get()) != 1) {
      return tls::fail_ossl(origin + ": client certificate " + o.cert_file, Code::kInvalidArgument);
    }
    for (size_t i = 1; i < certs.size(); ++i) {
      if (SSL_CTX_add1_chain_cert(ctx.get(), certs[i].get()) != 1) {
        return tls::fail_ossl(origin + ": client certificate chain " + o.cert_file);
      }
    }
    if (SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1 ||
        SSL_CTX_check_private_key(ctx.get()) != 1) {
      return tls::fail_ossl(
          origin + ": client key " + o.key_file + " does not match " + o.cert_file,
          Code::kInvalidArgument);
    }
  }
  return ctx;
}

}  // namespace

std::string HttpUrl::origin() const {
  return std::string(https ? "https://" : "http://") + http_host_text(host) + ":" +
         std::to_string(port);
}

std::string HttpUrl::authority() const {
  if (port == (https ? 443 : 80)) return http_host_text(host);
  return http_host_text(host) + ":" + std::to_string(port);
}

Result<HttpUrl> parse_http_url(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, "\"" + std::string(text) +
                                            "\" is not an http:// or https:// URL (" +
                                            std::string(why) + ")");
  };
  HttpUrl u;
  std::string_view rest;
  if (text.starts_with("https://")) {
    u.https = true;
    rest = text.substr(8);
  } else if (text.starts_with("http://")) {
    rest = text.substr(7);
  } else {
    return bad("scheme");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) return bad("a query or fragment");
  size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    u.path = std::string(path);
  }
  if (hostport.find('@') != std::string_view::npos) return bad("user information");
  std::string_view port_text;
  if (hostport.starts_with("[")) {
    size_t close = hostport.find(']');
    if (close == std::string_view::npos) return bad("an unclosed '['");
    u.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("text after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("an empty port");
    }
    if (!tls::is_ip_address(u.host)) return bad("not an IPv6 address in brackets");
  } else {
    size_t colon = hostport.find(':');
    u.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      if (port_text.empty()) return bad("an empty port");
    }
  }
  if (u.host.empty()) return bad("no host");
  for (char ch : u.host) {
    if (std::isspace(static_cast<unsigned char>(ch)) || ch == '%') return bad("the host");
  }
  u.port = u.https ? 443 : 80;
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
      return bad("the port");
    u.port = static_cast<uint16_t>(port);
  }
  return u;
}

std::string find_header(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (http_iequals(k, name)) return v;
  }
  return "";
}

// --- HttpStream

HttpStream::~HttpStream() = default;

void HttpStream::set_read_timeout(std::chrono::milliseconds timeout) {
  read_timeout_ = timeout;
  conn_->stream->set_read_timeout(timeout);
}

Result<size_t> HttpStream::read_some(char* out, size_t n) {
  if (!pending_.empty()) {
    size_t k = std::min(n, pending_.size());
    std::memcpy(out, pending_.data(), k);
    pending_.erase(0, k);
    return k;
  }
  if (ended_) return 0;
  size_t got = TRY(http_read_body_some(*conn_, origin_, out, n, read_timeout_));
  if (got == 0) ended_ = true;
  return got;
}

Result<std::optional<std::string>> HttpStream::read_line(size_t limit) {
  for (;;) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return std::optional<std::string>(std::move(line));
    }
    if (pending_.size() > limit) {
      return fail(Code::kProtocol, origin_ + ": a line of the response is longer than " +
                                       std::to_string(limit) + " bytes");
    }
    if (ended_) {
      if (pending_.empty()) return std::optional<std::string>();
      std::string line = std::move(pending_);
      pending_.clear();
      return std::optional<std::string>(std::move(line));
    }
    char buf[16 * 1024];
    size_t got = TRY(http_read_body_some(*conn_, origin_, buf, sizeof buf, read_timeout_));
    if (got == 0) ended_ = true;
    pending_.append(buf, got);
  }
}

Result<std::string> HttpStream::read_all(size_t limit) {
  std::string body = std::move(pending_);
  pending_.clear();
  char buf[16 * 1024];
  while (!ended_) {
    size_t got = TRY(http_read_body_some(*conn_, origin_, buf, sizeof buf, read_timeout_));
    if (got == 0) ended_ = true;
    body.append(buf, got);
    if (body.size() > limit) {
      return fail(Code::kPayloadTooLarge, origin_ + ": the response body is larger than " +
                                              std::to_string(limit) + " bytes");
    }
  }
  return body;
}

// --- HttpClient

Result<std::unique_ptr<HttpClient>> HttpClient::create(std::string_view base_url,
                                                       HttpOptions options) {
  std::unique_ptr<HttpClient> c(new HttpClient());
  c->url_ = TRY_CTX(parse_http_url(base_url), options.service);
  c->options_ = std::move(options);
  if (c->url_.https) c->ctx_ = TRY(http_tls_context(c->options_.tls, c->origin()));
  return c;
}

HttpClient::~HttpClient() = default;

std::string HttpClient::origin() const { return options_.service + " at " + url_.origin(); }

Result<std::unique_ptr<HttpStream::Conn>> HttpClient::connect() {
  const auto deadline = HttpClock::now() + options_.connect_timeout;
  auto connected = tcp_connect(url_.host, url_.port, options_.connect_timeout, options_.stop_fd);
  if (!connected) {
    const Error& e = connected.error();
    int err = e.sys_errno();
    if (err == ECANCELED) return fail(Code::kUnavailable, origin() + ": connecting: stopped");
    if (err == ETIMEDOUT) {
      return fail(Code::kTimeout, origin() + ": connecting: no answer within " +
                                      std::to_string(options_.connect_timeout.count()) + " ms");
    }
    if (err == ECONNREFUSED) {
      return fail(Code::kUnavailable, origin() + ": connection refused", err);
    }
    if (err == 0) return fail(Code::kUnavailable, origin() + ": " + e.message());
    return fail(Code::kUnavailable,
                origin() + ": connecting: " + std::strerror(err) + " (" +
                    std::string(errno_name(err)) + ")",
                err);
  }
  UniqueFd tcp = std::move(*connected);
  http_tune_socket(tcp.get());
  auto c = std::make_unique<HttpStream::Conn>();
  if (url_.https) {
    tls::TunnelOptions o;
    o.handshake_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(deadline - HttpClock::now(), HttpClock::duration(std::chrono::milliseconds(1))));
    o.stall_timeout = std::max(options_.io_timeout, std::chrono::milliseconds(60'000));
    o.cancel_fd = options_.stop_fd;
    auto t = tls::ClientTunnel::start(std::move(tcp), ctx_, url_.host, o);
    if (!t) {
      // The tunnel words certificate refusals for the CLI ("the daemon's ...").
      std::string m = t.error().message();
      if (size_t at = m.find("the daemon's"); at != std::string::npos) {
        m.replace(at, 12, "the server's");
      }
      return fail(Error(t.error().code(), origin() + ": TLS: " + m, t.error().sys_errno()));
    }
    c->tunnel = std::move(t->first);
    c->stream = std::make_unique<FdStream>(std::move(t->second));
  } else {
    c->stream = std::make_unique<FdStream>(std::move(tcp));
  }
  c->stream->set_stop_fd(options_.stop_fd);
  c->stream->set_write_timeout(options_.io_timeout);
  c->stream->set_read_timeout(options_.io_timeout);
  return c;
}

// Writes `req` on `c` and reads the response's head.
Result<HttpResponse> HttpClient::exchange(HttpStream::Conn& c, const HttpRequest& req,
                                          bool* nothing_read) {
  *nothing_read = false;
  std::string head = req.method + " " + url_.path + req.target + " HTTP/1.1\r\n";
  bool has_host = false;
  for (const auto& [k, v] : req.headers) {
    if (http_iequals(k, "content-length")) continue;
    if (http_iequals(k, "host")) has_host = true;
    head += k + ": " + v + "\r\n";
  }
  if (!has_host) head += "Host: " + url_.authority() + "\r\n";
  head += "User-Agent: space/" SPACE_VERSION "\r\n";
  if (!req.body.empty() || (req.method != "GET" && req.method != "HEAD" && req.method != "DELETE" &&
                            req.method != "OPTIONS")) {
    head += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  }
  head += "\r\n";
  head += req.body;
  c.head_request = req.method == "HEAD";
  c.stream->set_read_timeout(options_.io_timeout);
  if (auto ec = c.stream->write_all(head)) {
    *nothing_read = true;
    return fail(http_transport_error(ec, origin(), "sending the request", options_.io_timeout));
  }
  TRY_VOID(http_read_head(c, origin(), options_.io_timeout, nothing_read));
  HttpResponse r;
  r.status = c.parser->get().result_int();
  r.headers = http_headers_of(*c.parser);
  return r;
}

Result<HttpResponse> HttpClient::request(const HttpRequest& req) {
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<HttpStream::Conn> c;
    bool reused = false;
    {
      std::lock_guard lock(mu_);
      while (!idle_.empty() && !c) {
        c = std::move(idle_.back());
        idle_.pop_back();
        if (!http_idle_usable(*c)) c.reset();
      }
    }
    if (c) {
      reused = true;
    } else {
      c = TRY(connect());
    }
    bool nothing_read = false;
    auto r = exchange(*c, req, &nothing_read);
    if (!r) {
      // A kept-alive connection the server closed meanwhile: once more on a new one.
      if (reused && nothing_read && attempt == 0) continue;
      return r;
    }
    char buf[16 * 1024];
    for (;;) {
      size_t got = TRY(http_read_body_some(*c, origin(), buf, sizeof buf, options_.io_timeout));
      if (got == 0) break;
      if (r->body.size() + got > options_.body_limit) {
        return fail(Code::kPayloadTooLarge, origin() + ": the response to " + req.method + " " +
                                                req.target + " is larger than " +
                                                std::to_string(options_.body_limit) + " bytes");
      }
      r->body.append(buf, got);
    }
    if (c->parser->is_done() && c->parser->get().keep_alive() && c->buffer.size() == 0) {
      std::lock_guard lock(mu_);
      if (idle_.size() < options_.max_idle) idle_.push_back(std::move(c));
    }
    return r;
  }
}

Result<std::unique_ptr<HttpStream>> HttpClient::stream(const HttpRequest& req) {
  auto c = TRY(connect());
  bool nothing_read = false;
  HttpResponse head = TRY(exchange(*c, req, &nothing_read));
  std::unique_ptr<HttpStream> s(new HttpStream());
  s->origin_ = origin();
  s->conn_ = std::move(c);
  s->status_ = head.status;
  s->headers_ = std::move(head.headers);
  s->set_read_timeout(options_.io_timeout);
  return s;
}

}  // namespace space::cluster
