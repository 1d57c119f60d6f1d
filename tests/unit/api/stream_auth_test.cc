// Streams last only as long as their token (docs/api-auth.md "Long-lived requests"): through the
// real API server and a real token store, an audit log followed, an exec's output, a download and
// an upload, each opened with a token that is then revoked (or expires), end within about a
// second; the exec's process is killed. The root operator's streams are not cut.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <thread>

#include "api/server.h"
#include "common/clock.h"
#include "daemon/store.h"
#include "daemon/tokens.h"
#include "fake_service.h"
#include "test_client.h"

namespace space::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::Conn;

// The fake service, plus an audit log that gains an event on every read, and a file that never
// ends ("/endless": 64 KiB chunks until the sink gives up).
class StreamingService : public testing::FakeService {
 public:
  Result<std::vector<daemon::AuditEvent>> audit_events(const std::string& id, int64_t after,
                                                       size_t limit) override {
    TRY(inspect(id));
    int64_t seq = ++last_seq_;
    if (seq <= after) return std::vector<daemon::AuditEvent>{};
    return std::vector<daemon::AuditEvent>{{.seq = seq, .kind = "exec.start"}};
  }
  Result<void> read_file(const std::string& id, const std::string& path,
                         const daemon::ChunkSink& sink) override {
    if (path != "/endless") return FakeService::read_file(id, path, sink);
    const std::string chunk(64 * 1024, 'z');
    for (int i = 0; i < 100000; ++i) {
      if (!sink(chunk)) return fail(Code::kUnavailable, "the download was aborted");
      std::this_thread::sleep_for(5ms);
    }
    return {};
  }
  Result<daemon::FileStat> stat(const std::string& id, const std::string& path) override {
    if (path == "/endless") return daemon::FileStat{"file", 0644, 1ull << 40, ""};
    return FakeService::stat(id, path);
  }

 private:
  std::atomic<int64_t> last_seq_{0};
};

class StreamAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-stream-auth.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    store_ = std::move(*daemon::Store::open(dir_ / "space.db"));
    tokens_ = std::move(*daemon::TokenStore::open(dir_ / "space.db"));
    socket_ = dir_ / "space.sock";
    ApiServer::Options o;
    o.tokens = tokens_.get();
    o.profiles = {"test"};
    auto s = ApiServer::listen(socket_, svc_, o);
    ASSERT_TRUE(s) << s.error().message();
    server_ = std::move(*s);
    thread_ = std::thread([this] { server_->serve(); });
    auto created = testing::request(socket_, "POST", "/v1/sandboxes", "{}");
    ASSERT_EQ(created.status, 201);
    sandbox_ = created.body_json()["id"];
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      thread_.join();
      server_.reset();
    }
    tokens_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  // A token for every sandbox operation; returns {text, id}.
  std::pair<std::string, std::string> token(const std::string& ttl = "\"1h\"") {
    auto r = testing::request(socket_, "POST", "/v1/tokens",
                              R"({"name": "s", "profiles": ["*"], "ops": ["read", "exec",
                                  "files"], "ttl": )" +
                                  ttl + "}");
    EXPECT_EQ(r.status, 201) << r.body;
    std::string text = r.body_json().value("token", "");
    return {text, text.substr(4, 12)};
  }
  void revoke(const std::string& id) {
    EXPECT_EQ(testing::request(socket_, "DELETE", "/v1/tokens/" + id).status, 204);
  }
  static std::string head(const std::string& method, const std::string& target,
                          const std::string& token, const std::string& extra = "") {
    std::string h = method + " " + target + " HTTP/1.1\r\nHost: x\r\n" + extra;
    if (!token.empty()) h += "Authorization: Bearer " + token + "\r\n";
    return h;
  }
  // Reads JSON lines until the body ends (or is cut); returns them, and sets `cut` when the
  // body ended without its final chunk.
  static std::vector<json> drain(Conn& c, bool& cut) {
    std::vector<json> out;
    std::string pending;
    cut = false;
    for (;;) {
      auto part = c.read_body_some();
      if (!part) {
        cut = true;
        break;
      }
      if (part->empty()) break;
      pending += *part;
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (!line.empty()) out.push_back(json::parse(line, nullptr, false));
      }
    }
    return out;
  }

  StreamingService svc_;
  fs::path dir_, socket_;
  std::unique_ptr<daemon::Store> store_;
  std::unique_ptr<daemon::TokenStore> tokens_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
  std::string sandbox_;
};

