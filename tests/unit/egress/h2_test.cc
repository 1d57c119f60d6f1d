// HTTP/2 between a sandbox and the gateway (src/egress/h2_server.cc), with nghttp2 on both
// sides: the test's client is the gateway's own HTTP/2 client session (H2Client) over a real
// TLS connection (a socketpair) to serve_h2, which forwards to a real HTTP/1.1 TLS upstream on
// 127.0.0.1. Checks that a request is authorized, gets its credential, and comes back masked
// (also when the upstream writes the value across several DATA frames), that a denied path is
// refused on its stream while the connection's other streams go on, and that a foreign
// :authority and CONNECT are refused.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "../temp_dir.h"
#include "egress/ca.h"
#include "egress/h2_server.h"
#include "egress/h2_upstream.h"
#include "loopback_listener.h"

namespace space::egress {
namespace {

constexpr char kSecret[] = "h2-unit-secret-6d1f0b3a9e";
constexpr char kPlaceholder[] = "space_ph_TOKEN_0123456789abcdef0123456789abcdef";

// An upstream of the test: where it listens, and the request heads it received.
class TestUpstream {
 public:
  virtual ~TestUpstream() = default;
  virtual uint16_t port() const = 0;
  virtual std::vector<std::string> heads() = 0;
};

// A minimal HTTP/1.1 TLS upstream: answers every request with its Authorization header echoed
// in a header and in the body, the body written in small pieces (the value straddles them).
class H1Upstream : public TestUpstream {
 public:
  explicit H1Upstream(std::shared_ptr<SSL_CTX> ctx) : ctx_(std::move(ctx)) {
    auto l = test_support::listen_loopback();
    lfd_ = std::move(l.fd);
    port_ = l.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~H1Upstream() {
    stop_ = true;
    ::shutdown(lfd_.get(), SHUT_RDWR);
    thread_.join();
    for (auto& t : conns_) t.join();
  }
  uint16_t port() const override { return port_; }
  std::vector<std::string> heads() override {
    std::lock_guard l(mu_);
    return heads_;
  }

 private:
  void serve() {
    for (;;) {
      int c = ::accept4(lfd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0 || stop_) {
        if (c >= 0) ::close(c);
        return;
      }
      conns_.emplace_back([this, c] { handle(UniqueFd(c)); });
    }
  }
  void handle(UniqueFd fd) {
    TlsStream tls(fd.get(), ctx_, -1);
    tls.set_timeout(std::chrono::seconds(20));
    if (!tls.accept(nullptr)) return;
    std::string in;
    char buf[4096];
    for (;;) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        boost::system::error_code ec;
        size_t n = tls.read_some(boost::asio::buffer(buf), ec);
        if (ec || n == 0) return;
        in.append(buf, n);
      }
      std::string head = in.substr(0, end + 4);
      in.erase(0, end + 4);
      {
        std::lock_guard l(mu_);
        heads_.push_back(head);
      }
      std::string auth;
      size_t at = head.find("\r\nauthorization: ");
      if (at == std::string::npos) at = head.find("\r\nAuthorization: ");
      if (at != std::string::npos) {
        size_t from = at + 17;
        auth = head.substr(from, head.find("\r\n", from) - from);
      }
      std::string body = "start " + auth + " end";
      // /ok/gzip answers in a content coding, which a host a secret is bound to may not use.
      std::string coding =
          head.find(" /ok/gzip ") != std::string::npos ? "Content-Encoding: gzip\r\n" : "";
      std::string out = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                        "\r\nX-Echo: " + auth + "\r\n" + coding + "\r\n";
      boost::system::error_code ec;
      auto write = [&](std::string_view s) {
        while (!s.empty() && !ec) s.remove_prefix(tls.write_some(boost::asio::buffer(s), ec));
      };
      write(out);
      // The body in pieces of 7 bytes, each its own TLS record and (through the gateway) its
      // own DATA frame: the value is split across several of them.
      for (size_t i = 0; i < body.size() && !ec; i += 7) {
        write(std::string_view(body).substr(i, 7));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (ec) return;
    }
  }

