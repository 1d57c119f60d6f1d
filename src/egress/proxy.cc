// One connection from a sandbox to its gateway, served to the end on its own thread:
//  - proxy listener: CONNECT host:port (then TLS, tunneled or intercepted), or absolute-form
//    http:// requests;
//  - transparent TLS listener: the ClientHello's SNI names the target (port 443);
//  - transparent HTTP listener: the Host header names the target (port 80).
// Every request is authorized on its own (a kept-alive connection cannot reuse an earlier
// decision), ambiguous framing is refused, credentials are put only where their definitions say
// on intercepted TLS to a host they are bound to, and every response is masked of every secret
// value spaced knows, whatever the mode.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "egress/ascii.h"
#include "egress/h2_server.h"
#include "egress/http_rules.h"
#include "egress/inject.h"
#include "egress/internal.h"
#include "egress/tls_hello.h"

namespace space::egress {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using nlohmann::json;

constexpr size_t kHeaderLimit = kRequestHeaderLimit;

constexpr size_t kResponseHeaderLimit = 64 * 1024;
// What the gateway buffers per direction beyond the body chunk being moved: a header section,
// a chunk-size line, trailers. Anything longer ends the connection (Beast's buffer_overflow),
// so a client cannot make spaced hold an unbounded chunk line in memory.
constexpr size_t kBufferLimit = 2 * kResponseHeaderLimit;
constexpr size_t kAuditPathMax = 256;

std::string path_only(std::string_view target) {
  std::string p(target.substr(0, target.find('?')));
  if (p.size() > kAuditPathMax) p = p.substr(0, kAuditPathMax) + "...";
  return p;
}

// The status line's reason phrase of a response the gateway gives: the standard phrase and
// why, since that line is all that many clients print of a refused CONNECT (curl: "CONNECT
// tunnel failed, response 403"; pip and urllib: "Tunnel connection failed: 403 <phrase>").
// Visible ASCII only (RFC 9112 allows no CR or LF there), at most 240 bytes.
std::string reason_phrase(std::string_view standard, std::string_view why) {
  std::string out = std::string(standard) + " (SPACE egress: ";
  for (char c : why) {
    if (out.size() >= 240) {
      out += "...";
      break;
    }
    out += c >= 0x20 && c < 0x7f ? c : ' ';
  }
  return out + ")";
}

// A minimal response the gateway itself gives (refusals, errors); always closes.
void respond(AnyStream& s, int status, std::string_view reason, const std::string& message) {
  std::string body = "SPACE egress gateway: " + message + "\n";
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(reason, message) +
                    "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)s.write_all(out);
}

// Why a response from a host a granted secret is bound to cannot be masked reliably, if it
// cannot: a body in a content coding (the gateway asked for identity) or a part of a larger
// representation (a range of a stored value holds a piece no mask recognizes). The upstream's
// own values are not quoted: they could carry the secret.
std::optional<std::string> unmaskable(const http::response_header<>& res) {
  if (res.result_int() == 206) return "a partial (206) response";
  for (auto& f : res) {
    if (f.name() != http::field::content_encoding) continue;
    std::string_view v(f.value().data(), f.value().size());
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    if (!v.empty() && !iequals(v, "identity")) return "a body in a content coding";
  }
  return std::nullopt;
}

// Masks secret values out of every header field's name and value (a name with '*' in it is
// still a valid field name). Fields keep their order.
void mask_fields(http::response_header<>& res, Redactor& redactor) {
  if (!redactor.active()) return;
  std::vector<std::pair<std::string, std::string>> fields;
  bool changed = false;
  for (auto& f : res) {
    std::string_view name(f.name_string().data(), f.name_string().size());
    std::string_view value(f.value().data(), f.value().size());
    // The framing fields stay as they are (a number, "chunked"): masking them would break the
    // message, and they carry no more than the body's length does.
    bool framing =
        f.name() == http::field::content_length || f.name() == http::field::transfer_encoding;
    std::string n = redactor.mask(name), v = framing ? std::string(value) : redactor.mask(value);
    changed |= n != name || v != value;
    fields.emplace_back(std::move(n), std::move(v));
  }
  if (!changed) return;
  res.clear();
  for (auto& [n, v] : fields) res.insert(n, v);
}

// Where an HTTP connection's requests go.
enum class Mode {
  kProxyAbsolute,    // plain proxy: every request names its target (http://host/...)
  kTransparentHttp,  // port 80 listener: the Host header names the target
  kIntercepted,      // TLS terminated for a fixed host:port (CONNECT or transparent TLS)
};

struct Upstream {
  std::string key;  // "host:port"
  std::unique_ptr<FdStream> fd;
  std::unique_ptr<TlsStream> tls;
  std::unique_ptr<AnyStream> stream;
  beast::flat_buffer buf{kBufferLimit};
};

class Connection {
 public:
  Connection(Shared& g, std::shared_ptr<Gateway::State> st, UniqueFd fd)
      : g_(g), st_(std::move(st)), client_fd_(std::move(fd)), client_(&client_fd_) {
    client_fd_.set_stop_fd(st_->cancel.get());
    client_fd_.set_read_timeout(g_.options.idle_timeout);
    client_fd_.set_write_timeout(g_.options.idle_timeout);
  }

