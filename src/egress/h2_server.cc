// HTTP/2 from a sandbox on an intercepted TLS connection (h2_server.h). An nghttp2 server
// session per connection; each stream's head goes through the request stage HTTP/1.1 requests
// go through (request_stage.h: decided on, rewritten, audited), is forwarded through
// h2_upstream.h, and its response head goes through the same response stage, the body masked
// with a Redactor of its own. Nothing is buffered beyond what flow control lets in: a request body
// is taken from the sandbox (its window reopened) only as it goes upstream, and a response is
// taken from the upstream only as it goes to the sandbox.
#include "egress/h2_server.h"

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/beast/http.hpp>
#include <cstring>

#include "egress/ascii.h"
#include "egress/h2_upstream.h"
#include "egress/http_rules.h"
#include "egress/request_stage.h"

namespace space::egress {
namespace {

namespace bhttp = boost::beast::http;
using nlohmann::json;

constexpr uint32_t kH2MaxStreams = 100;
// Masked response bytes a stream may hold while the sandbox's window is closed.
constexpr size_t kH2DownBuffer = 64 * 1024;
// HTTP/1.1 exchanges (each a thread and an upstream connection) one HTTP/2 connection may have
// running at once, as browsers do per host; further streams wait their turn, so a sandbox
// cannot turn one connection into 100 upstream connections.
constexpr size_t kH1Parallel = 6;

int select_h2(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
              unsigned int inlen, void*) {
  for (std::string_view want : {std::string_view("h2"), std::string_view("http/1.1")}) {
    unsigned int pos = 0;
    while (pos < inlen) {
      unsigned int len = in[pos];
      if (len == 0 || len > inlen - pos - 1) return SSL_TLSEXT_ERR_ALERT_FATAL;  // malformed
      if (std::string_view(reinterpret_cast<const char*>(in + pos + 1), len) == want) {
        *out = in + pos + 1;
        *outlen = static_cast<unsigned char>(len);
        return SSL_TLSEXT_ERR_OK;
      }
      pos += 1 + len;
    }
  }
  return SSL_TLSEXT_ERR_NOACK;
}

bool connection_specific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "te" || name == "trailer";
}

class H2Conn;

// One request/response exchange: what the sandbox sent, where it went, what comes back.
struct H2Stream final : ResponseSink {
  H2Stream(H2Conn* c, int32_t i, std::shared_ptr<const MaskPatterns> patterns)
      : conn(c), id(i), redactor(std::move(patterns)) {}
  size_t pull_body(uint8_t* out, size_t max, bool* end) override;
  void on_head(int status, Fields fields) override;
  void on_data(std::string_view raw) override;
  void on_trailers(Fields fields) override;
  void on_end(int status, std::string error) override;

  H2Conn* conn;
  int32_t id;
  // The request as received.
  std::string method, scheme, authority, path, protocol;
  Fields fields;
  size_t header_bytes = 0;
  // The request body: bytes received but not yet sent upstream (their window stays closed).
  std::string up;
  bool req_end = false, pushed_end = false;
  // Where it went.
  bool forwarding = false, refused = false;
  H2Client* up_client = nullptr;  // the HTTP/2 upstream connection carrying it, if any
  int32_t up_id = -1;
  std::unique_ptr<H1Exchange> h1;
  std::optional<H1Exchange::Request> h1_waiting;  // for a free HTTP/1.1 slot (kH1Parallel)
  bool drop_h1 = false;
  // The response.
  bool head_sent = false, down_end = false;
  std::string down;  // masked, waiting for the sandbox's window
  size_t down_unconsumed = 0;
  std::optional<Fields> trailers;
  Redactor redactor;
  Forward fwd;  // the request stage's verdict, once forwarded
  int status = 0;
  uint64_t bytes_up = 0, bytes_down = 0;
};

class H2Conn {
 public:
  H2Conn(Shared& g, std::shared_ptr<Gateway::State> st, TlsStream& tls, int fd, Host host,
         uint16_t port)
      : g_(g),
        st_(std::move(st)),
        ssl_(tls.native_handle()),
        fd_(fd),
        host_(std::move(host)),
        port_(port),
        stage_(g_, *st_, Arrival{RequestMode::kIntercepted, true, &host_, port_}),
        wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        pool_(std::make_shared<H1Pool>()) {}