  std::shared_ptr<SSL_CTX> ctx_;
  UniqueFd lfd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> conns_;
  std::mutex mu_;
  std::vector<std::string> heads_;
};

// A minimal HTTP/2 TLS upstream (nghttp2 server session, one connection at a time): answers
// every request with its authorization echoed in a header, in the body (DATA frames of 7 bytes,
// so the value straddles several) and in a trailer, then grpc-status 0 as a trailer too.
class H2Upstream : public TestUpstream {
 public:
  explicit H2Upstream(std::shared_ptr<SSL_CTX> ctx) : ctx_(std::move(ctx)) {
    auto l = test_support::listen_loopback();
    lfd_ = std::move(l.fd);
    port_ = l.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~H2Upstream() override {
    stop_ = true;
    ::shutdown(lfd_.get(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const override { return port_; }
  std::vector<std::string> heads() override {
    std::lock_guard l(mu_);
    return heads_;
  }

 private:
  struct Req {
    std::string head, auth, body;
    size_t sent = 0;
  };

  void serve() {
    for (;;) {
      int c = ::accept4(lfd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0 || stop_) {
        if (c >= 0) ::close(c);
        return;
      }
      UniqueFd fd(c);
      TlsStream tls(fd.get(), ctx_, -1);
      tls.set_timeout(std::chrono::seconds(20));
      if (!tls.accept(nullptr)) continue;
      EXPECT_EQ(tls.alpn(), "h2");
      handle(tls);
    }
  }

  void handle(TlsStream& tls) {
    nghttp2_session_callbacks* cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(
        cbs,
        [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* n, size_t nl, const uint8_t* v,
           size_t vl, uint8_t, void* u) -> int {
          auto* self = static_cast<H2Upstream*>(u);
          Req& r = self->reqs_[f->hd.stream_id];
          std::string name(reinterpret_cast<const char*>(n), nl);
          std::string value(reinterpret_cast<const char*>(v), vl);
          r.head += name + ": " + value + "\r\n";
          if (name == "authorization") r.auth = value;
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cbs, [](nghttp2_session* s, const nghttp2_frame* f, void* u) -> int {
          auto* self = static_cast<H2Upstream*>(u);
          if (!(f->hd.flags & NGHTTP2_FLAG_END_STREAM) || !self->reqs_.count(f->hd.stream_id))
            return 0;
          Req& r = self->reqs_[f->hd.stream_id];
          {
            std::lock_guard l(self->mu_);
            self->heads_.push_back(r.head);
          }
          r.body = "start " + r.auth + " end";
          Fields h{{":status", "200"}, {"x-echo", r.auth}};
          std::vector<nghttp2_nv> nv;
          for (auto& [n, v] : h)
            nv.push_back({(uint8_t*)n.data(), (uint8_t*)v.data(), n.size(), v.size(), 0});
          nghttp2_data_provider prd{};
          prd.read_callback = [](nghttp2_session* s, int32_t id, uint8_t* buf, size_t len,
                                 uint32_t* flags, nghttp2_data_source*, void* u) -> ssize_t {
            auto* self = static_cast<H2Upstream*>(u);
            Req& r = self->reqs_[id];
            size_t n = std::min({len, size_t{7}, r.body.size() - r.sent});
            std::memcpy(buf, r.body.data() + r.sent, n);
            r.sent += n;
            if (r.sent == r.body.size()) {
              *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
              Fields t{{"x-echo-trailer", r.auth}, {"grpc-status", "0"}};
              std::vector<nghttp2_nv> tv;
              for (auto& [tn, tval] : t)
                tv.push_back(
                    {(uint8_t*)tn.data(), (uint8_t*)tval.data(), tn.size(), tval.size(), 0});
              nghttp2_submit_trailer(s, id, tv.data(), tv.size());
            }
            return static_cast<ssize_t>(n);
          };
          nghttp2_submit_response(s, f->hd.stream_id, nv.data(), nv.size(), &prd);
          return 0;
        });
    nghttp2_session* session;
    nghttp2_session_server_new(&session, cbs, this);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
    char buf[16384];
    boost::system::error_code ec;
    while (!stop_ && (nghttp2_session_want_read(session) || nghttp2_session_want_write(session))) {
      const uint8_t* out;
      ssize_t n;
      while ((n = nghttp2_session_mem_send(session, &out)) > 0 && !ec) {
        std::string_view w(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
        while (!w.empty() && !ec) w.remove_prefix(tls.write_some(boost::asio::buffer(w), ec));
      }
      if (ec) break;
      size_t got = tls.read_some(boost::asio::buffer(buf), ec);
      if (ec || nghttp2_session_mem_recv(session, reinterpret_cast<uint8_t*>(buf), got) < 0) break;
    }
    nghttp2_session_del(session);
    reqs_.clear();
  }

  std::shared_ptr<SSL_CTX> ctx_;
  UniqueFd lfd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::map<int32_t, Req> reqs_;  // the server thread's only
  std::mutex mu_;
  std::vector<std::string> heads_;
};

struct Collected : ResponseSink {
  size_t pull_body(uint8_t*, size_t, bool* end) override {
    *end = true;
    return 0;
  }
  void on_head(int s, Fields f) override {
    status = s;
    fields = std::move(f);
  }
  void on_data(std::string_view raw) override { body += raw; }
  void on_trailers(Fields f) override { trailers = std::move(f); }
  void on_end(int, std::string e) override {
    ended = true;
    error = std::move(e);
  }
  std::string field(std::string_view name) const {
    for (auto& [n, v] : fields)
      if (n == name) return v;
    return "";
  }
  int status = 0;
  Fields fields, trailers;
  std::string body, error;
  bool ended = false;
};

class H2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    // As in spaced: a peer that closes first must not kill the process (TLS writes are send()s).
    ::signal(SIGPIPE, SIG_IGN);
    auto ca = SandboxCa::create("sb_h2test", std::chrono::hours(1));
    ASSERT_TRUE(ca) << ca.error().message();
    auto up_ca = SandboxCa::create("upstream", std::chrono::hours(1));
    ASSERT_TRUE(up_ca);
    std::string sandbox_ca_file = (dir_.path() / "sandbox-ca.crt").string();
    std::string up_ca_file = (dir_.path() / "up-ca.crt").string();
    std::ofstream(sandbox_ca_file) << (*ca)->cert_pem();
    std::ofstream(up_ca_file) << (*up_ca)->cert_pem();
    auto up_leaf = (*up_ca)->leaf("up.example.test");
    ASSERT_TRUE(up_leaf);
    auto up_ctx = server_context(*up_leaf);
    ASSERT_TRUE(up_ctx);
    if (h2_upstream_) {
      offer_h2(up_ctx->get());
      upstream_ = std::make_unique<H2Upstream>(*up_ctx);
    } else {
      upstream_ = std::make_unique<H1Upstream>(*up_ctx);
    }

    g_.options.resolve["up.example.test:443"] = "127.0.0.1:" + std::to_string(upstream_->port());
    g_.options.idle_timeout = std::chrono::seconds(10);
    g_.options.audit = [this](const std::string&, const std::string& kind, nlohmann::json d) {
      std::lock_guard l(audit_mu_);
      audit_.push_back({kind, std::move(d)});
    };
    auto def = SecretDef::from_json(
        "TOKEN", {{"value", kSecret}, {"hosts", {"up.example.test"}}, {"profiles", {"t"}}});
    ASSERT_TRUE(def) << def.error().message();
    g_.secrets = std::make_shared<SecretStore>(std::map<std::string, SecretDef>{{"TOKEN", *def}});
    auto uctx = upstream_context({up_ca_file});
    ASSERT_TRUE(uctx);
    g_.upstream_ctx = *uctx;
    auto profile =
        EgressProfile::from_json({{"allow", {{{"host", "up.example.test"}, {"paths", {"/ok/"}}}}},
                                  {"allow_networks", {"127.0.0.1/32"}}});
    ASSERT_TRUE(profile) << profile.error().message();
    auto policy = Policy::make("t", *profile, {});
    ASSERT_TRUE(policy);
    std::shared_ptr<SandboxCa> shared_ca(std::move(*ca));
    st_ = std::make_shared<Gateway::State>(
        SandboxEgress{"sb_h2test", *policy, {Grant{"TOKEN", kPlaceholder}}, shared_ca});
    st_->cancel = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));

    // The gateway's side of an intercepted connection, as proxy.cc sets it up.
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
    gw_fd_ = UniqueFd(sv[0]);
    auto leaf = shared_ca->leaf("up.example.test");
    ASSERT_TRUE(leaf);
    auto sctx = server_context(*leaf);
    ASSERT_TRUE(sctx);
    offer_h2(sctx->get());
    gateway_ = std::thread([this, sctx = *sctx] {
      TlsStream tls(gw_fd_.get(), sctx, st_->cancel.get());
      tls.set_timeout(std::chrono::seconds(20));
      if (auto r = tls.accept(nullptr); !r) {
        gateway_error_ = r.error().message();
        return;
      }
      negotiated_ = tls.alpn();
      serve_h2(g_, st_, tls, gw_fd_.get(), *normalize_host("up.example.test"), 443);
    });

    // The sandbox's side: an HTTP/2 client offering h2 only.
    auto conn = std::make_unique<UpConn>();
    conn->fd = std::make_unique<FdStream>(UniqueFd(sv[1]));
    auto cctx = upstream_context({sandbox_ca_file});
    ASSERT_TRUE(cctx);
    conn->tls = std::make_unique<TlsStream>(conn->fd->fd(), *cctx, -1);
    conn->tls->set_timeout(std::chrono::seconds(20));
    conn->tls->offer_alpn(std::string_view("\x02h2", 3));
    auto r = conn->tls->connect("up.example.test", false);
    ASSERT_TRUE(r) << r.error().message();
    conn->alpn = conn->tls->alpn();
    ASSERT_EQ(conn->alpn, "h2");
    client_ = std::make_unique<H2Client>(std::move(conn));
  }

  void TearDown() override {
    client_.reset();  // closes the client's end: the gateway's loop ends
    if (gateway_.joinable()) {
      uint64_t one = 1;
      (void)!::write(st_->cancel.get(), &one, sizeof one);
      gateway_.join();
    }
  }

  // Drives the client until every sink has ended (or 30 s pass, for a loaded machine).
  void run(std::vector<Collected*> sinks) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (auto* s : sinks) all &= s->ended;
      if (all) return;
      if (!client_->pump()) break;
      pollfd p{client_->fd(), static_cast<short>(POLLIN | (client_->wants_write() ? POLLOUT : 0)),
               0};
      ::poll(&p, 1, 100);
    }
    for (auto* s : sinks)
      EXPECT_TRUE(s->ended) << "a stream did not end; the gateway's TLS accept: "
                            << (gateway_error_.empty() ? "ok" : gateway_error_);
  }

