// One connection from a sandbox to its gateway, served to the end on its own thread:
//  - proxy listener: CONNECT host:port (then TLS, tunneled or intercepted), or absolute-form
//    http:// requests;
//  - transparent TLS listener: the ClientHello's SNI names the target (port 443);
//  - transparent HTTP listener: the Host header names the target (port 80).
// This file is the HTTP/1.1 codec: reading and framing messages, refusing ambiguous framing,
// dialing and relaying. What is decided on each request (on its own: a kept-alive connection
// cannot reuse an earlier decision) and on each response head, where credentials go, and the
// masking of every secret value spaced knows, whatever the mode, are the request stage's
// (request_stage.h), which HTTP/2 and WebSocket handshakes go through too.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "egress/ascii.h"
#include "egress/h2_server.h"
#include "egress/http_rules.h"
#include "egress/internal.h"
#include "egress/request_stage.h"
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
        http_loop(client_, RequestMode::kTransparentHttp, nullptr, 80);
        break;
      case ListenerKind::kDns:
        break;
    }
  }

 private:
  // The request stage of connections (request_stage.h), whose audit says `via`.
  RequestStage stage(const std::string& via) { return RequestStage(g_, *st_, Arrival{.via = via}); }
  void deny(const std::string& via, const std::string& host, uint16_t port,
            const std::string& reason) {
    stage(via).deny(host, port, reason);
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
      RequestStage connect = stage("connect");
      if (auto refused = connect.admit(a->host, a->port)) {
        respond(client_, refused->status, refused->reason, refused->message);
        return;
      }
      if (!connect.must_intercept(a->host, a->port)) {
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
    http_loop(client_, RequestMode::kProxy, std::move(first), 80, &buf);
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
      if (auto refused = stage(via).admit(*sni, port)) {
        refuse_inside_tls(*sni, refused->message);
        return;
      }
      target = sni;
    } else if (sni ? !(*sni == *target) : !target->is_ip()) {
      deny(via, target->name, port,
           "SNI " + (sni ? "\"" + sni->name + "\"" : std::string("(none)")) +
               " does not match the CONNECT target " + target->name);
      return;
    }
    if (stage(via).must_intercept(*target, port)) {
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
    RequestStage stage = this->stage(via);
    auto up = dial(g_, *st_, host, port);
    if (!up) {
      if (up.error().code() == Code::kPermissionDenied)
        stage.deny(host.name, port, up.error().message());
      else
        stage.audit_error(host, port, up.error().message());
      return;
    }
    auto start = std::chrono::steady_clock::now();
    TunnelBytes b = tunnel(g_, *st_, client_fd_.fd(), up->fd.get());
    stage.audit_tunnel(host, port, up->address, b.up, b.down,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start));
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
      http_loop(s, RequestMode::kIntercepted, nullptr, port, nullptr, &host);
    }
    tls.shutdown();
  }

  // --- WebSocket ----------------------------------------------------------------------------
  // The upstream accepted a WebSocket handshake (101): the response stage checks that it
  // switched to WebSocket with no extension and masks the head, which goes on; then frames are
  // relayed until either side ends (websocket.cc). Audited as one egress.request with status 101.
  void serve_websocket(AnyStream& client, beast::flat_buffer& client_buf,
                       http::response_header<>& res, RequestStage& stage, const Forward& fwd,
                       Redactor& redactor) {
    if (auto refused = stage.respond_head(fwd, res, redactor)) {
      up_.reset();
      respond(client, refused->status, refused->reason, refused->message);
      return;
    }
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
    json extra = {{"duration_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - start)
                                      .count()}};
    if (!r.error.empty()) extra["error"] = r.error;
    stage.audit_request(fwd, 101, r.up, r.down, redactor.redactions() + r.redactions,
                        std::move(extra));
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

  void http_loop(AnyStream& client, RequestMode mode,
                 std::unique_ptr<http::request_parser<http::empty_body>> first,
                 uint16_t default_port, beast::flat_buffer* first_buf = nullptr,
                 const Host* fixed_host = nullptr) {
    beast::flat_buffer own_buf(kBufferLimit);
    beast::flat_buffer& buf = first_buf ? *first_buf : own_buf;
    RequestStage stage(g_, *st_, {mode, false, fixed_host, default_port});
    auto answer = [&](const LocalReply& r) { respond(client, r.status, r.reason, r.message); };
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
      if (auto problem = framing_problem_of(req))
        return answer(stage.refuse(400, "ambiguous request framing: " + *problem,
                                   std::string(req.method_string())));
      bool client_keep_alive = req.keep_alive();
      // Where it goes, whether it may, and the head as it leaves (request_stage.h).
      Verdict verdict = stage.decide(req);
      if (auto* r = std::get_if<LocalReply>(&verdict)) return answer(*r);
      const Forward& fwd = std::get<Forward>(verdict);
      auto up = upstream_for(fwd.host, fwd.port, mode == RequestMode::kIntercepted);
      if (!up) {
        if (up.error().code() == Code::kPermissionDenied)
          return answer(stage.refuse(fwd, 403, up.error().message()));
        stage.audit_error(fwd.host, fwd.port, up.error().message());
        respond(client, 502, "Bad Gateway", up.error().message());
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
        if (fwd.method == "HEAD") resp->skip(true);
        size_t head = http::read_header(**up, up_->buf, *resp, ec);
        if (!ec && head > kResponseHeaderLimit) ec = http::error::header_limit;
        if (ec) break;
        int status = resp->get().result_int();
        if (status < 100 || status >= 200 || status == 101) break;
        http::response<http::empty_body> interim{resp->get().result(), 11};
        http::write(client, interim, ec);
        if (ec) return;
      }
      if (!ec && resp->get().result_int() == 101 && fwd.websocket) {
        serve_websocket(client, buf, resp->get(), stage, fwd, redactor);
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
      bool upstream_keep_alive = res.keep_alive();
      if (auto refused = stage.respond_head(fwd, res, redactor)) {
        up_.reset();
        return answer(*refused);
      }
      bool keep = client_keep_alive && upstream_keep_alive;
      res.keep_alive(keep);
      int status = res.result_int();
      bool ok = relay_body<false>(**up, up_->buf, *resp, client,
                                  redactor.active() ? &redactor : nullptr, st_->down, bytes_down);
      stage.audit_request(fwd, status, bytes_up, bytes_down, redactor.redactions());
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