  ~H2Conn() {
    streams_.clear();  // joins HTTP/1.1 workers before the pool and the session go
    if (session_) nghttp2_session_del(session_);
  }

  void run();

  // Used by H2Stream.
  void respond(H2Stream& s, int status, const std::string& message);
  void deny(H2Stream& s, const std::string& reason);
  void submit_head(H2Stream& s, const Fields& fields);
  void reset(H2Stream& s, uint32_t code);
  void resume(H2Stream& s) {
    if (s.head_sent) nghttp2_session_resume_data(session_, s.id);
  }
  void consume_client(int32_t id, size_t n) {
    if (n) nghttp2_session_consume(session_, id, n);
  }
  void consumed_upstream(H2Stream& s, size_t n) {
    if (n && s.up_client) s.up_client->consumed(s.up_id, n);
  }
  void cancel_upstream(H2Stream& s) {
    if (s.up_client) {
      consumed_upstream(s, std::exchange(s.down_unconsumed, 0));
      s.up_client->cancel(s.up_id);
      s.up_client = nullptr;
    }
    if (s.h1) s.drop_h1 = true;
    s.h1_waiting.reset();
  }
  // Forgets an upstream connection that is going away.
  void drop_client(H2Client* c) {
    for (auto& [id, s] : streams_)
      if (s->up_client == c) s->up_client = nullptr;
  }
  const Host& host() const { return host_; }
  uint16_t port() const { return port_; }
  RequestStage& stage() { return stage_; }