  int32_t get(const std::string& path, Collected* sink,
              const std::string& authority = "up.example.test", const std::string& method = "GET") {
    // A CONNECT request has neither :scheme nor :path (RFC 9113 §8.5).
    Fields f{{":method", method}};
    if (method != "CONNECT") f.emplace_back(":scheme", "https");
    f.emplace_back(":authority", authority);
    if (method != "CONNECT") f.emplace_back(":path", path);
    f.emplace_back("authorization", std::string("Bearer ") + kPlaceholder);
    return client_->submit(f, false, sink);
  }

  std::vector<std::pair<std::string, nlohmann::json>> events(const std::string& kind) {
    std::lock_guard l(audit_mu_);
    std::vector<std::pair<std::string, nlohmann::json>> out;
    for (auto& e : audit_)
      if (e.first == kind) out.push_back(e);
    return out;
  }

  test_support::TempDir dir_{"space-h2-test"};
  Shared g_;
  std::shared_ptr<Gateway::State> st_;
  bool h2_upstream_ = false;
  std::unique_ptr<TestUpstream> upstream_;
  UniqueFd gw_fd_;
  std::thread gateway_;
  std::string negotiated_, gateway_error_;
  std::unique_ptr<H2Client> client_;
  std::mutex audit_mu_;
  std::vector<std::pair<std::string, nlohmann::json>> audit_;
};

TEST_F(H2Test, InjectsTheCredentialAndMasksItsEchoSplitAcrossFrames) {
  Collected s;
  ASSERT_GT(get("/ok/echo", &s), 0);
  run({&s});
  EXPECT_EQ(negotiated_, "h2");
  EXPECT_EQ(s.status, 200) << s.error << s.body;
  std::string masked = std::string(sizeof kSecret - 1, '*');
  EXPECT_EQ(s.body, "start Bearer " + masked + " end");
  EXPECT_EQ(s.field("x-echo"), "Bearer " + masked);
  auto heads = upstream_->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("Bearer ") + kSecret), std::string::npos) << heads[0];
  EXPECT_NE(heads[0].find("GET /ok/echo HTTP/1.1\r\nHost: up.example.test\r\n"), std::string::npos)
      << heads[0];
  EXPECT_NE(heads[0].find("Accept-Encoding: identity"), std::string::npos) << heads[0];
  auto req = events("egress.request");
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0].second["http2"], true);
  EXPECT_EQ(req[0].second["status"], 200);
  EXPECT_EQ(req[0].second["secrets"], nlohmann::json::array({"TOKEN"}));
  EXPECT_EQ(req[0].second["redactions"], 2);
}