TEST_F(StreamAuthTest, AuditFollowEndsWhenItsTokenIsRevoked) {
  auto [text, id] = token();
  Conn c(socket_);
  ASSERT_TRUE(
      c.send(head("GET", "/v1/sandboxes/" + sandbox_ + "/audit?follow=true", text) + "\r\n"));
  ASSERT_EQ(c.read_head(), 200);
  auto first = c.next_event();
  ASSERT_TRUE(first && first->contains("seq")) << "events flow while the token is valid";
  auto revoked_at = std::chrono::steady_clock::now();
  revoke(id);
  bool cut = false;
  auto rest = drain(c, cut);
  auto took = std::chrono::steady_clock::now() - revoked_at;
  EXPECT_LT(took, 2500ms) << "the stream outlived its token";
  EXPECT_TRUE(cut) << "a revoked stream ends without the final chunk";
  ASSERT_FALSE(rest.empty());
  const json& last = rest.back();
  ASSERT_TRUE(last.contains("error")) << last.dump();
  EXPECT_EQ(last["error"]["code"], "unauthenticated");
  EXPECT_NE(last["error"]["message"].get<std::string>().find("following the audit log of " +
                                                             sandbox_ + ": API token " + id),
            std::string::npos)
      << last.dump();
  EXPECT_NE(last["error"]["message"].get<std::string>().find("was revoked at"), std::string::npos);
}

TEST_F(StreamAuthTest, AuditFollowEndsWhenItsTokenExpires) {
  auto [text, id] = token("1.5");
  Conn c(socket_);
  ASSERT_TRUE(
      c.send(head("GET", "/v1/sandboxes/" + sandbox_ + "/audit?follow=true", text) + "\r\n"));
  ASSERT_EQ(c.read_head(), 200);
  bool cut = false;
  auto all = drain(c, cut);  // ends by itself at the expiry, well within the client's 5 s
  EXPECT_TRUE(cut);
  ASSERT_FALSE(all.empty());
  EXPECT_NE(all.back().dump().find("expired at"), std::string::npos) << all.back().dump();
}

TEST_F(StreamAuthTest, RootStreamsAreNotCut) {
  auto [text, id] = token();
  Conn c(socket_);
  ASSERT_TRUE(c.send(head("GET", "/v1/sandboxes/" + sandbox_ + "/audit?follow=true", "") + "\r\n"));
  ASSERT_EQ(c.read_head(), 200);
  revoke(id);  // someone else's token
  auto until = std::chrono::steady_clock::now() + 1500ms;
  int events = 0;
  while (std::chrono::steady_clock::now() < until) {
    auto ev = c.next_event();
    ASSERT_TRUE(ev);
    ASSERT_TRUE(ev->contains("seq")) << ev->dump();
    ++events;
  }
  EXPECT_GT(events, 3);
}

