// One request stage for every codec (src/egress/request_stage.h): the same requests go through
// each way a sandbox can speak to the gateway, over real sockets to real upstreams on
// 127.0.0.1: HTTP/1.1 to the proxy (absolute-form), to the transparent port-80 listener, inside
// a CONNECT the gateway intercepts, inside a transparent TLS connection (SNI), HTTP/2 inside a
// CONNECT, and each request as a WebSocket opening handshake. The table says what each request
// must get (allowed, denied host, denied path, denied method, credential into a header and into
// the query, a bound credential that does not apply, a secret that is unavailable (502) or
// asked for too often (429), a WebSocket upgrade, a foreign Host inside intercepted TLS (421),
// a response from a bound host in a form that cannot be masked); every codec of a kind
// (intercepted TLS, or plain HTTP) must then give the same verdict, send the upstream the same
// injected fields, bring back the same masked fields, and write the same audit events.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <thread>

#include "../temp_dir.h"
#include "egress/ascii.h"
#include "egress/ca.h"
#include "egress/h2_server.h"
#include "egress/h2_upstream.h"
#include "egress/internal.h"
#include "loopback_listener.h"

namespace space::egress {
namespace {

using nlohmann::json;

const std::string kToken = "tokSECRETvalue-5f2a9c81e7";  // into Authorization
const std::string kHdr = "hdrSECRETvalue-0b7d33e1a4";    // a configured header
const std::string kQkey = "qkeySECRETvalue-77ac19e2d0";  // a query parameter

std::string lower(std::string s) { return ascii_lower(s); }

// A parsed HTTP/1.1 head: status or request line, fields with lower-case names.
struct Head {
  std::string first;
  std::map<std::string, std::string> fields;
};
Head parse_head(std::string_view text) {
  Head h;
  size_t eol = text.find("\r\n");
  h.first = std::string(text.substr(0, eol));
  while (eol != std::string_view::npos && eol + 2 < text.size()) {
    size_t next = text.find("\r\n", eol + 2);
    std::string_view line = text.substr(eol + 2, next - eol - 2);
    if (line.empty()) break;
    size_t colon = line.find(':');
    std::string value(line.substr(colon + 1));
    value.erase(0, value.find_first_not_of(' '));
    h.fields[lower(std::string(line.substr(0, colon)))] = value;
    eol = next;
  }
  return h;
}

// An upstream of the test (HTTP/1.1, TLS with `ctx` or plain without): one request per
// connection. It echoes the request's Authorization, X-Api-Key and target in response fields
// (X-Echo, X-Key, X-Target), answers a WebSocket handshake with 101, and anything under /gzip/
// with a body in a content coding.
class Upstream {
 public:
  explicit Upstream(std::shared_ptr<SSL_CTX> ctx) : ctx_(std::move(ctx)) {
    auto l = test_support::listen_loopback();
    lfd_ = std::move(l.fd);
    port_ = l.port;
    thread_ = std::thread([this] { serve(); });
  }
  ~Upstream() {
    stop_ = true;
    ::shutdown(lfd_.get(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  std::vector<std::string> take_heads() {
    std::lock_guard l(mu_);
    return std::exchange(heads_, {});
  }

 private:
  void serve() {
    for (;;) {
      int c = ::accept4(lfd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0 || stop_) {
        if (c >= 0) ::close(c);
        return;
      }
      handle(UniqueFd(c));  // one at a time: the test sends one request at a time
    }
  }
  void handle(UniqueFd fd) {
    FdStream plain(std::move(fd));
    plain.set_read_timeout(std::chrono::seconds(20));
    std::unique_ptr<TlsStream> tls;
    if (ctx_) {
      tls = std::make_unique<TlsStream>(plain.fd(), ctx_, -1);
      tls->set_timeout(std::chrono::seconds(20));
      if (!tls->accept(nullptr)) return;
    }
    AnyStream s = tls ? AnyStream(tls.get()) : AnyStream(&plain);
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
      boost::system::error_code ec;
      size_t n = s.read_some(boost::asio::buffer(buf), ec);
      if (ec || n == 0) return;
      in.append(buf, n);
    }
    std::string head = in.substr(0, in.find("\r\n\r\n") + 4);
    {
      std::lock_guard l(mu_);
      heads_.push_back(head);
    }
    Head h = parse_head(head);
    std::string target = h.first.substr(h.first.find(' ') + 1);
    target = target.substr(0, target.rfind(' '));
    std::string echo = "X-Echo: " + h.fields["authorization"] +
                       "\r\nX-Key: " + h.fields["x-api-key"] + "\r\nX-Target: " + target + "\r\n";
    std::string out;
    if (target.starts_with("/gzip/")) {
      out = "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n" + echo +
            "Connection: close\r\n\r\nok\n";
    } else if (iequals(h.fields["upgrade"], "websocket")) {
      out =
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" +
          echo + "\r\n";
    } else {
      out = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n" + echo + "Connection: close\r\n\r\nok\n";
    }
    (void)s.write_all(out);
    if (tls) tls->shutdown();
  }

  std::shared_ptr<SSL_CTX> ctx_;
  UniqueFd lfd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> heads_;
};

// The ways a sandbox speaks to the gateway.
enum class Codec { kProxy, kTransparentHttp, kConnect, kTransparentTls, kHttp2, kWebSocket };
const char* name_of(Codec c) {
  switch (c) {
    case Codec::kProxy:
      return "http1-proxy";
    case Codec::kTransparentHttp:
      return "http1-transparent";
    case Codec::kConnect:
      return "http1-connect-intercepted";
    case Codec::kTransparentTls:
      return "http1-transparent-tls";
    case Codec::kHttp2:
      return "http2";
    case Codec::kWebSocket:
      return "websocket";
  }
  return "?";
}
bool intercepted(Codec c) { return c != Codec::kProxy && c != Codec::kTransparentHttp; }

// One request of the table.
struct Row {
  std::string name;
  std::string host;                     // the target (CONNECT, SNI, URL, Host)
  std::string method, path;             // path: origin-form, with any query
  std::string authority = "";           // the Host/:authority sent, if not `host`
  int want_intercepted = 0;             // the status intercepting codecs answer (0: not sent)
  int want_plain = 0;                   // the status plain HTTP codecs answer (0: not sent)
  std::string want_authorization;       // what the upstream receives, when forwarded
  std::vector<std::string> want_audit;  // the audit kinds, intercepted (then plain: see below)
};

// What one request got, reduced to what must not depend on the codec.
struct Outcome {
  int status = 0;                               // 101 (a WebSocket handshake carried) reads as 200
  std::map<std::string, std::string> echoed;    // X-Echo, X-Key, X-Target as they came back
  std::map<std::string, std::string> upstream;  // the fields the upstream received
  size_t upstream_requests = 0;
  std::vector<std::string> audit;  // kind + data, without what names the codec
  std::string body;
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
  void on_trailers(Fields) override {}
  void on_end(int, std::string) override { ended = true; }
  int status = 0;
  Fields fields;
  std::string body;
  bool ended = false;
};

class RequestStageCodecsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);
    auto ca = SandboxCa::create("sb_codecs", std::chrono::hours(1));
    ASSERT_TRUE(ca) << ca.error().message();
    auto up_ca = SandboxCa::create("upstream", std::chrono::hours(1));
    ASSERT_TRUE(up_ca);
    sandbox_ca_file_ = (dir_.path() / "sandbox-ca.crt").string();
    std::string up_ca_file = (dir_.path() / "up-ca.crt").string();
    std::ofstream(sandbox_ca_file_) << (*ca)->cert_pem();
    std::ofstream(up_ca_file) << (*up_ca)->cert_pem();
    for (std::string host : {"up.example.test", "open.example.test"}) {
      auto leaf = (*up_ca)->leaf(host);
      ASSERT_TRUE(leaf);
      auto ctx = server_context(*leaf);
      ASSERT_TRUE(ctx);
      tls_up_[host] = std::make_unique<Upstream>(*ctx);
      g_.options.resolve[host + ":443"] = "127.0.0.1:" + std::to_string(tls_up_[host]->port());
      g_.options.resolve[host + ":80"] = "127.0.0.1:" + std::to_string(plain_up_.port());
    }
    g_.options.idle_timeout = std::chrono::seconds(10);
    g_.options.audit = [this](const std::string&, const std::string& kind, json d) {
      std::lock_guard l(audit_mu_);
      audit_.push_back({kind, std::move(d)});
    };
    auto def = [](const std::string& name, json j) {
      j["hosts"] = {"up.example.test"};
      j["profiles"] = {"t"};
      auto d = SecretDef::from_json(name, j);
      EXPECT_TRUE(d) << name << ": " << d.error().message();
      return *d;
    };
    std::map<std::string, SecretDef> defs{
        {"TOKEN", def("TOKEN", {{"value", kToken}, {"paths", {"/ok/", "/na-not/", "/gzip/"}}})},
        {"HDR", def("HDR", {{"value", kHdr},
                            {"paths", {"/ok/"}},
                            {"header", "X-Api-Key"},
                            {"format", "Key {}"}})},
        {"QKEY",
         def("QKEY", {{"value", kQkey}, {"paths", {"/q/"}}, {"placeholder_in", {"query:key"}}})},
        {"RATE", def("RATE", {{"value", "rateSECRETvalue-unused-1"}, {"paths", {"/mint/"}}})},
        {"BROKEN", def("BROKEN", {{"value", "brokenSECRETvalue-unused"}, {"paths", {"/broken/"}}})},
    };
    // The gateway process's kind of store: values come from spaced, which may refuse.
    g_.secrets = std::make_shared<SecretStore>(
        defs, [](const std::string& name, const std::string&) -> Result<std::string> {
          if (name == "RATE") return fail(Code::kResourceExhausted, "minted too often");
          if (name == "BROKEN") return fail(Code::kUnavailable, "the mint command failed");
          if (name == "TOKEN") return kToken;
          if (name == "HDR") return kHdr;
          return kQkey;
        });
    auto uctx = upstream_context({up_ca_file}, {}, false);
    ASSERT_TRUE(uctx);
    g_.upstream_ctx = *uctx;
    g_.system_trust_added = true;  // the test's upstreams use the test's CA only
    auto profile = EgressProfile::from_json(
        {{"allow",
          {{{"host", "up.example.test"},
            {"methods", {"GET", "POST"}},
            {"paths", {"/ok/", "/na/", "/q/", "/mint/", "/broken/", "/gzip/", "/ws/"}}},
           // A path rule: its connections are intercepted, though no secret is bound to it.
           {{"host", "open.example.test"}, {"paths", {"/"}}}}},
         {"allow_networks", {"127.0.0.1/32"}}});
    ASSERT_TRUE(profile) << profile.error().message();
    auto policy = Policy::make("t", *profile, {});
    ASSERT_TRUE(policy);
    std::vector<Grant> grants;
    for (auto& [name, d] : defs) {
      placeholders_[name] = make_placeholder(name);
      grants.push_back(Grant{name, placeholders_[name]});
    }
    st_ = std::make_shared<Gateway::State>(
        SandboxEgress{"sb_codecs", *policy, grants, std::shared_ptr<SandboxCa>(std::move(*ca))});
    st_->cancel = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  }

