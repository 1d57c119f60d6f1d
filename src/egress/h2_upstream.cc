// The upstream side of HTTP/2 streams (h2_upstream.h): an HTTP/2 client session driven by the
// connection's poll loop, and HTTP/1.1 exchanges on worker threads.
#include "egress/h2_upstream.h"

#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "egress/ascii.h"
#include "egress/http_rules.h"

namespace space::egress {
namespace {

namespace h2http = boost::beast::http;

constexpr size_t kUpstreamHeaderLimit = 64 * 1024;  // as for HTTP/1.1 responses (proxy.cc)

}  // namespace

std::vector<nghttp2_nv> nv_of(const Fields& fields) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(fields.size());
  for (auto& [n, v] : fields)
    nv.push_back({const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(n.data())),
                  const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(v.data())), n.size(),
                  v.size(), NGHTTP2_NV_FLAG_NONE});
  return nv;
}

Result<std::unique_ptr<UpConn>> connect_upstream(const Shared& g, const Gateway::State& st,
                                                 const Host& host, uint16_t port, bool offer_h2) {
  auto d = TRY(dial(g, st, host, port));
  auto u = std::make_unique<UpConn>();
  u->fd = std::make_unique<FdStream>(std::move(d.fd));
  u->fd->set_stop_fd(st.cancel.get());
  u->fd->set_read_timeout(g.options.idle_timeout);
  u->fd->set_write_timeout(g.options.idle_timeout);
  u->tls = std::make_unique<TlsStream>(u->fd->fd(), TRY(g.upstream()), st.cancel.get());
  u->tls->set_timeout(g.options.idle_timeout);
  static constexpr std::string_view kBoth = "\x02h2\x08http/1.1";
  static constexpr std::string_view kHttp11 = "\x08http/1.1";
  u->tls->offer_alpn(offer_h2 ? kBoth : kHttp11);
  TRY_VOID(u->tls->connect(host.name, host.is_ip()));
  u->alpn = u->tls->alpn();
  u->stream = std::make_unique<AnyStream>(u->tls.get());
  return u;
}

// ---- H2Client ----------------------------------------------------------------------------

H2Client::H2Client(std::unique_ptr<UpConn> conn) : conn_(std::move(conn)) {
  nghttp2_session_callbacks* cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_option* opt;
  nghttp2_option_new(&opt);
  // The window reopens only as the sandbox takes the bytes (consumed()): back-pressure.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_send_header_block_length(opt, 64 * 1024);
  nghttp2_session_client_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                 {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kUpstreamHeaderLimit}};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
  SSL_set_mode(conn_->tls->native_handle(),
               SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

H2Client::~H2Client() { nghttp2_session_del(session_); }

int32_t H2Client::submit(const Fields& headers, bool has_body, ResponseSink* sink) {
  if (!usable()) return -1;
  auto nv = nv_of(headers);
  nghttp2_data_provider prd{};
  prd.read_callback = read_body;
  int32_t id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(),
                                      has_body ? &prd : nullptr, nullptr);
  if (id > 0) sinks_[id] = Pending{sink};
  return id;
}

void H2Client::resume(int32_t id) { nghttp2_session_resume_data(session_, id); }

void H2Client::consumed(int32_t id, size_t n) {
  if (n == 0) return;
  if (nghttp2_session_find_stream(session_, id))
    nghttp2_session_consume(session_, id, n);
  else
    nghttp2_session_consume_connection(session_, n);
}

void H2Client::cancel(int32_t id) {
  if (sinks_.erase(id)) nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
}

void H2Client::fail_all(const std::string& why) {
  alive_ = false;
  auto sinks = std::move(sinks_);
  sinks_.clear();
  for (auto& [id, p] : sinks) p.sink->on_end(502, why);
}

bool H2Client::pump() {
  if (!alive_) return false;
  SSL* ssl = conn_->tls->native_handle();
  uint8_t buf[16384];
  for (;;) {
    size_t got = 0;
    ERR_clear_error();
    if (SSL_read_ex(ssl, buf, sizeof buf, &got) == 1) {
      ssize_t r = nghttp2_session_mem_recv(session_, buf, got);
      if (r < 0) {
        fail_all(std::string("the upstream broke the HTTP/2 protocol: ") +
                 nghttp2_strerror(int(r)));
        return false;
      }
      continue;
    }
    int err = SSL_get_error(ssl, 0);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) break;
    ERR_clear_error();
    fail_all("the upstream closed the connection");
    return false;
  }
  for (;;) {
    if (out_.empty()) {
      const uint8_t* data = nullptr;
      ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        fail_all(std::string("HTTP/2 to the upstream: ") + nghttp2_strerror(int(n)));
        return false;
      }
      if (n == 0) break;
      out_.assign(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    size_t put = 0;
    ERR_clear_error();
    if (SSL_write_ex(ssl, out_.data(), out_.size(), &put) == 1) {
      out_.erase(0, put);
      continue;
    }
    int err = SSL_get_error(ssl, 0);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) break;
    ERR_clear_error();
    fail_all("writing to the upstream failed");
    return false;
  }
  if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_) &&
      out_.empty()) {
    fail_all("the upstream ended the HTTP/2 connection");
    return false;
  }
  return true;
}

