// Tests for spaced's API certificates (src/tls/api_certs.cc) and the TLS tunnel
// (src/tls/tunnel.cc): the CA is made once and kept, the server certificate is issued again
// exactly when it should be (names changed, near expiry, not from this CA), broken files are
// errors that say what to do, and a real TLS connection over loopback TCP carries bytes both
// ways with half-close, verifies the name, and refuses a certificate it must not trust.
#include "tls/api_certs.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "../temp_dir.h"
#include "tls/tunnel.h"

namespace space::tls {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;

// A temporary directory, removed with everything in it.
struct TempDir : test_support::TempDir {
  TempDir() : test_support::TempDir("space-tls-test") {}
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

AutoCertOptions options(const fs::path& dir, std::vector<std::string> names, time_t now = 0) {
  AutoCertOptions o;
  o.dir = dir / "tls";
  o.names = std::move(names);
  o.now = now;
  return o;
}

TEST(ApiCerts, MakesTheCaOnceAndKeepsIt) {
  TempDir tmp;
  auto first = ensure_auto_certs(options(tmp.path(), {"localhost", "127.0.0.1", "::1"}));
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_TRUE(first->ca_created);
  EXPECT_TRUE(first->server_issued);
  fs::path dir = tmp.path() / "tls";
  EXPECT_EQ(mode_of(dir / "ca.key"), 0600u);
  EXPECT_EQ(mode_of(dir / "server.key"), 0600u);
  EXPECT_EQ(mode_of(dir / "ca.pem"), 0644u);
  EXPECT_EQ(mode_of(dir / "server.pem"), 0644u);
  EXPECT_EQ(first->ca_file, dir / "ca.pem");
  std::vector<std::string> want = {"localhost", "127.0.0.1", "::1"};
  EXPECT_EQ(subject_alt_names(first->server.cert.get()), want);

  std::string ca = slurp(dir / "ca.pem");
  std::string server = slurp(dir / "server.pem");
  auto again = ensure_auto_certs(options(tmp.path(), {"::1", "localhost", "127.0.0.1"}));
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_FALSE(again->ca_created);
  EXPECT_FALSE(again->server_issued) << "same names in another order: kept";
  EXPECT_EQ(slurp(dir / "server.pem"), server);

  auto renamed = ensure_auto_certs(options(tmp.path(), {"localhost", "host.example"}));
  ASSERT_TRUE(renamed) << renamed.error().message();
  EXPECT_FALSE(renamed->ca_created);
  EXPECT_TRUE(renamed->server_issued);
  EXPECT_EQ(slurp(dir / "ca.pem"), ca);
  EXPECT_NE(slurp(dir / "server.pem"), server);
}

TEST(ApiCerts, ServerCertificateChainsToTheCaAndIsRenewedNearExpiry) {
  TempDir tmp;
  time_t now = std::time(nullptr);
  auto made = ensure_auto_certs(options(tmp.path(), {"localhost"}, now));
  ASSERT_TRUE(made) << made.error().message();
  fs::path dir = tmp.path() / "tls";
  auto ca = parse_certs_pem(slurp(dir / "ca.pem"));
  ASSERT_TRUE(ca);
  X509* leaf = made->server.cert.get();
  EXPECT_EQ(X509_check_issued(ca->front().get(), leaf), X509_V_OK);
  EXPECT_EQ(X509_check_ca(ca->front().get()), 1);
  EXPECT_EQ(X509_check_host(leaf, "localhost", 0, 0, nullptr), 1);
  EXPECT_GT(time_left(leaf, now), hours(24 * 390));

  // 380 days on: within 30 days of its end, so a new one; the CA stays.
  std::string ca_text = slurp(dir / "ca.pem");
  auto later = ensure_auto_certs(options(tmp.path(), {"localhost"}, now + 380 * 86400));
  ASSERT_TRUE(later) << later.error().message();
  EXPECT_FALSE(later->ca_created);
  EXPECT_TRUE(later->server_issued);
  EXPECT_EQ(slurp(dir / "ca.pem"), ca_text);

  // Nearly ten years on the CA itself is replaced.
  auto decade = ensure_auto_certs(options(tmp.path(), {"localhost"}, now + 3640 * 86400L));
  ASSERT_TRUE(decade) << decade.error().message();
  EXPECT_TRUE(decade->ca_created);
  EXPECT_NE(slurp(dir / "ca.pem"), ca_text);
}

TEST(ApiCerts, AServerCertificateFromAnotherCaIsReplaced) {
  TempDir a, b;
  ASSERT_TRUE(ensure_auto_certs(options(a.path(), {"localhost"})));
  ASSERT_TRUE(ensure_auto_certs(options(b.path(), {"localhost"})));
  fs::copy_file(b.path() / "tls" / "server.pem", a.path() / "tls" / "server.pem",
                fs::copy_options::overwrite_existing);
  fs::copy_file(b.path() / "tls" / "server.key", a.path() / "tls" / "server.key",
                fs::copy_options::overwrite_existing);
  auto r = ensure_auto_certs(options(a.path(), {"localhost"}));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r->server_issued);
  EXPECT_FALSE(r->ca_created);
}

TEST(ApiCerts, ABrokenCaIsAnErrorNotReplaced) {
  TempDir tmp;
  ASSERT_TRUE(ensure_auto_certs(options(tmp.path(), {"localhost"})));
  fs::path key = tmp.path() / "tls" / "ca.key";
  { std::ofstream(key) << "garbage\n"; }
  auto r = ensure_auto_certs(options(tmp.path(), {"localhost"}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("ca.key"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("aside"), std::string::npos) << r.error().message();
  EXPECT_EQ(slurp(key), "garbage\n");
}

TEST(ApiCerts, ServerNames) {
  auto n = server_names("MyHost", "10.0.0.5", {"Api.Example", "0:0::1", "10.0.0.5"});
  ASSERT_TRUE(n);
  std::vector<std::string> want = {"localhost", "127.0.0.1", "::1",
                                   "myhost",    "10.0.0.5",  "api.example"};
  EXPECT_EQ(*n, want);
  auto wildcard = server_names("h", "0.0.0.0", {});
  ASSERT_TRUE(wildcard);
  EXPECT_EQ(wildcard->size(), 4u);
  EXPECT_FALSE(server_names("h", "::", {"*.example"}));
  EXPECT_FALSE(server_names("h", "::", {"host:443"}));
}

TEST(ApiCerts, GivenFilesAreCheckedWithClearErrors) {
  TempDir tmp;
  auto made = ensure_auto_certs(options(tmp.path(), {"localhost"}));
  ASSERT_TRUE(made);
  fs::path dir = tmp.path() / "tls";
  auto ok = load_cert_files(dir / "server.pem", dir / "server.key");
  ASSERT_TRUE(ok) << ok.error().message();

  auto missing = load_cert_files(dir / "server.pem", dir / "nope.key");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("nope.key"), std::string::npos);

  ::chmod((dir / "server.key").c_str(), 0644);
  auto loose = load_cert_files(dir / "server.pem", dir / "server.key");
  ASSERT_FALSE(loose);
  EXPECT_NE(loose.error().message().find("chmod 600"), std::string::npos);
  ::chmod((dir / "server.key").c_str(), 0600);

  auto mismatch = load_cert_files(dir / "server.pem", dir / "ca.key");
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.error().message().find("is not the key of"), std::string::npos)
      << mismatch.error().message();
}

// A listening loopback socket and its port.
std::pair<UniqueFd, uint16_t> listen_loopback() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd.get(), 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return {std::move(fd), ntohs(a.sin_port)};
}

