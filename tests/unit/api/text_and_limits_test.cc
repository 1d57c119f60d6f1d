// Untrusted bytes at the API server's edges, through the real server: a chunk line (a chunk size
// with its extensions, leading zeros, a trailer field) longer than the read buffer's bound is a
// 400 and a closed connection, not memory; text that is not UTF-8 in any request field is a 400
// naming the field, never a 500; text a sandbox supplies that is not UTF-8 reaches the client
// with U+FFFD in its place; and a serializer error deep in the daemon is not a 500 either.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "api/exchange.h"
#include "api/server.h"
#include "fake_service.h"
#include "test_client.h"

namespace space::api {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Conn;

// The fake, with a sandbox whose process list carries bytes that are not UTF-8, and a diff that
// dumps JSON holding them (as daemon code that builds an agent frame or an audit event would).
class Utf8Service : public testing::FakeService {
 public:
  Result<std::vector<daemon::ProcessInfo>> processes(const std::string& id) override {
    TRY(inspect(id));
    return std::vector<daemon::ProcessInfo>{
        {.pid = 7, .argv = {"cat", std::string("/tmp/\xFF\xFE")}}};
  }
  Result<daemon::Diff> diff(const std::string& id) override {
    TRY(inspect(id));
    json frame = {{"path", std::string("/x\xC3")}};
    (void)frame.dump();  // throws type_error 316
    return daemon::Diff{};
  }
  Result<daemon::FileStat> stat(const std::string& id, const std::string& path) override {
    stat_paths.push_back(path);
    return FakeService::stat(id, path);
  }
  std::vector<std::string> stat_paths;  // every path that reached the service
};

class TextAndLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-api-text.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ / "space.sock";
    auto s = ApiServer::listen(socket_, svc_);
    ASSERT_TRUE(s) << s.error().message();
    server_ = std::move(*s);
    thread_ = std::thread([this] { server_->serve(); });
    auto r = testing::request(socket_, "POST", "/v1/sandboxes", "{}");
    ASSERT_EQ(r.status, 201);
    id_ = r.body_json()["id"];
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
    server_.reset();
    fs::remove_all(dir_);
  }
  // A raw request (any bytes in the target and headers); returns the response.
  testing::Response raw(const std::string& request) {
    Conn c(socket_);
    testing::Response r;
    if (!c.send(request)) return r;
    r.status = c.read_head();
    r.headers = c.headers();
    r.body = c.read_body().value_or("<truncated>");
    return r;
  }
  static void expect_400(const testing::Response& r, std::string_view needle) {
    EXPECT_EQ(r.status, 400) << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j["error"]["code"], "invalid_argument") << r.body;
    EXPECT_NE(r.body.find(needle), std::string::npos) << r.body;
  }

  Utf8Service svc_;
  fs::path dir_, socket_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
  std::string id_;
};

TEST_F(TextAndLimitsTest, ChunkLinesAreBounded) {
  const std::string head = "POST /v1/sandboxes/" + id_ +
                           "/exec HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::pair<std::string, char> lines[] = {
      {"3;x=", 'a'},       // a chunk extension that never ends
      {"", '0'},           // leading zeros of a chunk size
      {"0\r\nX-T: ", 'b'}  // a trailer field
  };
  for (const auto& [prefix, filler] : lines) {
    Conn c(socket_);
    size_t sent = 0;
    std::atomic<bool> answered{false};
    std::thread writer([&] {
      if (!c.send(head + prefix)) return;
      const std::string block(64 * 1024, filler);
      // Up to 16 MiB, until the answer came (the server then drains what follows for a while).
      // The answer is looked for on the socket itself, not only through the reader: on a loaded
      // machine the reader thread may wake long after the answer arrived, while the server's
      // drain lets this loop go on.
      auto answer_waiting = [&] {
        pollfd p{c.stream().fd(), POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
      };
      for (int i = 0; i < 256 && !answered && !answer_waiting() && c.send(block); ++i)
        sent += block.size();
    });
    int status = c.read_head();  // without a bound: no answer until the client stops (timeout)
    answered = true;
    auto body = c.read_body();
    writer.join();
    EXPECT_EQ(status, 400) << prefix;
    EXPECT_EQ(c.headers().at("connection"), "close");
    EXPECT_NE(body.value_or("").find("is longer than 64 KiB"), std::string::npos)
        << body.value_or("");
    EXPECT_LT(sent, 16u << 20) << "the server kept reading one chunk line: " << prefix;
  }
  // A sane chunked exec body still works, extensions and trailers included.
  Conn ok(socket_);
  ASSERT_TRUE(ok.send(head));
  std::string part = R"({"cmd": ["echo", "hi"]})";
  char size[32];
  std::snprintf(size, sizeof size, "%zx;name=value\r\n", part.size());
  ASSERT_TRUE(ok.send(size + part + "\r\n0\r\nX-Trailer: 1\r\n\r\n"));
  EXPECT_EQ(ok.read_head(), 200);
  EXPECT_EQ(testing::request(socket_, "GET", "/v1/health").status, 200);
}

