// The CLI's client: where it connects ($SPACE_API, $SPACE_SOCKET) and the API token it sends
// ($SPACE_TOKEN), checked against a real listening socket that records what arrives.
#include "cli/client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <thread>

namespace space::cli {
namespace {

// A one-shot HTTP server on 127.0.0.1: reads one request header, answers 200 {}.
class OneShotServer {
 public:
  OneShotServer() {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(fd_.get(), 4), 0);
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      UniqueFd c(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) return;
      char buf[4096];
      while (request_.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::read(c.get(), buf, sizeof buf);
        if (n <= 0) return;
        request_.append(buf, static_cast<size_t>(n));
      }
      std::string res =
          "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json"
          "\r\n\r\n{}";
      (void)!::write(c.get(), res.data(), res.size());
    });
  }
  ~OneShotServer() {
    ::shutdown(fd_.get(), SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string request() {
    thread_.join();
    return request_;
  }

 private:
  UniqueFd fd_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::string request_;
};

TEST(Client, SendsTheTokenOverTcp) {
  OneShotServer server;
  const std::string token = "spt_0123456789ab_" + std::string(64, 'c');
  Client client(server.url(), -1, token);
  auto r = client.call("GET", "/v1/sandboxes");
  ASSERT_TRUE(r) << r.error().message();
  std::string req = server.request();
  EXPECT_EQ(req.rfind("GET /v1/sandboxes HTTP/1.1\r\n", 0), 0u) << req;
  EXPECT_NE(req.find("\r\nAuthorization: Bearer " + token + "\r\n"), std::string::npos) << req;
}

TEST(Client, NoTokenNoHeader) {
  OneShotServer server;
  Client client(server.url());
  ASSERT_TRUE(client.call("GET", "/v1/health"));
  EXPECT_EQ(server.request().find("Authorization"), std::string::npos);
}

TEST(Client, RefusesTokensThatCouldInjectHeaders) {
  for (std::string bad : {std::string("abc\r\nX-Admin: 1"), std::string("a b"),
                          std::string("tok\n"), std::string("t\xc3\xa9")}) {
    auto c = Connection::open("/nonexistent.sock", -1, bad);
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error().code(), Code::kInvalidArgument);
    EXPECT_EQ(c.error().message().find(bad), std::string::npos) << "the token is not repeated";
  }
}

TEST(Client, Addresses) {
  EXPECT_TRUE(is_tcp_address("http://127.0.0.1:7070"));
  EXPECT_FALSE(is_tcp_address("/run/space/space.sock"));
  ::setenv("SPACE_API", "http://127.0.0.1:1", 1);
  ::setenv("SPACE_SOCKET", "/tmp/x.sock", 1);
  EXPECT_EQ(address_from_env(), "http://127.0.0.1:1");
  ::unsetenv("SPACE_API");
  EXPECT_EQ(address_from_env(), "/tmp/x.sock");
  ::unsetenv("SPACE_SOCKET");
  ::setenv("SPACE_TOKEN", "spt_x", 1);
  EXPECT_EQ(token_from_env(), "spt_x");
  ::unsetenv("SPACE_TOKEN");
  EXPECT_EQ(token_from_env(), "");

  EXPECT_TRUE(is_tcp_address("https://host.example:7443"));
  for (const char* bad : {"http://127.0.0.1", "http://:80", "http://127.0.0.1:80/v1",
                          "https://127.0.0.1", "https://[::1]:7443/v1"}) {
    auto c = Connection::open(bad);
    ASSERT_FALSE(c) << bad;
    EXPECT_EQ(c.error().code(), Code::kInvalidArgument) << bad << ": " << c.error().message();
  }
  // Nothing listens on port 1: a clear "no daemon" error.
  auto none = Connection::open("http://127.0.0.1:1");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Code::kUnavailable);
  EXPECT_NE(none.error().message().find("SPACE_API"), std::string::npos);
  // https: the same, before any TLS (tests/unit/tls and test_tls.py cover the handshake), from
  // the helper space-https.
  // It is built next to space-agent (tests/CMakeLists.txt makes both).
  std::string agent = SPACE_AGENT_BIN_DEFAULT;
  ::setenv("SPACE_HTTPS_BIN", (agent.substr(0, agent.rfind('/') + 1) + "space-https").c_str(), 1);
  auto none_tls = Connection::open("https://127.0.0.1:1");
  ASSERT_FALSE(none_tls);
  EXPECT_EQ(none_tls.error().code(), Code::kUnavailable);
  EXPECT_NE(none_tls.error().message().find("SPACE_API"), std::string::npos)
      << none_tls.error().message();
  // No helper: an error that names where it was looked for.
  ::setenv("SPACE_HTTPS_BIN", "/nonexistent/space-https", 1);
  auto no_helper = Connection::open("https://127.0.0.1:1");
  ASSERT_FALSE(no_helper);
  EXPECT_NE(no_helper.error().message().find("/nonexistent/space-https"), std::string::npos)
      << no_helper.error().message();
  ::unsetenv("SPACE_HTTPS_BIN");
}

}  // namespace
}  // namespace space::cli