TEST_F(H2Test, DeniedPathIsRefusedOnItsStreamOnly) {
  Collected a, denied, b;
  ASSERT_GT(get("/ok/a", &a), 0);
  ASSERT_GT(get("/private/x", &denied), 0);
  ASSERT_GT(get("/ok/b", &b), 0);
  run({&a, &denied, &b});
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(denied.status, 403);
  EXPECT_NE(denied.body.find("SPACE egress gateway:"), std::string::npos) << denied.body;
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(upstream_->heads().size(), 2u);  // the denied one never left
  auto d = events("egress.denied");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].second["path"], "/private/x");
  EXPECT_EQ(d[0].second["http2"], true);
}

TEST_F(H2Test, ForeignAuthorityGets421) {
  Collected s;
  ASSERT_GT(get("/ok/a", &s, "other.example.test"), 0);
  run({&s});
  EXPECT_EQ(s.status, 421);
  EXPECT_TRUE(upstream_->heads().empty());
}

TEST_F(H2Test, ConnectIsRefused) {
  Collected s;
  int32_t id = get("", &s, "up.example.test:443", "CONNECT");
  ASSERT_GT(id, 0);
  run({&s});
  EXPECT_EQ(s.status, 400) << s.error;
  EXPECT_NE(s.body.find("no tunnels"), std::string::npos) << s.body;
  EXPECT_TRUE(upstream_->heads().empty());
}