int H2Client::on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                        size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                        void* user) {
  auto* self = static_cast<H2Client*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto it = self->sinks_.find(frame->hd.stream_id);
  if (it == self->sinks_.end()) return 0;
  std::string_view n(reinterpret_cast<const char*>(name), namelen);
  std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  // The same cap as an HTTP/1.1 response's header section: past it the stream is reset (and
  // the sandbox gets a 502), nothing more is held.
  it->second.field_bytes += namelen + valuelen + 4;
  if (it->second.field_bytes > kUpstreamHeaderLimit) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (n == ":status") {
    int s = 0;
    for (char c : v) s = s * 10 + (c - '0');  // nghttp2 checked it is 3 digits
    it->second.status = s;
  } else if (!n.empty() && n[0] != ':') {
    it->second.fields.emplace_back(n, v);
  }
  return 0;
}

int H2Client::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<H2Client*>(user);
  if (frame->hd.type == NGHTTP2_GOAWAY) self->goaway_ = true;
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto it = self->sinks_.find(frame->hd.stream_id);
  if (it == self->sinks_.end()) return 0;
  Pending& p = it->second;
  Fields fields = std::move(p.fields);
  p.fields.clear();
  p.field_bytes = 0;
  if (!p.head_done) {
    if (p.status >= 100 && p.status < 200) return 0;  // interim: not forwarded
    p.head_done = true;
    p.sink->on_head(p.status, std::move(fields));
  } else {
    p.sink->on_trailers(std::move(fields));
  }
  return 0;
}

int H2Client::on_data_chunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                            size_t len, void* user) {
  auto* self = static_cast<H2Client*>(user);
  auto it = self->sinks_.find(id);
  if (it == self->sinks_.end()) {
    nghttp2_session_consume(session, id, len);  // a cancelled stream's bytes
    return 0;
  }
  it->second.sink->on_data(std::string_view(reinterpret_cast<const char*>(data), len));
  return 0;
}

int H2Client::on_stream_close(nghttp2_session*, int32_t id, uint32_t code, void* user) {
  auto* self = static_cast<H2Client*>(user);
  auto it = self->sinks_.find(id);
  if (it == self->sinks_.end()) return 0;
  Pending p = std::move(it->second);
  self->sinks_.erase(it);
  if (code == NGHTTP2_NO_ERROR && p.head_done) {
    p.sink->on_end(0, "");
  } else if (code == NGHTTP2_NO_ERROR) {
    p.sink->on_end(502, "the upstream ended the stream without a response");
  } else {
    p.sink->on_end(
        502, "the upstream reset the stream (" + std::string(nghttp2_http2_strerror(code)) + ")");
  }
  return 0;
}