  void serve(ListenerKind kind) {
    switch (kind) {
      case ListenerKind::kProxy:
        serve_proxy();
        break;
      case ListenerKind::kTransparentTls:
        serve_tls(std::nullopt, 443);
        break;
      case ListenerKind::kTransparentHttp:
        http_loop(client_, Mode::kTransparentHttp, nullptr, 80);
        break;
      case ListenerKind::kDns:
        break;
    }
  }

 private:
  const Policy& policy() const { return st_->sb.policy; }

  void deny(const std::string& via, const std::string& host, uint16_t port,
            const std::string& reason, json extra = json::object()) {
    ++g_.denied;
    extra["via"] = via;
    extra["host"] = host;
    extra["port"] = port;
    extra["reason"] = reason;
    g_.audit(*st_, "egress.denied", std::move(extra));
  }

  // --- proxy listener -----------------------------------------------------------------------
  void serve_proxy() {
    beast::flat_buffer buf(kBufferLimit);
    auto first = std::make_unique<http::request_parser<http::empty_body>>();
    auto& p = *first;
    p.header_limit(kHeaderLimit);
    boost::system::error_code ec;
    size_t head = http::read_header(client_fd_, buf, p, ec);
    if (!ec && (head > kHeaderLimit || request_head_size(p.get()) > kHeaderLimit)) {
      // Beast bounds each parse window, not the whole section: check the total too.
      respond(client_, 431, "Request Header Fields Too Large",
              "the request header section is over " + std::to_string(kHeaderLimit) + " bytes");
      return;
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != boost::asio::error::eof)
        respond(client_, 400, "Bad Request", "malformed request: " + ec.message());
      return;
    }
    if (p.get().method() == http::verb::connect) {
      if (buf.size() != 0) {
        respond(client_, 400, "Bad Request",
                "bytes sent after CONNECT before the 200 reply; wait for the reply");
        return;
      }
      std::string target(p.get().target());
      auto a = parse_authority(target, 443);
      if (!a) {
        deny("connect", target.substr(0, 256), 0, a.error().message());
        respond(client_, 400, "Bad Request", "bad CONNECT target: " + a.error().message());
        return;
      }
      Decision d = policy().check_host(a->host, a->port);
      if (!d.allowed) {
        deny("connect", a->host.name, a->port, d.reason);
        respond(client_, 403, "Forbidden", d.reason);
        return;
      }
      if (!policy().needs_inspection(a->host, a->port) && !bound_secret(a->host)) {
        // To be tunneled: a host that resolves only to refused addresses (loopback, private,
        // metadata) is refused on the CONNECT itself, with the reason, not reset after it.
        if (auto r = check_resolves(g_, *st_, a->host, a->port);
            !r && r.error().code() == Code::kPermissionDenied) {
          deny("connect", a->host.name, a->port, r.error().message());
          respond(client_, 403, "Forbidden", r.error().message());
          return;
        }
      }
      if (client_.write_all("HTTP/1.1 200 Connection established\r\n\r\n")) return;
      serve_tls(a->host, a->port);
      return;
    }
    http_loop(client_, Mode::kProxyAbsolute, std::move(first), 80, &buf);
  }