  // The request's fields, as every codec sends them (names as HTTP/2 wants them).
  Fields request_fields(const Row& r, Codec c) {
    Fields f{{"authorization", "Bearer " + placeholders_["TOKEN"]}, {"range", "bytes=0-1"}};
    if (c == Codec::kWebSocket) {
      f.emplace_back("upgrade", "websocket");
      f.emplace_back("connection", "Upgrade");
      f.emplace_back("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
      f.emplace_back("sec-websocket-version", "13");
      f.emplace_back("sec-websocket-extensions", "permessage-deflate");
    }
    return f;
  }
  std::string path_of(const Row& r) {
    std::string p = r.path;
    size_t at = p.find("{QKEY}");
    if (at != std::string::npos) p.replace(at, 6, placeholders_["QKEY"]);
    return p;
  }

  // Reads everything until the peer closes.
  static std::string read_all(AnyStream& s) {
    std::string out;
    char buf[4096];
    for (;;) {
      boost::system::error_code ec;
      size_t n = s.read_some(boost::asio::buffer(buf), ec);
      if (ec || n == 0) return out;
      out.append(buf, n);
    }
  }

  Outcome send(const Row& r, Codec c) {
    for (auto& [h, u] : tls_up_) u->take_heads();
    plain_up_.take_heads();
    {
      std::lock_guard l(audit_mu_);
      audit_.clear();
    }
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ListenerKind kind = c == Codec::kTransparentHttp  ? ListenerKind::kTransparentHttp
                        : c == Codec::kTransparentTls ? ListenerKind::kTransparentTls
                                                      : ListenerKind::kProxy;
    std::thread gateway(
        [this, kind, fd = sv[0]] { serve_connection(g_, st_, UniqueFd(fd), kind); });
    Outcome out = exchange(r, c, UniqueFd(sv[1]));
    gateway.join();
    // Events written after the connection ended (HTTP/2 audits a stream as it closes) are in.
    std::vector<std::string> heads = plain_up_.take_heads();
    for (auto& [h, u] : tls_up_)
      for (auto& head : u->take_heads()) heads.push_back(head);
    out.upstream_requests = heads.size();
    if (!heads.empty()) {
      Head h = parse_head(heads[0]);
      std::string target = h.first.substr(h.first.find(' ') + 1);
      out.upstream["target"] = target.substr(0, target.rfind(' '));
      for (std::string f :
           {"authorization", "x-api-key", "accept-encoding", "range", "sec-websocket-extensions"})
        out.upstream[f] = h.fields.count(f) ? h.fields[f] : "(none)";
    }
    std::lock_guard l(audit_mu_);
    for (auto& [kind, d] : audit_) {
      json n = d;
      for (auto k : {"via", "http2", "websocket", "bytes_up", "bytes_down", "duration_ms"})
        n.erase(k);
      if (n.contains("status") && n["status"] == 101) n["status"] = 200;
      if (n.contains("reason")) {
        // HTTP/2 names the field it checked as the field it is.
        std::string reason = n["reason"];
        if (reason.starts_with(":authority \"")) reason = "Host \"" + reason.substr(12);
        n["reason"] = reason;
      }
      out.audit.push_back(kind + " " + n.dump());
    }
    return out;
  }

  Outcome exchange(const Row& r, Codec c, UniqueFd fd) {
    Outcome out;
    FdStream plain(std::move(fd));
    plain.set_read_timeout(std::chrono::seconds(20));
    const std::string authority = r.authority.empty() ? r.host : r.authority;
    const std::string path = path_of(r);
    if (c == Codec::kConnect || c == Codec::kHttp2 || c == Codec::kWebSocket) {
      if (plain.write_all("CONNECT " + r.host + ":443 HTTP/1.1\r\nHost: " + r.host +
                          ":443\r\n\r\n"))
        return out;
      std::string got;
      char ch;
      while (got.find("\r\n\r\n") == std::string::npos) {
        boost::system::error_code ec;
        if (plain.read_some(boost::asio::buffer(&ch, 1), ec) != 1 || ec) return out;
        got += ch;
      }
      out.status = std::stoi(got.substr(9, 3));
      if (out.status != 200) return out;  // refused on the CONNECT itself
      out.status = 0;
    }
    std::unique_ptr<TlsStream> tls;
    if (intercepted(c)) {
      auto ctx = upstream_context({sandbox_ca_file_}, {}, false);
      EXPECT_TRUE(ctx);
      tls = std::make_unique<TlsStream>(plain.fd(), *ctx, -1);
      tls->set_timeout(std::chrono::seconds(20));
      tls->offer_alpn(c == Codec::kHttp2 ? std::string_view("\x02h2", 3)
                                         : std::string_view("\x08http/1.1", 9));
      auto ok = tls->connect(r.host, false);
      EXPECT_TRUE(ok) << ok.error().message();
      if (!ok) return out;
    }
    if (c == Codec::kHttp2) {
      EXPECT_EQ(tls->alpn(), "h2");
      auto conn = std::make_unique<UpConn>();
      conn->fd = std::make_unique<FdStream>(UniqueFd(::dup(plain.fd())));
      conn->tls = std::move(tls);
      conn->alpn = "h2";
      H2Client client(std::move(conn));
      Fields f{
          {":method", r.method}, {":scheme", "https"}, {":authority", authority}, {":path", path}};
      for (auto& kv : request_fields(r, c)) f.push_back(kv);
      Collected s;
      EXPECT_GT(client.submit(f, false, &s), 0);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!s.ended && std::chrono::steady_clock::now() < deadline && client.pump()) {
        pollfd p{client.fd(), static_cast<short>(POLLIN | (client.wants_write() ? POLLOUT : 0)), 0};
        ::poll(&p, 1, 100);
      }
      EXPECT_TRUE(s.ended);
      out.status = s.status;
      out.body = s.body;
      for (auto& [n, v] : s.fields)
        if (n.starts_with("x-")) out.echoed[n] = v;
      ::shutdown(plain.fd(), SHUT_RDWR);  // the gateway's loop ends
      return out;
    }
    AnyStream s = tls ? AnyStream(tls.get()) : AnyStream(&plain);
    std::string target = c == Codec::kProxy ? "http://" + r.host + path : path;
    std::string req = r.method + " " + target + " HTTP/1.1\r\nHost: " + authority + "\r\n";
    for (auto& [n, v] : request_fields(r, c)) req += n + ": " + v + "\r\n";
    req += "\r\n";
    if (s.write_all(req)) return out;
    std::string resp = read_all(s);
    size_t end = resp.find("\r\n\r\n");
    EXPECT_NE(end, std::string::npos) << resp;
    if (end == std::string::npos) return out;
    Head h = parse_head(resp.substr(0, end + 4));
    out.status = std::stoi(h.first.substr(9, 3));
    out.body = resp.substr(end + 4);
    for (auto& [n, v] : h.fields)
      if (n.starts_with("x-")) out.echoed[n] = v;
    if (out.status == 101) out.status = 200;
    ::shutdown(plain.fd(), SHUT_RDWR);
    return out;
  }