 private:
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_header(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                       const uint8_t*, size_t, uint8_t, void*);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_data_chunk(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int on_stream_close(nghttp2_session*, int32_t, uint32_t, void*);

  H2Stream* find(int32_t id) {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second.get();
  }
  void start(H2Stream& s);
  void body_arrived(H2Stream& s);
  void audit_request(H2Stream& s);
  bool pump_client(bool& progress);
  bool service_h1();
  void start_waiting_h1();

  Shared& g_;
  std::shared_ptr<Gateway::State> st_;
  SSL* ssl_;
  int fd_;
  Host host_;
  uint16_t port_;
  RequestStage stage_;  // every stream's decision and response checks (request_stage.h)
  UniqueFd wake_;       // HTTP/1.1 workers write it when they have something
  nghttp2_session* session_ = nullptr;
  std::string out_;  // serialized frames not yet taken by SSL_write
  std::shared_ptr<H1Pool> pool_;
  // The upstream: HTTP/2 (h2_), or HTTP/1.1 (h1_mode_, first connection in spare_).
  std::unique_ptr<H2Client> h2_;
  std::vector<std::unique_ptr<H2Client>> retired_;  // replaced, finishing their streams
  bool h1_mode_ = false;
  std::unique_ptr<UpConn> spare_;
  std::map<int32_t, std::unique_ptr<H2Stream>> streams_;
  std::vector<std::unique_ptr<H2Stream>> closed_;  // closed in a callback, freed after it
};

ssize_t send_response_body(nghttp2_session* session, int32_t id, uint8_t* buf, size_t len,
                           uint32_t* flags, nghttp2_data_source* src, void*) {
  auto* s = static_cast<H2Stream*>(src->ptr);
  size_t n = std::min(len, s->down.size());
  std::memcpy(buf, s->down.data(), n);
  s->down.erase(0, n);
  size_t k = std::min(n, s->down_unconsumed);
  s->down_unconsumed -= k;
  s->conn->consumed_upstream(*s, k);
  if (s->down.empty() && s->down_end) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (s->trailers && !s->trailers->empty()) {
      auto nv = nv_of(*s->trailers);
      if (nghttp2_submit_trailer(session, id, nv.data(), nv.size()) == 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return static_cast<ssize_t>(n);
  }
  if (n == 0) return NGHTTP2_ERR_DEFERRED;
  return static_cast<ssize_t>(n);
}

// ---- H2Stream: what the upstream hands back ----------------------------------------------

size_t H2Stream::pull_body(uint8_t* out, size_t max, bool* end) {
  size_t n = std::min(max, up.size());
  std::memcpy(out, up.data(), n);
  up.erase(0, n);
  conn->consume_client(id, n);  // the sandbox may send as much again
  *end = req_end && up.empty();
  return n;
}

void H2Stream::on_head(int st, Fields in) {
  if (head_sent) return;
  bhttp::response_header<> res;
  res.result(static_cast<unsigned>(st));
  res.version(11);
  for (auto& [n, v] : in) res.insert(n, v);
  if (auto refused = conn->stage().respond_head(fwd, res, redactor)) {
    conn->cancel_upstream(*this);
    conn->respond(*this, refused->status, refused->message);
    return;
  }
  Fields out{{":status", std::to_string(st)}};
  for (auto& f : res) {
    std::string n = ascii_lower(std::string_view(f.name_string().data(), f.name_string().size()));
    if (connection_specific(n)) continue;
    out.emplace_back(std::move(n), std::string(f.value()));
  }
  status = st;
  conn->submit_head(*this, out);
}

void H2Stream::on_data(std::string_view raw) {
  if (!head_sent || refused) {
    conn->consumed_upstream(*this, raw.size());
    return;
  }
  bytes_down += raw.size();
  down_unconsumed += raw.size();
  down += redactor.active() ? redactor.feed(raw) : std::string(raw);
  conn->resume(*this);
}

void H2Stream::on_trailers(Fields in) {
  if (refused) return;
  // No DATA follows trailers: the body's held-back bytes go out first, since mask() runs the
  // same redactor over each whole string.
  if (redactor.active()) down += redactor.finish();
  Fields out;
  for (auto& [n, v] : in) {
    std::string name = ascii_lower(redactor.active() ? redactor.mask(n) : n);
    if (connection_specific(name)) continue;
    out.emplace_back(std::move(name), redactor.active() ? redactor.mask(v) : v);
  }
  trailers = std::move(out);
}

void H2Stream::on_end(int st, std::string error) {
  if (refused) return;
  if (error.empty()) {
    if (redactor.active()) down += redactor.finish();
    down_end = true;
    conn->resume(*this);
    return;
  }
  if (head_sent) {
    // Part of the response went to the sandbox already: it must not look complete.
    conn->reset(*this, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  if (st == 403) {
    conn->stage().refuse(fwd, 403, error);
  } else {
    conn->stage().audit_error(conn->host(), conn->port(), error);
  }
  conn->respond(*this, st == 403 ? 403 : 502, error);
}

// ---- H2Conn ------------------------------------------------------------------------------

void H2Conn::reset(H2Stream& s, uint32_t code) {
  s.refused = true;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, code);
}

void H2Conn::submit_head(H2Stream& s, const Fields& fields) {
  auto nv = nv_of(fields);
  nghttp2_data_provider prd{};
  prd.source.ptr = &s;
  prd.read_callback = send_response_body;
  if (nghttp2_submit_response(session_, s.id, nv.data(), nv.size(), &prd) == 0) s.head_sent = true;
}

void H2Conn::respond(H2Stream& s, int status, const std::string& message) {
  cancel_upstream(s);
  s.refused = true;
  s.forwarding = false;
  s.status = status;
  s.down = "SPACE egress gateway: " + message + "\n";
  s.down_end = true;
  s.trailers.reset();
  // What the sandbox sent on this stream and what it still sends is dropped, its window reopened.
  consume_client(s.id, s.up.size());
  s.up.clear();
  if (s.head_sent) {  // cannot happen for a refusal: only before a response head
    reset(s, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  submit_head(s, {{":status", std::to_string(status)},
                  {"content-type", "text/plain; charset=utf-8"},
                  {"content-length", std::to_string(s.down.size())}});
}

void H2Conn::deny(H2Stream& s, const std::string& reason) {
  stage_.deny(host_.name, port_, reason, s.method, s.path);
}

void H2Conn::audit_request(H2Stream& s) {
  stage_.audit_request(s.fwd, s.status, s.bytes_up, s.bytes_down, s.redactor.redactions());
}

int H2Conn::on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<H2Conn*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  self->streams_[frame->hd.stream_id] =
      std::make_unique<H2Stream>(self, frame->hd.stream_id, self->g_.secrets->mask_patterns());
  return 0;
}

int H2Conn::on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  auto* self = static_cast<H2Conn*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  H2Stream* s = self->find(frame->hd.stream_id);
  if (!s) return 0;
  // Counted as HTTP/1.1 would carry them ("name: value\r\n"), against the same limit; past it
  // nothing more is kept and the request is answered 431.
  s->header_bytes += namelen + valuelen + 4;
  if (s->header_bytes > kRequestHeaderLimit) return 0;
  std::string_view n(reinterpret_cast<const char*>(name), namelen);
  std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":method") {
    s->method = std::move(v);
  } else if (n == ":scheme") {
    s->scheme = std::move(v);
  } else if (n == ":authority") {
    s->authority = std::move(v);
  } else if (n == ":path") {
    s->path = std::move(v);
  } else if (n == ":protocol") {
    s->protocol = std::move(v);
  } else {
    s->fields.emplace_back(std::string(n), std::move(v));
  }
  return 0;
}

int H2Conn::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<H2Conn*>(user);
  H2Stream* s = self->find(frame->hd.stream_id);
  if (!s) return 0;
  bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    s->req_end = end;
    self->start(*s);
  } else if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) && end) {
    // Request trailers are not forwarded (as for HTTP/1.1); the body is complete.
    s->req_end = true;
    self->body_arrived(*s);
  }
  return 0;
}