class H2UpstreamTest : public H2Test {
 protected:
  H2UpstreamTest() { h2_upstream_ = true; }
};

TEST_F(H2UpstreamTest, ForwardsOverHttp2WithMaskedTrailers) {
  Collected s;
  // As gRPC sends it: te: trailers goes upstream (HTTP/2 allows exactly that value).
  Fields f{{":method", "POST"},
           {":scheme", "https"},
           {":authority", "up.example.test"},
           {":path", "/ok/call"},
           {"te", "trailers"},
           {"authorization", std::string("Bearer ") + kPlaceholder}};
  ASSERT_GT(client_->submit(f, false, &s), 0);
  run({&s});
  EXPECT_EQ(s.status, 200) << s.error << s.body;
  EXPECT_TRUE(s.error.empty()) << s.error;
  std::string masked = "Bearer " + std::string(sizeof kSecret - 1, '*');
  EXPECT_EQ(s.body, "start " + masked + " end");
  EXPECT_EQ(s.field("x-echo"), masked);
  Fields want{{"x-echo-trailer", masked}, {"grpc-status", "0"}};
  EXPECT_EQ(s.trailers, want);
  auto heads = upstream_->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("authorization: Bearer ") + kSecret), std::string::npos)
      << heads[0];
  EXPECT_NE(heads[0].find("te: trailers"), std::string::npos) << heads[0];
  EXPECT_NE(heads[0].find(":authority: up.example.test"), std::string::npos) << heads[0];
  auto req = events("egress.request");
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0].second["http2"], true);
  EXPECT_EQ(req[0].second["redactions"], 3);
}