  test_support::TempDir dir_{"space-codecs-test"};
  std::string sandbox_ca_file_;
  Shared g_;
  std::shared_ptr<Gateway::State> st_;
  std::map<std::string, std::unique_ptr<Upstream>> tls_up_;
  Upstream plain_up_{nullptr};
  std::map<std::string, std::string> placeholders_;
  std::mutex audit_mu_;
  std::vector<std::pair<std::string, json>> audit_;
};

const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
      {"allowed_open_host",
       "open.example.test",
       "GET",
       "/x",
       "",
       200,
       200,
       "placeholder",
       {"egress.request"}},
      {"credential_in_header",
       "up.example.test",
       "GET",
       "/ok/a",
       "",
       200,
       200,
       "TOKEN",
       {"credential.use", "credential.use", "egress.request"}},
      {"credential_in_query",
       "up.example.test",
       "GET",
       "/q/x?key={QKEY}&b=1",
       "",
       200,
       200,
       "placeholder",
       {"credential.use", "egress.request"}},
      {"bound_but_not_applicable",
       "up.example.test",
       "GET",
       "/na/x",
       "",
       200,
       200,
       "placeholder",
       {"egress.request"}},
      {"denied_host", "denied.example.test", "GET", "/x", "", 403, 403, "", {"egress.denied"}},
      {"denied_path", "up.example.test", "GET", "/private/x", "", 403, 403, "", {"egress.denied"}},
      {"denied_method", "up.example.test", "DELETE", "/ok/a", "", 403, 403, "", {"egress.denied"}},
      {"secret_unavailable",
       "up.example.test",
       "GET",
       "/broken/x",
       "",
       502,
       200,
       "",
       {"credential.error"}},
      {"secret_rate_limited",
       "up.example.test",
       "GET",
       "/mint/x",
       "",
       429,
       200,
       "",
       {"credential.error"}},
      {"host_mismatch",
       "up.example.test",
       "GET",
       "/ok/a",
       "open.example.test",
       421,
       0,
       "",
       {"egress.denied"}},
      {"bound_host_unmaskable_response",
       "up.example.test",
       "GET",
       "/gzip/x",
       "",
       502,
       200,
       "",
       {"credential.use", "egress.denied"}},
  };
  return kRows;
}