int H2Conn::on_data_chunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                          size_t len, void* user) {
  auto* self = static_cast<H2Conn*>(user);
  H2Stream* s = self->find(id);
  if (!s || !s->forwarding) {
    nghttp2_session_consume(session, id, len);
    return 0;
  }
  s->up.append(reinterpret_cast<const char*>(data), len);
  s->bytes_up += len;
  self->body_arrived(*s);
  return 0;
}

int H2Conn::on_stream_close(nghttp2_session* session, int32_t id, uint32_t, void* user) {
  auto* self = static_cast<H2Conn*>(user);
  auto it = self->streams_.find(id);
  if (it == self->streams_.end()) return 0;
  H2Stream& s = *it->second;
  if (s.forwarding && s.status) self->audit_request(s);
  self->cancel_upstream(s);  // and reopens the upstream's window for what was not delivered
  // Bytes received and never forwarded still count against the connection's window.
  if (!s.up.empty()) nghttp2_session_consume_connection(session, s.up.size());
  self->closed_.push_back(std::move(it->second));  // destroyed outside nghttp2's callbacks
  self->streams_.erase(it);
  return 0;
}

void H2Conn::body_arrived(H2Stream& s) {
  if (!s.forwarding) return;
  if (s.up_client) s.up_client->resume(s.up_id);
  // HTTP/1.1 exchanges take the body in service_h1().
}