TEST_F(StreamAuthTest, ExecIsKilledWhenItsTokenIsRevoked) {
  auto [text, id] = token();
  Conn c(socket_);
  std::string body = R"({"cmd": ["sleep"]})";
  ASSERT_TRUE(c.send(head("POST", "/v1/sandboxes/" + sandbox_ + "/exec", text,
                          "Content-Length: " + std::to_string(body.size()) + "\r\n") +
                     "\r\n" + body));
  ASSERT_EQ(c.read_head(), 200);
  auto started = c.next_event();
  ASSERT_TRUE(started);
  EXPECT_EQ((*started)["type"], "started");
  // The process is quiet: only the watcher can notice the revocation.
  auto revoked_at = std::chrono::steady_clock::now();
  revoke(id);
  bool cut = true;
  auto rest = drain(c, cut);
  EXPECT_LT(std::chrono::steady_clock::now() - revoked_at, 2500ms);
  EXPECT_FALSE(cut) << "exec's stream ends with its error event and the final chunk";
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back()["type"], "error") << rest.back().dump();
  EXPECT_EQ(rest.back()["error"]["code"], "unauthenticated");
  EXPECT_NE(rest.back()["error"]["message"].get<std::string>().find("process tree was killed"),
            std::string::npos);
  std::lock_guard lock(svc_.stats.mu);
  EXPECT_GE(svc_.stats.kills(), 1) << "the exec's process tree was killed";
}

TEST_F(StreamAuthTest, DownloadIsCutWhenItsTokenIsRevoked) {
  auto [text, id] = token();
  Conn c(socket_);
  ASSERT_TRUE(
      c.send(head("GET", "/v1/sandboxes/" + sandbox_ + "/files?path=/endless", text) + "\r\n"));
  ASSERT_EQ(c.read_head(), 200);
  size_t got = 0;
  while (got < (1u << 20)) {
    auto part = c.read_body_some();
    ASSERT_TRUE(part && !part->empty());
    got += part->size();
  }
  revoke(id);
  auto revoked_at = std::chrono::steady_clock::now();
  std::optional<std::string> part;
  while ((part = c.read_body_some()) && !part->empty()) got += part->size();
  EXPECT_FALSE(part) << "cut short, not a complete body";
  EXPECT_LT(std::chrono::steady_clock::now() - revoked_at, 2500ms);
  EXPECT_LT(got, 64u << 20);
}

TEST_F(StreamAuthTest, UploadIsRefusedWhenItsTokenIsRevoked) {
  auto [text, id] = token();
  Conn c(socket_);
  ASSERT_TRUE(c.send(head("PUT", "/v1/sandboxes/" + sandbox_ + "/files?path=/up", text,
                          "Transfer-Encoding: chunked\r\n") +
                     "\r\n"));
  ASSERT_TRUE(c.send_chunk("first"));
  std::this_thread::sleep_for(200ms);
  revoke(id);
  // Keep sending for longer than the check interval; the server stops reading at some point.
  for (int i = 0; i < 15; ++i) {
    if (!c.send_chunk(std::string(1024, 'x'))) break;
    std::this_thread::sleep_for(100ms);
  }
  (void)c.send("0\r\n\r\n");
  EXPECT_EQ(c.read_head(), 401);
  auto body = c.read_body().value_or("");
  EXPECT_NE(body.find("uploading /up to " + sandbox_ + ": API token " + id), std::string::npos)
      << body;
  EXPECT_EQ(svc_.files.count("/up"), 0u) << "the upload was not completed";
}

TEST_F(StreamAuthTest, StreamAuthChecksTheStoreAtMostOncePerInterval) {
  auto [text, id] = token();
  auto rec = tokens_->authenticate(text, now_s());
  ASSERT_TRUE(rec);
  Principal p{.root = false, .token = *rec};
  StreamAuth auth(&p, tokens_.get(), 200ms);
  EXPECT_TRUE(auth.watching());
  EXPECT_TRUE(auth.check());
  revoke(id);
  EXPECT_TRUE(auth.check()) << "within the interval the store is not asked again";
  std::this_thread::sleep_for(250ms);
  auto r = auth.check();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnauthenticated);
  EXPECT_FALSE(auth.check()) << "a failure sticks";

  Principal root{.root = true};
  StreamAuth never(&root, nullptr);
  EXPECT_FALSE(never.watching());
  EXPECT_TRUE(never.check());
}

}  // namespace
}  // namespace space::api