TEST_F(TextAndLimitsTest, InvalidUtf8InEveryFieldIsA400NamingIt) {
  const std::string files = "/v1/sandboxes/" + id_ + "/files?path=";
  expect_400(testing::request(socket_, "GET", files + "/tmp/%FF"),
             "query parameter path is not valid UTF-8 (byte 0xFF at offset 5)");
  expect_400(raw("GET " + files + "/tmp/\xC3\x28 HTTP/1.1\r\nHost: x\r\n\r\n"),
             "query parameter path is not valid UTF-8");
  expect_400(testing::request(socket_, "PUT", files + "/tmp/%ED%A0%80", "x"),
             "query parameter path");
  expect_400(testing::request(socket_, "DELETE", files + "/tmp/%C0%AF"), "query parameter path");
  expect_400(testing::request(socket_, "GET", "/v1/sandboxes/" + id_ + "?%FF=1"),
             "a query parameter name");
  expect_400(testing::request(socket_, "GET", "/v1/nothing/%FF"),
             "path segment 3 of the request target");
  expect_400(testing::request(socket_, "POST", "/v1/sandboxes", "{\"env\": {\"A\": \"\xFF\"}}"),
             "field env.A of the JSON body is not valid UTF-8");
  expect_400(testing::request(socket_, "POST", "/v1/sandboxes/" + id_ + "/exec",
                              R"({"cmd": ["echo", "\udc00"]})"),
             "field cmd[1] of the JSON body has a \\\\u escape of an unpaired UTF-16 surrogate");
  expect_400(testing::request(socket_, "PUT", files + "/tmp/x", "x",
                              {{"Content-Type", "application/\xFF"}}),
             "header Content-Type is not valid UTF-8");
  EXPECT_TRUE(svc_.stat_paths.empty()) << "nothing that is not UTF-8 reached the service";
  EXPECT_EQ(testing::request(socket_, "GET", "/v1/health").status, 200);
}

TEST_F(TextAndLimitsTest, TextFromTheSandboxIsReplacedNotA500) {
  auto r = testing::request(socket_, "GET", "/v1/sandboxes/" + id_ + "/processes");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(invalid_utf8_at(r.body)) << "a response is valid UTF-8";
  EXPECT_EQ(r.body_json()["processes"][0]["argv"][1], "/tmp/\xEF\xBF\xBD\xEF\xBF\xBD");
  // A serializer error deep in the service is the caller's input, not a daemon failure.
  auto d = testing::request(socket_, "GET", "/v1/sandboxes/" + id_ + "/diff");
  EXPECT_EQ(d.status, 400) << d.body;
  EXPECT_NE(d.body.find("not valid UTF-8"), std::string::npos) << d.body;
  EXPECT_FALSE(invalid_utf8_at(d.body));
}

TEST(JsonText, NeverThrows) {
  json j = {{"a", std::string("\xFF")}, {"b", {std::string("ok\xC3")}}};
  EXPECT_THROW((void)j.dump(), json::type_error);
  std::string text;
  EXPECT_NO_THROW(text = json_text(j));
  EXPECT_EQ(text, "{\"a\":\"\xEF\xBF\xBD\",\"b\":[\"ok\xEF\xBF\xBD\"]}");
  EXPECT_NO_THROW((void)json_text(error_body(Error(Code::kInvalidArgument, "bad \xFE"))));
}

}  // namespace
}  // namespace space::api