void H2Conn::start(H2Stream& s) {
  auto refuse = [&](int status, const std::string& why) {
    deny(s, why);
    respond(s, status, why);
  };
  if (s.header_bytes > kRequestHeaderLimit) {
    respond(s, 431,
            "the request header section is over " + std::to_string(kRequestHeaderLimit) + " bytes");
    return;
  }
  if (s.method == "CONNECT" || !s.protocol.empty())
    return refuse(400,
                  "CONNECT is not carried inside an intercepted connection (no tunnels in "
                  "tunnels); open a new connection to the proxy for each tunnel");
  // The target: :authority, else the Host field; both, if given, must agree (RFC 9113 §8.3.1),
  // and the request stage checks that it names this connection's host.
  std::string authority = s.authority;
  size_t host_fields = 0;
  for (auto& [n, v] : s.fields) {
    if (n != "host") continue;
    ++host_fields;
    if (authority.empty()) authority = v;
    if (v != authority) {
      return refuse(421, "Host \"" + v.substr(0, 256) + "\" and :authority \"" +
                             authority.substr(0, 256) + "\" differ");
    }
  }
  if (host_fields > 1) return refuse(400, "more than one Host header");
  bhttp::request_header<> req;
  req.method_string(s.method);
  req.target(s.path);
  req.version(11);
  req.set(bhttp::field::host, authority);
  bool te_trailers = false;
  for (auto& [n, v] : s.fields) {
    if (n == "host") continue;
    if (n == "te" && iequals(v, "trailers")) te_trailers = true;
    req.insert(n, v);
  }
  if (auto problem = framing_problem_of(req))
    return refuse(400, "ambiguous request framing: " + *problem);
  // Where it goes, whether it may, and the head as it leaves, as for HTTP/1.1
  // (request_stage.h).
  Verdict verdict = stage_.decide(req);
  if (auto* r = std::get_if<LocalReply>(&verdict)) return respond(s, r->status, r->message);
  s.fwd = std::move(std::get<Forward>(verdict));
  // The target as the stage left it (a credential may have gone into its query).
  const std::string target(req.target());

  // The upstream: connected on the first request, HTTP/2 if it offers it.
  if (h2_ && !h2_->usable()) retired_.push_back(std::move(h2_));  // GOAWAY: a new connection
  if (!h2_ && !h1_mode_) {
    auto c = connect_upstream(g_, *st_, host_, port_, true);
    if (!c) {
      if (c.error().code() == Code::kPermissionDenied) return refuse(403, c.error().message());
      stage_.audit_error(host_, port_, c.error().message());
      return respond(s, 502, c.error().message());
    }
    if ((*c)->alpn == "h2") {
      h2_ = std::make_unique<H2Client>(std::move(*c));
    } else {
      h1_mode_ = true;
      spare_ = std::move(*c);
    }
  }
  ++g_.requests;
  s.forwarding = true;
  if (h2_) {
    Fields out{
        {":method", s.method}, {":scheme", "https"}, {":authority", authority}, {":path", target}};
    for (auto& f : req) {
      std::string n = ascii_lower(std::string_view(f.name_string().data(), f.name_string().size()));
      if (n == "host" || connection_specific(n)) continue;
      out.emplace_back(std::move(n), std::string(f.value()));
    }
    if (te_trailers) out.emplace_back("te", "trailers");  // gRPC asks for it; HTTP/2 allows it
    s.up_id = h2_->submit(out, !s.req_end, &s);
    if (s.up_id > 0) s.up_client = h2_.get();
    if (s.up_id < 0) {
      s.forwarding = false;
      return respond(s, 502, "opening a stream to the upstream failed");
    }
    return;
  }
  // HTTP/1.1: the same header, a body framed by its Content-Length or chunked.
  bool has_cl = req.count(bhttp::field::content_length) > 0;
  bool chunked = !s.req_end && !has_cl;
  std::string head = s.method + " " + target + " HTTP/1.1\r\nHost: " + authority + "\r\n";
  std::string cookies;  // HTTP/2 may split Cookie into fields: one field for HTTP/1.1
  for (auto& f : req) {
    if (f.name() == bhttp::field::host) continue;
    if (f.name() == bhttp::field::cookie) {
      if (!cookies.empty()) cookies += "; ";
      cookies.append(f.value().data(), f.value().size());
      continue;
    }
    head.append(f.name_string().data(), f.name_string().size());
    head += ": ";
    head.append(f.value().data(), f.value().size());
    head += "\r\n";
  }
  if (!cookies.empty()) head += "Cookie: " + cookies + "\r\n";
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  head += "\r\n";
  s.h1_waiting = H1Exchange::Request{host_, port_, std::move(head), chunked, s.method == "HEAD"};
  start_waiting_h1();
}

void H2Conn::start_waiting_h1() {
  size_t running = 0;
  for (auto& [id, s] : streams_) running += s->h1 && !s->h1->over();
  for (auto& [id, s] : streams_) {
    if (running >= kH1Parallel) return;
    if (!s->h1_waiting) continue;
    s->h1 = std::make_unique<H1Exchange>(g_, st_, pool_, std::move(*s->h1_waiting),
                                         std::move(spare_), wake_.get());
    s->h1_waiting.reset();
    ++running;
  }
}

// Moves request body to HTTP/1.1 workers and their responses to the streams. True if a
// response moved (the caller sends it and comes back for more).
bool H2Conn::service_h1() {
  start_waiting_h1();
  bool moved = false;
  for (auto& [id, sp] : streams_) {
    H2Stream& s = *sp;
    if (!s.h1) continue;
    if (s.forwarding && !s.pushed_end && s.h1->wants_body() && (!s.up.empty() || s.req_end)) {
      consume_client(s.id, s.up.size());
      s.h1->push_body(s.up, s.req_end);
      s.up.clear();
      s.pushed_end = s.req_end;
    }
    size_t room = s.down.size() < kH2DownBuffer ? kH2DownBuffer - s.down.size() : 0;
    moved |= s.h1->deliver(s, room);
    if (s.drop_h1) {
      s.h1.reset();
      s.drop_h1 = false;
    }
  }
  return moved;
}