  // Peeks at the ClientHello without consuming it (so a tunnel passes it on untouched and an
  // interception hands it to OpenSSL).
  ClientHelloInfo peek_hello() {
    std::string bytes(kMaxClientHello, '\0');
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    size_t last = 0;
    for (;;) {
      ssize_t n = ::recv(client_fd_.fd(), bytes.data(), bytes.size(), MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) return {ClientHelloInfo::Status::kNotTls};
      if (n > 0) {
        auto info = parse_client_hello(std::string_view(bytes.data(), static_cast<size_t>(n)));
        if (info.status != ClientHelloInfo::Status::kNeedMore) return info;
        if (static_cast<size_t>(n) >= bytes.size()) return {ClientHelloInfo::Status::kMalformed};
      } else if (errno != EAGAIN && errno != EINTR) {
        return {ClientHelloInfo::Status::kNotTls};
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return {ClientHelloInfo::Status::kNeedMore};
      // More bytes are on the way: wait for them (poll() reports readable at once while the
      // peeked bytes sit unread, so sleep briefly when nothing new arrived).
      pollfd p[2] = {{client_fd_.fd(), POLLIN, 0}, {st_->cancel.get(), POLLIN, 0}};
      int wait_ms = n > 0 && static_cast<size_t>(n) == last ? 5 : static_cast<int>(left.count());
      if (n > 0) last = static_cast<size_t>(n);
      ::poll(p, 2, std::min<int>(wait_ms, static_cast<int>(left.count())));
      if (p[1].revents) return {ClientHelloInfo::Status::kNeedMore};
    }
  }

  bool bound_secret(const Host& host) const {
    for (auto& gr : st_->sb.grants)
      if (const SecretDef* def = g_.secrets->find(gr.name); def && def->bound_to(host)) return true;
    return false;
  }

  // TLS towards host:port (CONNECT), or towards whatever the SNI names (transparent, nullopt).
  void serve_tls(std::optional<Host> target, uint16_t port) {
    const std::string via = target ? "connect" : "transparent-tls";
    ClientHelloInfo hello = peek_hello();
    using S = ClientHelloInfo::Status;
    std::string who = target ? target->name : std::string("?");
    if (hello.status != S::kOk) {
      deny(via, who, port,
           hello.status == S::kNeedMore ? "no complete TLS ClientHello within 10 s"
                                        : "not a TLS ClientHello (tunnels carry TLS only; "
                                          "send plain HTTP as http:// requests to the proxy)");
      return;
    }
    std::optional<Host> sni;
    if (hello.has_sni) {
      auto h = normalize_host(hello.sni);
      if (!h) {
        deny(via, who, port, "bad SNI: " + h.error().message());
        return;
      }
      sni = *h;
    }
    if (!target) {
      if (!sni) {
        deny(via, "?", port, "TLS without SNI on the transparent listener: no target");
        return;
      }
      Decision d = policy().check_host(*sni, port);
      if (!d.allowed) {
        deny(via, sni->name, port, d.reason);
        refuse_inside_tls(*sni, d.reason);
        return;
      }
      target = sni;
    } else if (sni ? !(*sni == *target) : !target->is_ip()) {
      deny(via, target->name, port,
           "SNI " + (sni ? "\"" + sni->name + "\"" : std::string("(none)")) +
               " does not match the CONNECT target " + target->name);
      return;
    }
    if (policy().needs_inspection(*target, port) || bound_secret(*target)) {
      // The gateway's own TLS server ignores an encrypted_client_hello extension (real or
      // GREASE, as Chromium sends on every connection): the handshake it completes is for the
      // outer SNI, the host just checked, so nothing is hidden from it.
      intercept(*target, port);
    } else if (hello.ech) {
      // Tunneled, the upstream would read the encrypted inner hello and could serve a name the
      // policy never saw.
      deny(via, target->name, port,
           "encrypted ClientHello (ECH) would hide the real target in a tunnel; refused (turn "
           "ECH off in the client, or bind a secret or a path rule to the host so that the "
           "gateway terminates its TLS)");
    } else {
      pass_through(*target, port, via);
    }
  }

  // A transparent TLS connection to a host the policy denies (the DNS stub answers every name,
  // so clients that ignore proxy variables end up here): the gateway completes the handshake
  // with a leaf from the sandbox's own CA and answers the first request with 403 and the
  // reason, so the client reports a refusal instead of a reset. Nothing is dialed. The leaf's
  // TLS context is not kept (a sandbox could name hosts without end); the CA bounds its own
  // leaf cache.
  void refuse_inside_tls(const Host& host, const std::string& reason) {
    auto kc = st_->sb.ca->leaf(host.name);
    if (!kc) return;
    auto ctx = server_context(*kc);
    if (!ctx) return;
    TlsStream tls(client_fd_.fd(), *ctx, st_->cancel.get());
    tls.set_timeout(std::chrono::seconds(10));
    std::string sni;
    if (!tls.accept(&sni)) return;
    AnyStream s(&tls);
    // Read the request head first, so that closing does not reset a request still unread.
    beast::flat_buffer buf(kBufferLimit);
    http::request_parser<http::empty_body> p;
    p.header_limit(kHeaderLimit);
    boost::system::error_code ec;
    http::read_header(s, buf, p, ec);
    if (!ec || ec == http::error::header_limit) respond(s, 403, "Forbidden", reason);
    tls.shutdown();
  }

  void pass_through(const Host& host, uint16_t port, const std::string& via) {
    auto up = dial(g_, *st_, host, port);
    if (!up) {
      if (up.error().code() == Code::kPermissionDenied)
        deny(via, host.name, port, up.error().message());
      else
        g_.audit(*st_, "egress.error",
                 {{"host", host.name}, {"port", port}, {"error", up.error().message()}});
      return;
    }
    auto start = std::chrono::steady_clock::now();
    TunnelBytes b = tunnel(g_, *st_, client_fd_.fd(), up->fd.get());
    g_.audit(*st_, "egress.tunnel",
             {{"via", via},
              {"host", host.name},
              {"port", port},
              {"address", up->address},
              {"bytes_up", b.up},
              {"bytes_down", b.down},
              {"duration_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count()}});
  }

  Result<std::shared_ptr<SSL_CTX>> server_ctx(const Host& host) {
    std::lock_guard lock(st_->ctx_mu);
    auto it = st_->server_ctx.find(host.name);
    if (it != st_->server_ctx.end()) return it->second;
    KeyCert kc = TRY(st_->sb.ca->leaf(host.name));
    auto ctx = TRY(server_context(kc));
    offer_h2(ctx.get());  // intercepted connections may speak HTTP/2 (h2_server.h)
    st_->server_ctx[host.name] = ctx;
    return ctx;
  }

  void intercept(const Host& host, uint16_t port) {
    auto ctx = server_ctx(host);
    if (!ctx) {
      spdlog::warn("egress {}: no certificate for {}: {}", st_->sb.id, host.name,
                   ctx.error().message());
      return;
    }
    TlsStream tls(client_fd_.fd(), *ctx, st_->cancel.get());
    tls.set_timeout(g_.options.idle_timeout);
    std::string sni;
    if (auto r = tls.accept(&sni); !r) {
      // Typically the client does not trust the sandbox CA (a tool with its own trust store).
      deny("intercept", host.name, port, r.error().message());
      return;
    }
    if (tls.alpn() == "h2") {
      serve_h2(g_, st_, tls, client_fd_.fd(), host, port);
    } else {
      AnyStream s(&tls);
      http_loop(s, Mode::kIntercepted, nullptr, port, nullptr, &host);
    }
    tls.shutdown();
  }

  // --- WebSocket ----------------------------------------------------------------------------
  // The upstream accepted a WebSocket handshake (101): checks that it switched to WebSocket with
  // no extension, passes the 101 on (masked like any response head), then relays frames until
  // either side ends (websocket.cc). Audited as one egress.request with status 101.
  void serve_websocket(AnyStream& client, beast::flat_buffer& client_buf,
                       http::response_header<>& res, const Host& host, uint16_t port,
                       const std::string& method, const std::string& path,
                       const std::vector<std::string>& used) {
    json ev = {{"via", "intercept"}, {"host", host.name},       {"port", port},
               {"method", method},   {"path", path_only(path)}, {"status", 101},
               {"websocket", true}};
    if (!used.empty()) ev["secrets"] = used;
    std::string problem;
    if (!iequals(
            std::string_view(res[http::field::upgrade].data(), res[http::field::upgrade].size()),
            "websocket"))
      problem = "the upstream switched to a protocol other than WebSocket";
    else if (res.count(http::field::sec_websocket_extensions))
      problem = "the upstream chose a WebSocket extension the gateway did not offer";
    if (!problem.empty()) {
      up_.reset();
      deny("intercept", host.name, port, "response refused: " + problem,
           {{"method", method}, {"path", path_only(path)}});
      respond(client, 502, "Bad Gateway", problem);
      return;
    }
    strip_hop_by_hop_fields(res);
    Redactor redactor(g_.secrets->mask_patterns());
    mask_fields(res, redactor);
    std::string head =
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\n";
    for (auto& f : res) {
      head.append(f.name_string().data(), f.name_string().size());
      head += ": ";
      head.append(f.value().data(), f.value().size());
      head += "\r\n";
    }
    head += "\r\n";
    if (client.write_all(head)) {
      up_.reset();
      return;
    }
    ++g_.requests;
    std::string client_first = beast::buffers_to_string(client_buf.data());
    client_buf.consume(client_buf.size());
    std::string upstream_first = beast::buffers_to_string(up_->buf.data());
    up_->buf.consume(up_->buf.size());
    auto start = std::chrono::steady_clock::now();
    WebSocketRelayed r =
        relay_websocket(g_, *st_, client, *up_->stream, client_first, upstream_first);
    up_.reset();
    g_.bytes_up += r.up;
    g_.bytes_down += r.down;
    ev["bytes_up"] = r.up;
    ev["bytes_down"] = r.down;
    ev["duration_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    if (redactor.redactions() + r.redactions)
      ev["redactions"] = redactor.redactions() + r.redactions;
    if (!r.error.empty()) ev["error"] = r.error;
    g_.audit(*st_, "egress.request", std::move(ev));
  }

  // --- HTTP ---------------------------------------------------------------------------------
  Result<AnyStream*> upstream_for(const Host& host, uint16_t port, bool tls) {
    std::string key = host.name + ":" + std::to_string(port);
    if (up_ && up_->key == key && up_->buf.size() == 0) {
      // Reuse a kept-alive upstream only if it is still quiet: an idle connection the server
      // has closed (or that has bytes nobody asked for) would fail the next request.
      pollfd p{up_->fd->fd(), POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 0) return up_->stream.get();
    }
    up_.reset();
    auto d = TRY(dial(g_, *st_, host, port));
    auto u = std::make_unique<Upstream>();
    u->key = key;
    u->fd = std::make_unique<FdStream>(std::move(d.fd));
    u->fd->set_stop_fd(st_->cancel.get());
    u->fd->set_read_timeout(g_.options.idle_timeout);
    u->fd->set_write_timeout(g_.options.idle_timeout);
    if (tls) {
      u->tls = std::make_unique<TlsStream>(u->fd->fd(), TRY(g_.upstream()), st_->cancel.get());
      u->tls->set_timeout(g_.options.idle_timeout);
      TRY_VOID(u->tls->connect(host.name, host.is_ip()));
      u->stream = std::make_unique<AnyStream>(u->tls.get());
    } else {
      u->stream = std::make_unique<AnyStream>(u->fd.get());
    }
    up_ = std::move(u);
    return up_->stream.get();
  }

  // Moves one message body from `in` to `out`; `redact` (optional) masks secret values.
  template <bool isRequest>
  bool relay_body(AnyStream& in, beast::flat_buffer& buf,
                  http::parser<isRequest, http::buffer_body>& p, AnyStream& out, Redactor* redact,
                  RateLimiter& limit, uint64_t& count) {
    http::serializer<isRequest, http::buffer_body> sr{p.get()};
    boost::system::error_code ec;
    http::write_header(out, sr, ec);
    if (ec) return false;
    std::string chunk(limit.chunk(64 * 1024), '\0');
    std::string red;
    for (;;) {
      if (!p.is_done()) {
        p.get().body().data = chunk.data();
        p.get().body().size = chunk.size();
        http::read(in, buf, p, ec);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) return false;
        size_t n = chunk.size() - p.get().body().size;
        std::string_view got(chunk.data(), n);
        count += n;
        limit.take(n, st_->cancel.get());
        if (redact) {
          red = redact->feed(got);
          if (p.is_done()) red += redact->finish();
          p.get().body().data = red.data();
          p.get().body().size = red.size();
        } else {
          p.get().body().data = chunk.data();
          p.get().body().size = n;
        }
        p.get().body().more = !p.is_done();
      } else {
        p.get().body().data = nullptr;
        p.get().body().size = 0;
        p.get().body().more = false;
      }
      if (p.get().body().size == 0 && p.get().body().more) continue;
      http::write(out, sr, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return false;
      if (p.is_done() && sr.is_done()) return true;
      if (p.is_done() && !p.get().body().more && sr.is_done()) return true;
    }
  }

  void http_loop(AnyStream& client, Mode mode,
                 std::unique_ptr<http::request_parser<http::empty_body>> first,
                 uint16_t default_port, beast::flat_buffer* first_buf = nullptr,
                 const Host* fixed_host = nullptr) {
    beast::flat_buffer own_buf(kBufferLimit);
    beast::flat_buffer& buf = first_buf ? *first_buf : own_buf;
    const std::string via = mode == Mode::kProxyAbsolute     ? "proxy"
                            : mode == Mode::kTransparentHttp ? "transparent-http"
                                                             : "intercept";
    for (;;) {
      std::unique_ptr<http::request_parser<http::empty_body>> hp;
      if (first) {
        hp = std::move(first);
      } else {
        hp = std::make_unique<http::request_parser<http::empty_body>>();
        hp->header_limit(kHeaderLimit);
        boost::system::error_code ec;
        size_t head = http::read_header(client, buf, *hp, ec);
        if (!ec && (head > kHeaderLimit || request_head_size(hp->get()) > kHeaderLimit)) {
          respond(client, 431, "Request Header Fields Too Large",
                  "the request header section is over " + std::to_string(kHeaderLimit) + " bytes");
          return;
        }
        if (ec) {
          if (ec != http::error::end_of_stream && ec != boost::asio::error::eof &&
              ec != boost::asio::error::operation_aborted && ec != boost::asio::error::timed_out)
            respond(client, 400, "Bad Request", "malformed request: " + ec.message());
          return;
        }
      }
      auto& req = hp->get();
      std::string method(req.method_string());
      std::string target(req.target());
      if (auto problem = framing_problem_of(req)) {
        deny(via, fixed_host ? fixed_host->name : "?", default_port,
             "ambiguous request framing: " + *problem, {{"method", method}});
        respond(client, 400, "Bad Request", "ambiguous request framing: " + *problem);
        return;
      }
      // One Host field at most (RFC 9112 §3.2): with two, the gateway and the upstream could
      // each route by a different one.
      if (req.count(http::field::host) > 1) {
        deny(via, fixed_host ? fixed_host->name : "?", default_port, "more than one Host header",
             {{"method", method}});
        respond(client, 400, "Bad Request", "more than one Host header");
        return;
      }
      // Which host this request goes to.
      Host host;
      uint16_t port = default_port;
      std::string path = target;
      std::string host_header(req[http::field::host]);
      if (mode == Mode::kProxyAbsolute) {
        if (req.method() == http::verb::connect) {
          respond(client, 400, "Bad Request", "CONNECT must be the first request on a connection");
          return;
        }
        auto split = split_absolute_target(target);
        if (!split) {
          const std::string& msg = split.error().message();
          deny(via, "?", 0, msg, {{"method", method}});
          respond(client, 400, "Bad Request", msg);
          return;
        }
        std::string_view auth = split->authority;
        path = std::move(split->path);
        auto a = parse_authority(auth, 80);
        if (!a) {
          deny(via, std::string(auth.substr(0, 256)), 0, a.error().message(), {{"method", method}});
          respond(client, 400, "Bad Request", "bad URL host: " + a.error().message());
          return;
        }
        host = a->host;
        port = a->port;
        req.set(http::field::host, std::string(auth));
        req.target(path);
      } else {
        auto a = parse_authority(host_header, default_port);
        if (!a) {
          deny(via, fixed_host ? fixed_host->name : "?", default_port,
               "bad Host header: " + a.error().message(), {{"method", method}});
          respond(client, 400, "Bad Request", "bad Host header: " + a.error().message());
          return;
        }
        if (mode == Mode::kIntercepted && (!(a->host == *fixed_host) || a->port != default_port)) {
          std::string msg = "Host \"" + host_header.substr(0, 256) +
                            "\" does not match the TLS connection's host " + fixed_host->name;
          deny(via, fixed_host->name, default_port, msg, {{"method", method}});
          respond(client, 421, "Misdirected Request", msg);
          return;
        }
        if (mode == Mode::kTransparentHttp && a->port != 80) {
          respond(client, 400, "Bad Request", "the transparent listener serves port 80 only");
          return;
        }
        host = a->host;
        port = a->port;
      }
      Decision d = policy().check_host(host, port);
      if (d.allowed) d = policy().check_request(host, port, method, path);
      if (!d.allowed) {
        deny(via, host.name, port, d.reason, {{"method", method}, {"path", path_only(path)}});
        respond(client, 403, "Forbidden", d.reason);
        return;
      }
      bool client_keep_alive = req.keep_alive();
      // A WebSocket handshake to an intercepted host is carried (the upgrade is authorized and
      // credentials are injected like any request): Upgrade and Connection survive the
      // hop-by-hop strip, and no extension is offered (permessage-deflate would hide the
      // frames' payloads from masking).
      const bool websocket = mode == Mode::kIntercepted && websocket_upgrade_requested(req);
      strip_hop_by_hop_fields(req);
      if (websocket) {
        req.set(http::field::upgrade, "websocket");
        req.set(http::field::connection, "Upgrade");
        req.erase(http::field::sec_websocket_extensions);
      }

      // Credentials: only inside TLS the gateway terminated, only for requests the secret is
      // bound to, only where its definition says. Elsewhere a placeholder travels as the
      // meaningless string it is.
      std::vector<std::string> used;
      // Requests to a host a granted secret is bound to may have planted a value there: their
      // responses must come back in a form masking can read (docs/egress.md, "What comes back").
      const bool bound = mode == Mode::kIntercepted && bound_secret(host);
      if (mode == Mode::kIntercepted) {
        for (auto& gr : st_->sb.grants) {
          const SecretDef* def = g_.secrets->find(gr.name);
          if (!def || !def->applies(host, method, path)) continue;
          auto value = g_.secrets->value(
              gr.name, [this] { return st_->mint_allowed(); }, st_->sb.id);
          if (!value) {
            // The reason may quote a mint command's stderr: it is for the operator only.
            g_.audit(
                *st_, "credential.error",
                {{"secret", gr.name}, {"host", host.name}, {"error", value.error().message()}});
            if (value.error().code() == Code::kResourceExhausted) {
              respond(client, 429, "Too Many Requests",
                      "credential " + gr.name +
                          ": new tokens were asked for too often from "
                          "this sandbox; retry in a few seconds");
            } else {
              respond(client, 502, "Bad Gateway",
                      "credential " + gr.name +
                          " is unavailable; the reason is in this "
                          "sandbox's audit log (credential.error) for the operator");
            }
            return;
          }
          inject(req, *def, gr.placeholder, *value);
          used.push_back(gr.name);
          ++g_.credential_uses;
          g_.audit(*st_, "credential.use",
                   {{"secret", gr.name},
                    {"host", host.name},
                    {"method", method},
                    {"path", path_only(path)}});
        }
      }
      if (bound) {
        req.set(http::field::accept_encoding, "identity");
        // A range of a stored value is a piece of it that no mask would recognize.
        req.erase(http::field::range);
        req.erase(http::field::if_range);
      }

      auto up = upstream_for(host, port, mode == Mode::kIntercepted);
      if (!up) {
        if (up.error().code() == Code::kPermissionDenied) {
          deny(via, host.name, port, up.error().message(), {{"method", method}});
          respond(client, 403, "Forbidden", up.error().message());
        } else {
          g_.audit(*st_, "egress.error",
                   {{"host", host.name}, {"port", port}, {"error", up.error().message()}});
          respond(client, 502, "Bad Gateway", up.error().message());
        }
        return;
      }
      ++g_.requests;
      uint64_t bytes_up = 0, bytes_down = 0;
      http::request_parser<http::buffer_body> rp{std::move(*hp)};
      rp.body_limit(std::numeric_limits<uint64_t>::max());
      if (!relay_body<true>(client, buf, rp, **up, nullptr, st_->up, bytes_up)) {
        up_.reset();
        respond(client, 502, "Bad Gateway", "sending the request upstream failed");
        return;
      }
      // The response, after any 1xx interim responses.
      Redactor redactor(g_.secrets->mask_patterns());
      std::optional<http::response_parser<http::buffer_body>> resp;
      boost::system::error_code ec;
      for (;;) {
        resp.emplace();
        resp->header_limit(kResponseHeaderLimit);
        resp->body_limit(std::numeric_limits<uint64_t>::max());
        if (method == "HEAD") resp->skip(true);
        size_t head = http::read_header(**up, up_->buf, *resp, ec);
        if (!ec && head > kResponseHeaderLimit) ec = http::error::header_limit;
        if (ec) break;
        int status = resp->get().result_int();
        if (status < 100 || status >= 200 || status == 101) break;
        http::response<http::empty_body> interim{resp->get().result(), 11};
        http::write(client, interim, ec);
        if (ec) return;
      }
      if (!ec && resp->get().result_int() == 101 && websocket) {
        serve_websocket(client, buf, resp->get(), host, port, method, path, used);
        return;
      }
      if (ec || resp->get().result_int() == 101) {
        up_.reset();
        respond(client, 502, "Bad Gateway",
                ec ? "reading the upstream response: " + ec.message()
                   : "protocol upgrades are not supported through the gateway");
        return;
      }
      auto& res = resp->get();
      if (auto problem = framing_problem_of(res)) {
        up_.reset();
        respond(client, 502, "Bad Gateway", "the upstream's response framing is ambiguous");
        return;
      }
      if (bound) {
        if (auto problem = unmaskable(res)) {
          up_.reset();
          deny(via, host.name, port, "response refused: " + *problem,
               {{"method", method}, {"path", path_only(path)}});
          respond(client, 502, "Bad Gateway",
                  "the response from " + host.name + " was refused: " + *problem +
                      "; responses from a host a secret is bound to must be whole and "
                      "unencoded, so that the secret can be masked out of them");
          return;
        }
      }
      bool upstream_keep_alive = res.keep_alive();
      strip_hop_by_hop_fields(res);
      // The reason phrase is the upstream's free text: the standard one replaces it.
      res.reason({});
      mask_fields(res, redactor);
      bool keep = client_keep_alive && upstream_keep_alive;
      res.keep_alive(keep);
      int status = res.result_int();
      bool ok = relay_body<false>(**up, up_->buf, *resp, client,
                                  redactor.active() ? &redactor : nullptr, st_->down, bytes_down);
      g_.bytes_up += bytes_up;
      g_.bytes_down += bytes_down;
      json ev = {{"via", via},           {"host", host.name},       {"port", port},
                 {"method", method},     {"path", path_only(path)}, {"status", status},
                 {"bytes_up", bytes_up}, {"bytes_down", bytes_down}};
      if (!used.empty()) ev["secrets"] = used;
      if (redactor.redactions()) ev["redactions"] = redactor.redactions();
      g_.audit(*st_, "egress.request", std::move(ev));
      if (!ok || !keep) return;
      if (!upstream_keep_alive) up_.reset();
    }
  }

  Shared& g_;
  std::shared_ptr<Gateway::State> st_;
  FdStream client_fd_;
  AnyStream client_;
  std::unique_ptr<Upstream> up_;
};

}  // namespace

// The rules above, for the HTTP/2 streams of h2_server.cc (http_rules.h).
std::optional<std::string> unmaskable_response(const http::response_header<>& res) {
  return unmaskable(res);
}
void mask_response_fields(http::response_header<>& res, Redactor& redactor) {
  mask_fields(res, redactor);
}
std::string audit_path(std::string_view target) { return path_only(target); }

void serve_connection(Shared& g, std::shared_ptr<Gateway::State> st, UniqueFd fd,
                      ListenerKind kind) {
  try {
    Connection c(g, std::move(st), std::move(fd));
    c.serve(kind);
  } catch (const std::exception& e) {
    // Beast reports some failures by exception; untrusted traffic must never take the daemon
    // down, so the connection just ends.
    spdlog::debug("egress: connection ended: {}", e.what());
  }
}

}  // namespace space::egress