TEST_F(RequestStageCodecsTest, EveryCodecGetsTheSameVerdictEditsMasksAndAudit) {
  const std::vector<Codec> codecs = {Codec::kProxy,   Codec::kTransparentHttp,
                                     Codec::kConnect, Codec::kTransparentTls,
                                     Codec::kHttp2,   Codec::kWebSocket};
  const std::string masked_token = "Bearer " + std::string(kToken.size(), '*');
  for (const Row& r : rows()) {
    std::optional<Outcome> ref_intercepted, ref_plain;
    for (Codec c : codecs) {
      const bool icpt = intercepted(c);
      int want = icpt ? r.want_intercepted : r.want_plain;
      if (want == 0) continue;
      SCOPED_TRACE(r.name + " via " + name_of(c));
      Outcome o = send(r, c);
      EXPECT_EQ(o.status, want) << o.body;
      // What the table says, for every codec.
      if (want == 200) {
        ASSERT_EQ(o.upstream_requests, 1u);
        bool inject = icpt && r.want_authorization == "TOKEN";
        EXPECT_EQ(o.upstream["authorization"],
                  "Bearer " + (inject ? kToken : placeholders_["TOKEN"]));
        EXPECT_EQ(o.echoed["x-echo"], inject ? masked_token : "Bearer " + placeholders_["TOKEN"]);
        bool bound = icpt && r.host == "up.example.test";
        EXPECT_EQ(o.upstream["accept-encoding"], bound ? "identity" : "(none)");
        EXPECT_EQ(o.upstream["range"], bound ? "(none)" : "bytes=0-1");
        EXPECT_EQ(o.upstream["sec-websocket-extensions"], "(none)");
        if (icpt && r.name == "credential_in_header") {
          EXPECT_EQ(o.upstream["x-api-key"], "Key " + kHdr);
          EXPECT_EQ(o.echoed["x-key"], "Key " + std::string(kHdr.size(), '*'));
        }
        if (r.name == "credential_in_query") {
          std::string q = icpt ? kQkey : placeholders_["QKEY"];
          EXPECT_EQ(o.upstream["target"], "/q/x?key=" + q + "&b=1");
          EXPECT_EQ(o.echoed["x-target"],
                    "/q/x?key=" + (icpt ? std::string(kQkey.size(), '*') : q) + "&b=1");
        }
      } else {
        EXPECT_EQ(o.upstream_requests, r.name == "bound_host_unmaskable_response" ? 1u : 0u);
        EXPECT_EQ(o.echoed.count("x-echo"), 0u) << "nothing of the upstream's comes back";
      }
      std::vector<std::string> kinds;
      for (auto& e : o.audit) kinds.push_back(e.substr(0, e.find(' ')));
      std::vector<std::string> want_kinds = r.want_audit;
      if (!icpt) {  // plain HTTP: no credential goes anywhere
        std::erase(want_kinds, "credential.use");
        if (std::erase(want_kinds, "credential.error")) want_kinds = {"egress.request"};
        if (r.name == "bound_host_unmaskable_response") want_kinds = {"egress.request"};
      }
      EXPECT_EQ(kinds, want_kinds);
      // And the same as every other codec of its kind, field for field.
      auto& ref = icpt ? ref_intercepted : ref_plain;
      if (!ref) {
        ref = o;
        continue;
      }
      EXPECT_EQ(o.status, ref->status);
      EXPECT_EQ(o.upstream, ref->upstream);
      EXPECT_EQ(o.echoed, ref->echoed);
      EXPECT_EQ(o.audit, ref->audit);
    }
  }
}

}  // namespace
}  // namespace space::egress
