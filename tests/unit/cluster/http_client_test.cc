// The cluster's HTTP client against a loopback server the test runs: URLs, whole responses and
// keep-alive, limits, refused connections, deadlines, the stop fd, chunked streams read line by
// line, and https with a test CA (trusted, untrusted, wrong name, mutual TLS).
#include "cluster/http_client.h"

#include <gtest/gtest.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "common/tcp_listen.h"
#include "tls/api_certs.h"
#include "tls/x509.h"
#include "unit/cluster/fake_http_server.h"
#include "unit/cluster/test_pki.h"
#include "unit/temp_dir.h"

// A peer that closes while the client (or a test server) still writes must be an error value,
// not a signal that kills the test binary: spaced and space-gateway ignore SIGPIPE in main(),
// and so does this binary, for every test in it.
[[maybe_unused]] static const bool kClusterTestsIgnoreSigpipe = [] {
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}();

namespace space::cluster {
namespace {

using test_support::fake_response;
using test_support::FakeConn;
using test_support::FakeHttpServer;
using test_support::FakeRequest;
using test_support::make_pki;

HttpOptions test_options(std::string service = "etcd") {
  HttpOptions o;
  o.service = std::move(service);
  o.connect_timeout = std::chrono::seconds(5);
  o.io_timeout = std::chrono::seconds(5);
  return o;
}

TEST(HttpUrl, Parses) {
  auto u = parse_http_url("http://127.0.0.1:2379");
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_FALSE(u->https);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 2379);
  EXPECT_EQ(u->path, "");
  u = parse_http_url("https://[fd00::5]:7443/base/");
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->host, "fd00::5");
  EXPECT_EQ(u->path, "/base");
  EXPECT_EQ(u->origin(), "https://[fd00::5]:7443");
  u = parse_http_url("https://kubernetes.default.svc");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->authority(), "kubernetes.default.svc");
  EXPECT_EQ(u->origin(), "https://kubernetes.default.svc:443");
  EXPECT_EQ(parse_http_url("http://[::1]:80")->authority(), "[::1]");
  EXPECT_EQ(parse_http_url("http://[::1]:443")->authority(), "[::1]:443");
  for (const char* bad :
       {"ftp://x", "http://", "http://h:0", "http://h:70000", "http://h:x", "http://u@h:1",
        "http://h:1/?q", "http://[::1", "http://[nothost]:1", "127.0.0.1:2379"}) {
    auto r = parse_http_url(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    }
  }
}

TEST(HttpClient, WholeResponsesOnOneKeptAliveConnection) {
  FakeHttpServer server([](const FakeRequest& r, FakeConn& c) {
    return c.write(fake_response(200,
                                 "{\"echo\":\"" + r.method + " " + r.target + " " + r.body + "\"}",
                                 "X-Seen-Auth: " + r.header("Authorization") + "\r\n"));
  });
  auto client = HttpClient::create(server.url() + "/base", test_options());
  ASSERT_TRUE(client) << client.error().message();
  HttpRequest req;
  req.method = "POST";
  req.target = "/v3/kv/range";
  req.headers = {{"Authorization", "Bearer t0k"}};
  req.body = "{\"key\":\"x\"}";
  auto r = (*client)->request(req);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"echo\":\"POST /base/v3/kv/range {\"key\":\"x\"}\"}");
  EXPECT_EQ(r->header("x-seen-auth"), "Bearer t0k");
  EXPECT_EQ(r->header("content-type"), "application/json");
  auto r2 = (*client)->request(HttpRequest{"GET", "/two", {}, ""});
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ(r2->body, "{\"echo\":\"GET /base/two \"}");
  EXPECT_EQ(server.connections(), 1);
  auto seen = server.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].header("Host"), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(seen[0].header("Content-Length"), "11");
  EXPECT_EQ(seen[1].header("Content-Length"), "");
}

TEST(HttpClient, ServerClosingAKeptAliveConnectionCostsANewOne) {
  FakeHttpServer server([](const FakeRequest&, FakeConn& c) {
    c.write(fake_response(404, "no"));
    return false;  // closes without saying so
  });
  auto client = HttpClient::create(server.url(), test_options());
  ASSERT_TRUE(client);
  for (int i = 0; i < 3; ++i) {
    auto r = (*client)->request(HttpRequest{"GET", "/x", {}, ""});
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(r->status, 404);
    EXPECT_EQ(r->body, "no");
  }
  EXPECT_EQ(server.connections(), 3);
}