UniqueFd connect_loopback(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// A server that terminates one connection and echoes what the client sends until its EOF,
// then closes. Returns what serve_tls returned.
struct EchoServer {
  std::thread thread;
  Result<void> result = {};
  uint16_t port = 0;

  explicit EchoServer(std::shared_ptr<SSL_CTX> ctx) {
    auto [lfd, p] = listen_loopback();
    port = p;
    thread = std::thread([this, ctx, lfd = std::move(lfd)]() mutable {
      UniqueFd tcp(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      auto pair = plaintext_pair();
      ASSERT_TRUE(pair);
      UniqueFd app = std::move(pair->second);
      std::thread echo([fd = app.get()] {
        char buf[4096];
        for (;;) {
          pollfd p{fd, POLLIN, 0};
          ::poll(&p, 1, 5000);
          ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          if (n < 0 && errno == EAGAIN) continue;
          if (n <= 0) break;
          for (ssize_t off = 0; off < n;) {
            pollfd q{fd, POLLOUT, 0};
            ::poll(&q, 1, 5000);
            ssize_t w = ::send(fd, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
            if (w > 0) off += w;
          }
        }
        ::shutdown(fd, SHUT_WR);
      });
      TunnelOptions o;
      o.handshake_timeout = std::chrono::seconds(5);
      result = serve_tls(std::move(tcp), std::move(pair->first), ctx.get(), o);
      echo.join();
    });
  }
  ~EchoServer() {
    if (thread.joinable()) thread.join();
  }
};

TEST(Tunnel, CarriesBytesBothWaysWithHalfClose) {
  TempDir tmp;
  auto made = ensure_auto_certs(options(tmp.path(), {"localhost", "127.0.0.1"}));
  ASSERT_TRUE(made);
  auto sctx = server_context(made->server);
  ASSERT_TRUE(sctx) << sctx.error().message();
  auto cctx = client_context((tmp.path() / "tls" / "ca.pem").string());
  ASSERT_TRUE(cctx) << cctx.error().message();
  EchoServer server(*sctx);
  std::string sent(1 << 20, 'x');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7);
  std::string got;
  {
    auto t = ClientTunnel::start(connect_loopback(server.port), *cctx, "127.0.0.1", {});
    ASSERT_TRUE(t) << t.error().message();
    int fd = t->second.get();
    std::thread writer([&] {
      size_t off = 0;
      while (off < sent.size()) {
        pollfd q{fd, POLLOUT, 0};
        ::poll(&q, 1, 5000);
        ssize_t w = ::send(fd, sent.data() + off, sent.size() - off, MSG_NOSIGNAL);
        if (w > 0) off += static_cast<size_t>(w);
      }
      ::shutdown(fd, SHUT_WR);  // -> close_notify; the echo still comes back
    });
    char buf[65536];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      ASSERT_GT(::poll(&p, 1, 10000), 0) << "no progress";
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EAGAIN) continue;
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    writer.join();
  }
  server.thread.join();
  EXPECT_TRUE(server.result) << server.result.error().message();
  EXPECT_EQ(got.size(), sent.size());
  EXPECT_TRUE(got == sent);
}

TEST(Tunnel, RefusesAnUntrustedCertificateAndAWrongName) {
  TempDir tmp, other;
  auto made = ensure_auto_certs(options(tmp.path(), {"localhost", "127.0.0.1"}));
  ASSERT_TRUE(made);
  ASSERT_TRUE(ensure_auto_certs(options(other.path(), {"localhost"})));
  auto sctx = server_context(made->server);
  ASSERT_TRUE(sctx);
  {
    EchoServer server(*sctx);
    auto cctx = client_context((other.path() / "tls" / "ca.pem").string());
    ASSERT_TRUE(cctx);
    auto t = ClientTunnel::start(connect_loopback(server.port), *cctx, "127.0.0.1", {});
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code(), Code::kPermissionDenied);
    EXPECT_NE(t.error().message().find("not trusted"), std::string::npos) << t.error().message();
  }
  {
    EchoServer server(*sctx);
    auto cctx = client_context((tmp.path() / "tls" / "ca.pem").string());
    ASSERT_TRUE(cctx);
    auto t = ClientTunnel::start(connect_loopback(server.port), *cctx, "elsewhere.example", {});
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code(), Code::kPermissionDenied);
    EXPECT_NE(t.error().message().find("not valid for \"elsewhere.example\""), std::string::npos)
        << t.error().message();
  }
}

TEST(Tunnel, AHandshakeThatNeverComesTimesOut) {
  TempDir tmp;
  auto made = ensure_auto_certs(options(tmp.path(), {"localhost"}));
  ASSERT_TRUE(made);
  auto sctx = server_context(made->server);
  ASSERT_TRUE(sctx);
  auto [lfd, port] = listen_loopback();
  UniqueFd client = connect_loopback(port);  // sends nothing
  UniqueFd tcp(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  auto pair = plaintext_pair();
  ASSERT_TRUE(pair);
  TunnelOptions o;
  o.handshake_timeout = std::chrono::milliseconds(200);
  auto t0 = std::chrono::steady_clock::now();
  auto r = serve_tls(std::move(tcp), std::move(pair->first), sctx->get(), o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

}  // namespace
}  // namespace space::tls