// Reads what the sandbox sent and writes what is queued for it, without blocking. False when
// the connection is over.
bool H2Conn::pump_client(bool& progress) {
  uint8_t buf[16384];
  for (;;) {
    size_t got = 0;
    ERR_clear_error();
    if (SSL_read_ex(ssl_, buf, sizeof buf, &got) == 1) {
      progress = true;
      st_->up.take(got, st_->cancel.get());
      if (nghttp2_session_mem_recv(session_, buf, got) < 0) return false;
      continue;
    }
    int err = SSL_get_error(ssl_, 0);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) break;
    ERR_clear_error();
    return false;  // closed or broken
  }
  for (;;) {
    if (out_.empty()) {
      const uint8_t* data = nullptr;
      ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) return false;
      if (n == 0) break;
      out_.assign(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    size_t put = 0;
    ERR_clear_error();
    if (SSL_write_ex(ssl_, out_.data(), out_.size(), &put) == 1) {
      progress = true;
      st_->down.take(put, st_->cancel.get());
      out_.erase(0, put);
      continue;
    }
    int err = SSL_get_error(ssl_, 0);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) break;
    ERR_clear_error();
    return false;
  }
  return nghttp2_session_want_read(session_) || nghttp2_session_want_write(session_) ||
         !out_.empty();
}

void H2Conn::run() {
  if (!wake_) return;
  nghttp2_session_callbacks* cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_option* opt;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);  // consumed only as forwarded
  nghttp2_session_server_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kH2MaxStreams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(kRequestHeaderLimit)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  auto idle = g_.options.idle_timeout;
  auto last = std::chrono::steady_clock::now();
  for (;;) {
    bool progress = false;
    if (!pump_client(progress)) break;
    if (h2_ && !h2_->pump() && h2_->open_streams() == 0) {
      drop_client(h2_.get());
      h2_.reset();
    }
    std::erase_if(retired_, [this](auto& r) {
      bool done = !r->pump() || r->open_streams() == 0;
      if (done) drop_client(r.get());
      return done;
    });
    // What the upstreams produced goes to the sandbox at once, and what the sandbox sent to the
    // workers: a worker may hold more than one delivery's worth, which no wake-up announces,
    // and a request (or its body) read by pump_client reaches its worker only through
    // service_h1. So loop while either side moves; poll only once both are quiet (or, after
    // 64 turns, without waiting).
    bool open = true, busy = true;
    for (int i = 0; i < 64 && open && busy; ++i) {
      bool moved = service_h1();
      closed_.clear();
      bool pumped = false;
      open = pump_client(pumped);
      closed_.clear();
      progress |= pumped;
      busy = moved || pumped;
    }
    if (!open) break;
    if (progress) last = std::chrono::steady_clock::now();
    pollfd p[4];
    int n = 0;
    p[n++] = {fd_, static_cast<short>(POLLIN | (out_.empty() ? 0 : POLLOUT)), 0};
    p[n++] = {wake_.get(), POLLIN, 0};
    p[n++] = {st_->cancel.get(), POLLIN, 0};
    if (h2_)
      p[n++] = {h2_->fd(), static_cast<short>(POLLIN | (h2_->wants_write() ? POLLOUT : 0)), 0};
    auto left = idle - std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - last);
    if (left.count() <= 0) break;
    // Retired upstreams finish on a short tick rather than a poll entry of their own.
    int wait = busy ? 0 : retired_.empty() ? static_cast<int>(left.count()) : 50;
    int r = ::poll(p, static_cast<nfds_t>(n), wait);
    if (r < 0 && errno != EINTR) break;
    if (p[2].revents) break;  // the sandbox is being detached
    if (p[1].revents) {
      uint64_t v;
      (void)!::read(wake_.get(), &v, sizeof v);
    }
    if (r > 0) last = std::chrono::steady_clock::now();
  }
  nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
  const uint8_t* data = nullptr;
  ssize_t n = nghttp2_session_mem_send(session_, &data);
  if (n > 0) (void)SSL_write(ssl_, data, static_cast<int>(n));
}

}  // namespace

void offer_h2(SSL_CTX* ctx) { SSL_CTX_set_alpn_select_cb(ctx, select_h2, nullptr); }

void serve_h2(Shared& g, std::shared_ptr<Gateway::State> st, TlsStream& tls, int fd,
              const Host& host, uint16_t port) {
  H2Conn c(g, std::move(st), tls, fd, host, port);
  c.run();
}

}  // namespace space::egress