TEST(HttpClient, HeadResponseHasNoBody) {
  FakeHttpServer server([](const FakeRequest&, FakeConn& c) {
    return c.write("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nETag: \"e\"\r\n\r\n");
  });
  auto client = HttpClient::create(server.url(), test_options("S3"));
  ASSERT_TRUE(client);
  auto r = (*client)->request(HttpRequest{"HEAD", "/bucket/key", {}, ""});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->header("etag"), "\"e\"");
  EXPECT_EQ(r->body, "");
  auto r2 = (*client)->request(HttpRequest{"HEAD", "/bucket/key2", {}, ""});
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpClient, BodyOverTheLimitIsRefused) {
  FakeHttpServer server([](const FakeRequest&, FakeConn& c) {
    return c.write(fake_response(200, std::string(5000, 'a')));
  });
  HttpOptions o = test_options();
  o.body_limit = 4096;
  auto client = HttpClient::create(server.url(), o);
  ASSERT_TRUE(client);
  auto r = (*client)->request(HttpRequest{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
}

TEST(HttpClient, ConnectionRefusedNamesTheService) {
  uint16_t port;
  {
    auto l = listen_tcp(ListenAddress{AF_INET, "127.0.0.1", 0, true});
    ASSERT_TRUE(l);
    port = l->second;
  }  // closed: nothing listens there now
  std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto client = HttpClient::create(url, test_options());
  ASSERT_TRUE(client);
  auto r = (*client)->request(HttpRequest{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_EQ(r.error().message(), "etcd at " + url + ": connection refused");
}

TEST(HttpClient, SilentServerTimesOut) {
  FakeHttpServer server([](const FakeRequest&, FakeConn& c) {
    c.sleep_ms(10'000);
    return false;
  });
  HttpOptions o = test_options();
  o.io_timeout = std::chrono::milliseconds(300);
  auto client = HttpClient::create(server.url(), o);
  ASSERT_TRUE(client);
  auto t0 = std::chrono::steady_clock::now();
  auto r = (*client)->request(HttpRequest{});
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout) << r.error().message();
  EXPECT_LT(took, std::chrono::seconds(3));
  server.stop();
}

// A watch-like stream: chunked lines written over time, read line by line; then the stop fd
// ends a read that waits for more.
TEST(HttpClient, StreamsChunkedLinesAndStops) {
  FakeHttpServer server([](const FakeRequest&, FakeConn& c) {
    c.write(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n");
    c.chunk("{\"a\":1}\n{\"b\"");
    c.sleep_ms(50);
    c.chunk(":2}\r\n");
    c.chunk("{\"c\":3}\n");
    c.wait_client_gone(20'000);
    return false;
  });
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC));
  HttpOptions o = test_options("the Kubernetes API");
  o.stop_fd = stop.get();
  auto client = HttpClient::create(server.url(), o);
  ASSERT_TRUE(client);
  auto s = (*client)->stream(HttpRequest{"GET", "/watch", {}, ""});
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ((*s)->status(), 200);
  EXPECT_EQ((*s)->header("Content-Type"), "application/json");
  (*s)->set_read_timeout(std::chrono::milliseconds(0));
  for (const char* want : {"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"}) {
    auto line = (*s)->read_line();
    ASSERT_TRUE(line) << line.error().message();
    ASSERT_TRUE(line->has_value());
    EXPECT_EQ(**line, want);
  }
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    uint64_t one = 1;
    (void)!::write(stop.get(), &one, sizeof one);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto line = (*s)->read_line();
  stopper.join();
  ASSERT_FALSE(line);
  EXPECT_NE(line.error().message().find("stopped"), std::string::npos) << line.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(HttpClient, StreamEndsWithTheBody) {
  FakeHttpServer server([](const FakeRequest&, FakeConn& c) {
    c.write("HTTP/1.1 410 Gone\r\nTransfer-Encoding: chunked\r\n\r\n");
    c.chunk("line one\nlast without newline");
    c.write("0\r\n\r\n");
    return true;
  });
  auto client = HttpClient::create(server.url(), test_options());
  ASSERT_TRUE(client);
  auto s = (*client)->stream(HttpRequest{});
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ((*s)->status(), 410);
  auto l1 = (*s)->read_line();
  ASSERT_TRUE(l1 && l1->has_value());
  EXPECT_EQ(**l1, "line one");
  auto l2 = (*s)->read_line();
  ASSERT_TRUE(l2 && l2->has_value());
  EXPECT_EQ(**l2, "last without newline");
  auto l3 = (*s)->read_line();
  ASSERT_TRUE(l3);
  EXPECT_FALSE(l3->has_value());
}

// --- https

bool ok_handler(const FakeRequest& r, FakeConn& c) {
  return c.write(fake_response(200, "secure " + r.target));
}

TEST(HttpClientTls, TrustedCaAndName) {
  auto pki = make_pki({"127.0.0.1"});
  auto ctx = tls::server_context(pki->server);
  ASSERT_TRUE(ctx) << ctx.error().message();
  FakeHttpServer server(ok_handler, *ctx);
  HttpOptions o = test_options("the Kubernetes API");
  o.tls.ca_file = pki->ca_file;
  auto client = HttpClient::create(server.url(), o);
  ASSERT_TRUE(client) << client.error().message();
  for (int i = 0; i < 2; ++i) {
    auto r = (*client)->request(HttpRequest{"GET", "/apis", {}, ""});
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "secure /apis");
  }
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpClientTls, UntrustedCertificateIsRefused) {
  auto pki = make_pki({"127.0.0.1"});
  auto ctx = tls::server_context(pki->server);
  ASSERT_TRUE(ctx);
  FakeHttpServer server(ok_handler, *ctx);
  auto client = HttpClient::create(server.url(), test_options());  // the system's trust store
  ASSERT_TRUE(client) << client.error().message();
  auto r = (*client)->request(HttpRequest{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPermissionDenied) << r.error().message();
  EXPECT_NE(r.error().message().find("the server's TLS certificate is not trusted"),
            std::string::npos)
      << r.error().message();
  EXPECT_TRUE(r.error().message().starts_with("etcd at " + server.url())) << r.error().message();
}

TEST(HttpClientTls, WrongNameIsRefused) {
  auto pki = make_pki({"node1.example"});
  auto ctx = tls::server_context(pki->server);
  ASSERT_TRUE(ctx);
  FakeHttpServer server(ok_handler, *ctx);
  HttpOptions o = test_options();
  o.tls.ca_file = pki->ca_file;
  auto client = HttpClient::create(server.url(), o);
  ASSERT_TRUE(client);
  auto r = (*client)->request(HttpRequest{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPermissionDenied);
  EXPECT_NE(r.error().message().find("not valid for \"127.0.0.1\""), std::string::npos)
      << r.error().message();
}

TEST(HttpClientTls, MutualTls) {
  auto pki = make_pki({"127.0.0.1"});
  auto ctx = tls::server_context(pki->server);
  ASSERT_TRUE(ctx);
  // The server asks for a client certificate signed by the CA.
  auto ca = tls::parse_certs_pem(*tls::read_small_file(pki->ca_file, false));
  ASSERT_TRUE(ca);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx->get()), (*ca)[0].get());
  SSL_CTX_set_verify(ctx->get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  FakeHttpServer server(ok_handler, *ctx);

  HttpOptions o = test_options();
  o.tls.ca_file = pki->ca_file;
  auto anonymous = HttpClient::create(server.url(), o);
  ASSERT_TRUE(anonymous);
  EXPECT_FALSE((*anonymous)->request(HttpRequest{}));

  o.tls.cert_file = pki->client_cert;
  o.tls.key_file = pki->client_key;
  auto client = HttpClient::create(server.url(), o);
  ASSERT_TRUE(client) << client.error().message();
  auto r = (*client)->request(HttpRequest{"GET", "/v1/node", {}, ""});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->body, "secure /v1/node");

  o.tls.key_file = "";
  auto half = HttpClient::create(server.url(), o);
  ASSERT_FALSE(half);
  EXPECT_EQ(half.error().code(), Code::kInvalidArgument);
  o.tls.key_file = pki->dir.path() / "missing.key";
  auto missing = HttpClient::create(server.url(), o);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("missing.key"), std::string::npos);
}

}  // namespace
}  // namespace space::cluster