TEST_F(H2UpstreamTest, ManyStreamsShareTheUpstreamConnection) {
  std::vector<Collected> s(20);
  std::vector<Collected*> all;
  for (auto& c : s) {
    ASSERT_GT(get("/ok/x", &c), 0);
    all.push_back(&c);
  }
  run(all);
  for (auto& c : s) EXPECT_EQ(c.status, 200);
  EXPECT_EQ(upstream_->heads().size(), 20u);
}

TEST_F(H2Test, ManyStreamsOverHttp11WaitTheirTurn) {
  // 20 streams, at most 6 HTTP/1.1 exchanges at once (h2_server.cc kH1Parallel): all answered.
  std::vector<Collected> s(20);
  std::vector<Collected*> all;
  for (auto& c : s) {
    ASSERT_GT(get("/ok/x", &c), 0);
    all.push_back(&c);
  }
  run(all);
  for (auto& c : s) EXPECT_EQ(c.status, 200);
  EXPECT_EQ(upstream_->heads().size(), 20u);
}

TEST_F(H2Test, BoundHostMustAnswerUnencodedAndWhole) {
  // The request asks for identity and loses its Range; a coded answer is refused with 502.
  Collected s;
  Fields f{{":method", "GET"},    {":scheme", "https"},   {":authority", "up.example.test"},
           {":path", "/ok/gzip"}, {"range", "bytes=0-3"}, {"accept-encoding", "gzip"}};
  ASSERT_GT(client_->submit(f, false, &s), 0);
  run({&s});
  EXPECT_EQ(s.status, 502);
  EXPECT_NE(s.body.find("a body in a content coding"), std::string::npos) << s.body;
  auto heads = upstream_->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(heads[0].find("ange:"), std::string::npos) << heads[0];
  EXPECT_NE(heads[0].find("Accept-Encoding: identity"), std::string::npos) << heads[0];
  EXPECT_EQ(heads[0].find("ncoding: gzip"), std::string::npos) << heads[0];
}

TEST_F(H2Test, OversizedHeaderListGets431) {
  Collected s;
  Fields f{{":method", "GET"},
           {":scheme", "https"},
           {":authority", "up.example.test"},
           {":path", "/ok/a"},
           {"x-big", std::string(20000, 'a')}};
  ASSERT_GT(client_->submit(f, false, &s), 0);
  run({&s});
  EXPECT_EQ(s.status, 431) << s.error;
  EXPECT_TRUE(upstream_->heads().empty());
}

}  // namespace
}  // namespace space::egress