ssize_t H2Client::read_body(nghttp2_session*, int32_t id, uint8_t* buf, size_t len, uint32_t* flags,
                            nghttp2_data_source*, void* user) {
  auto* self = static_cast<H2Client*>(user);
  auto it = self->sinks_.find(id);
  if (it == self->sinks_.end()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  bool end = false;
  size_t n = it->second.sink->pull_body(buf, len, &end);
  if (end) *flags |= NGHTTP2_DATA_FLAG_EOF;
  if (n == 0 && !end) return NGHTTP2_ERR_DEFERRED;
  return static_cast<ssize_t>(n);
}

// ---- H1Exchange --------------------------------------------------------------------------

H1Exchange::H1Exchange(const Shared& g, std::shared_ptr<Gateway::State> st,
                       std::shared_ptr<H1Pool> pool, Request req, std::unique_ptr<UpConn> conn,
                       int wake_fd)
    : g_(g),
      st_(std::move(st)),
      pool_(std::move(pool)),
      req_(std::move(req)),
      conn_(std::move(conn)),
      wake_fd_(wake_fd) {
  worker_ = std::thread([this] { run(); });
}

H1Exchange::~H1Exchange() {
  {
    std::lock_guard l(mu_);
    cancelled_ = true;
    if (sock_ >= 0) ::shutdown(sock_, SHUT_RDWR);  // ends the worker's blocking I/O at once
  }
  cv_.notify_all();
  worker_.join();
}

void H1Exchange::wake() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

bool H1Exchange::wants_body() {
  std::lock_guard l(mu_);
  return body_.empty() && !body_end_;
}

void H1Exchange::push_body(std::string_view data, bool end) {
  {
    std::lock_guard l(mu_);
    body_.append(data);
    body_end_ |= end;
  }
  cv_.notify_all();
}

bool H1Exchange::deliver(ResponseSink& sink, size_t room) {
  std::optional<std::pair<int, Fields>> head;
  std::string data;
  bool end = false;
  int status = 0;
  std::string error;
  {
    std::lock_guard l(mu_);
    head.swap(head_);
    size_t n = std::min(room, data_.size());
    data = data_.substr(0, n);
    data_.erase(0, n);
    if (data_.empty() && ended_ && !delivered_end_) {
      end = delivered_end_ = true;
      status = end_status_;
      error = end_error_;
    }
  }
  cv_.notify_all();
  if (head) sink.on_head(head->first, std::move(head->second));
  if (!data.empty()) sink.on_data(data);
  if (end) sink.on_end(status, std::move(error));
  return head || !data.empty() || end;
}

void H1Exchange::finish(int status, std::string error) {
  {
    std::lock_guard l(mu_);
    ended_ = true;
    end_status_ = status;
    end_error_ = std::move(error);
  }
  wake();
}

void H1Exchange::run() {
  namespace beast = boost::beast;
  if (!conn_) {
    std::lock_guard l(pool_->mu);
    while (!pool_->idle.empty() && !conn_) {
      auto c = std::move(pool_->idle.back());
      pool_->idle.pop_back();
      // Only a connection that is still quiet: one the server closed would fail the request.
      pollfd p{c->fd->fd(), POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 0) conn_ = std::move(c);
    }
  }
  if (!conn_) {
    auto c = connect_upstream(g_, *st_, req_.host, req_.port, false);
    if (!c) {
      finish(c.error().code() == Code::kPermissionDenied ? 403 : 502, c.error().message());
      return;
    }
    conn_ = std::move(*c);
  }
  {
    std::lock_guard l(mu_);
    if (cancelled_) return;
    sock_ = conn_->fd->fd();
  }
  AnyStream& s = *conn_->stream;
  if (s.write_all(req_.head)) return finish(502, "sending the request upstream failed");
  for (;;) {
    std::string chunk;
    bool end;
    {
      std::unique_lock l(mu_);
      cv_.wait(l, [&] { return cancelled_ || !body_.empty() || body_end_; });
      if (cancelled_) return;
      chunk.swap(body_);
      end = body_end_;
    }
    // The loop hands over the next piece only once this one is taken (wants_body), and the
    // sandbox sends more only once that piece is consumed: say it is taken.
    if (!end) wake();
    if (!chunk.empty()) {
      std::string framed;
      if (req_.chunked) {
        char size[24];
        std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
        framed = size + chunk + "\r\n";
      }
      if (s.write_all(req_.chunked ? framed : chunk))
        return finish(502, "sending the request body upstream failed");
    }
    if (end) {
      if (req_.chunked && s.write_all("0\r\n\r\n"))
        return finish(502, "sending the request body upstream failed");
      break;
    }
  }
  beast::flat_buffer buf(2 * kUpstreamHeaderLimit);
  std::optional<h2http::response_parser<h2http::buffer_body>> p;
  boost::system::error_code ec;
  for (;;) {
    p.emplace();
    p->header_limit(kUpstreamHeaderLimit);
    p->body_limit(std::numeric_limits<uint64_t>::max());
    if (req_.head_method) p->skip(true);
    h2http::read_header(s, buf, *p, ec);
    if (ec) return finish(502, "reading the upstream response: " + ec.message());
    int status = p->get().result_int();
    if (status < 100 || status >= 200 || status == 101) break;
  }
  auto& res = p->get();
  if (res.result_int() == 101) return finish(502, "protocol upgrades are not carried over HTTP/2");
  if (framing_problem_of(res)) return finish(502, "the upstream's response framing is ambiguous");
  bool keep = res.keep_alive();
  strip_hop_by_hop_fields(res);
  Fields fields;
  for (auto& f : res) {
    if (f.name() == h2http::field::transfer_encoding) continue;  // HTTP/2 frames its own body
    fields.emplace_back(
        ascii_lower(std::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value()));
  }
  {
    std::lock_guard l(mu_);
    head_.emplace(res.result_int(), std::move(fields));
  }
  wake();
  std::string chunk(16 * 1024, '\0');
  while (!p->is_done()) {
    res.body().data = chunk.data();
    res.body().size = chunk.size();
    h2http::read(s, buf, *p, ec);
    if (ec == h2http::error::need_buffer) ec = {};
    if (ec) return finish(502, "reading the upstream response: " + ec.message());
    size_t n = chunk.size() - res.body().size;
    if (n == 0) continue;
    {
      std::unique_lock l(mu_);
      cv_.wait(l, [&] { return cancelled_ || data_.size() < kMaxPending; });
      if (cancelled_) return;
      data_.append(chunk.data(), n);
    }
    wake();
  }
  {
    std::lock_guard l(mu_);
    sock_ = -1;
  }
  if (keep && buf.size() == 0) {
    std::lock_guard l(pool_->mu);
    if (pool_->idle.size() < H1Pool::kMax) pool_->idle.push_back(std::move(conn_));
  }
  finish(0, "");
}

}  // namespace space::egress
