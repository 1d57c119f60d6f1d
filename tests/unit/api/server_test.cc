// The real ApiServer on a temporary Unix socket, in front of the FakeService test double:
// routing and JSON errors, limits (413s, timeouts, connection cap), exec NDJSON streaming,
// full-duplex stdin, files, and survival of garbage bytes and abrupt disconnects.
#include "api/server.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/tcp_connect.h"
#include "fake_service.h"
#include "test_client.h"

namespace space::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::Conn;
using testing::FakeService;
using testing::request;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-api-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ / "run" / "space.sock";
  }
  void TearDown() override {
    stop();
    fs::remove_all(dir_);
  }
  void start(ApiServer::Options options = {}) {
    auto s = ApiServer::listen(socket_, svc_, options);
    ASSERT_TRUE(s) << s.error().message();
    server_ = std::move(*s);
    thread_ = std::thread([this] { server_->serve(); });
  }
  void stop() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }
  std::string create_sandbox() {
    auto r = request(socket_, "POST", "/v1/sandboxes", "{}");
    EXPECT_EQ(r.status, 201) << r.body;
    return r.body_json().value("id", "");
  }
  // Error responses: the status and {"error":{"code":...,"message":...}}.
  static void expect_error(const testing::Response& r, int status, std::string_view code,
                           std::string_view needle = "") {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
    json j = r.body_json();
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j["error"]["code"], code) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    if (!needle.empty()) {
      EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
    }
  }

  FakeService svc_;
  fs::path dir_, socket_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
};

TEST_F(ServerTest, SocketIsRootOnlyAndStaleSocketIsReplaced) {
  start();
  struct stat st;
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(socket_.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  // A second server on a live socket is refused; the socket keeps working.
  FakeService other;
  auto second = ApiServer::listen(socket_, other);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), Code::kAlreadyExists);
  EXPECT_EQ(request(socket_, "GET", "/v1/health").status, 200);

  stop();
  EXPECT_FALSE(fs::exists(socket_)) << "the socket file is removed on shutdown";

  // A socket file nobody listens on (a crashed daemon's) is replaced.
  {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  ASSERT_TRUE(fs::exists(socket_));
  start();
  EXPECT_EQ(request(socket_, "GET", "/v1/health").status, 200);
}

TEST_F(ServerTest, RefusesToReplaceSomethingThatIsNotASocket) {
  fs::create_directories(socket_.parent_path());
  { std::ofstream(socket_) << "precious"; }
  auto s = ApiServer::listen(socket_, svc_);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("not a socket"), std::string::npos);
}

TEST_F(ServerTest, UnknownRouteIs404Json) {
  start();
  expect_error(request(socket_, "GET", "/v1/nope"), 404, "not_found", "GET /v1/nope");
  expect_error(request(socket_, "POST", "/v1/sandboxes/sb_1/checkpoint"), 404, "not_found",
               "POST /v1/sandboxes/sb_1/checkpoint");
  expect_error(request(socket_, "PATCH", "/v1/sandboxes"), 404, "not_found");
  expect_error(request(socket_, "GET", "/v1/images/a%2Fb"), 400, "invalid_argument");
}

TEST_F(ServerTest, SandboxLifecycle) {
  start();
  auto created = request(socket_, "POST", "/v1/sandboxes",
                         R"({"memory":"1G","cpus":2,"env":{"A":"1"},"timeout":"5m"})");
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.header("content-type"), "application/json");
  std::string id = created.body_json()["id"];
  EXPECT_EQ(svc_.last_create.limits.memory_bytes, 1ull << 30);
  EXPECT_EQ(svc_.last_create.env, std::vector<std::string>{"A=1"});
  EXPECT_DOUBLE_EQ(*svc_.last_create.timeout_s, 300);

  EXPECT_EQ(request(socket_, "POST", "/v1/sandboxes", "").status, 201);  // empty = defaults
  auto list = request(socket_, "GET", "/v1/sandboxes");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body_json()["sandboxes"].size(), 2u);
  EXPECT_EQ(request(socket_, "GET", "/v1/sandboxes/" + id).body_json()["id"], id);
  EXPECT_EQ(request(socket_, "POST", "/v1/sandboxes/" + id + "/pause").body_json()["state"],
            "paused");
  EXPECT_EQ(request(socket_, "POST", "/v1/sandboxes/" + id + "/resume").body_json()["state"],
            "running");
  auto diff = request(socket_, "GET", "/v1/sandboxes/" + id + "/diff").body_json();
  EXPECT_EQ(diff["added"][0], "/root/new");
  auto ps = request(socket_, "GET", "/v1/sandboxes/" + id + "/processes");
  EXPECT_EQ(ps.body_json()["processes"][0]["pid"], 1);
  EXPECT_EQ(request(socket_, "DELETE", "/v1/sandboxes/" + id + "/processes/1?signal=9").status,
            204);
  expect_error(request(socket_, "DELETE", "/v1/sandboxes/" + id + "/processes/0"), 400,
               "invalid_argument", "bad pid");
  expect_error(request(socket_, "DELETE", "/v1/sandboxes/" + id + "/processes/1?signal=99"), 400,
               "invalid_argument", "signal");
  expect_error(request(socket_, "DELETE", "/v1/sandboxes/" + id + "?wait=maybe"), 400,
               "invalid_argument", "wait");
  auto del = request(socket_, "DELETE", "/v1/sandboxes/" + id + "?force=true");
  EXPECT_EQ(del.status, 204);
  EXPECT_TRUE(del.body.empty());
  EXPECT_TRUE(svc_.last_destroy_wait);
  expect_error(request(socket_, "GET", "/v1/sandboxes/" + id), 404, "not_found", "space ls");
  std::string other = request(socket_, "POST", "/v1/sandboxes", "{}").body_json()["id"];
  EXPECT_EQ(request(socket_, "DELETE", "/v1/sandboxes/" + other + "?force=true&wait=false").status,
            204);
  EXPECT_FALSE(svc_.last_destroy_wait);
  expect_error(request(socket_, "GET", "/v1/sandboxes/bad%20id"), 400, "invalid_argument");
}

TEST_F(ServerTest, BadBodiesGetPrecise4xx) {
  start();
  expect_error(request(socket_, "POST", "/v1/sandboxes", "{\"memory\":"), 400, "invalid_argument",
               "malformed JSON");
  expect_error(request(socket_, "POST", "/v1/sandboxes", "\x01\x02\xff"), 400, "invalid_argument");
  expect_error(request(socket_, "POST", "/v1/sandboxes", R"({"memory":"8M"})"), 400,
               "invalid_argument", "minimum of 16M");
  expect_error(request(socket_, "POST", "/v1/sandboxes", R"({"runtime":"docker"})"), 400,
               "invalid_argument", "unknown runtime");
  expect_error(request(socket_, "POST", "/v1/sandboxes", std::string(200, '[')), 400,
               "invalid_argument", "nested");
}

TEST_F(ServerTest, HugeJsonBodyIs413) {
  start();
  // Announced by Content-Length: refused before the body is read.
  std::string big(2 << 20, ' ');
  big.front() = '{';
  big.back() = '}';
  Conn c(socket_);
  std::thread writer([&] {
    c.send("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: " +
           std::to_string(big.size()) + "\r\n\r\n");
    c.send(big);  // may fail once the server has answered and closed: that is fine
  });
  int status = c.read_head();
  writer.join();
  EXPECT_EQ(status, 413);
  EXPECT_EQ(c.headers().at("connection"), "close");

  // Chunked, without a length: refused once 1 MiB has arrived.
  Conn d(socket_);
  std::thread chunker([&] {
    d.send("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 40; ++i) {
      if (!d.send_chunk(std::string(64 << 10, ' '))) break;
    }
  });
  EXPECT_EQ(d.read_head(), 413);
  auto body = json::parse(d.read_body().value_or("{}"));
  EXPECT_EQ(body["error"]["code"], "payload_too_large");
  chunker.join();
  EXPECT_EQ(request(socket_, "GET", "/v1/health").status, 200);
}

TEST_F(ServerTest, HugeHeaderIs413) {
  start();
  Conn c(socket_);
  c.send("GET /v1/health HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_EQ(c.read_head(), 413);
}

TEST_F(ServerTest, KeepAliveServesSeveralRequests) {
  start();
  Conn c(socket_);
  for (int i = 0; i < 3; ++i) {
    auto r = c.request("GET", "/v1/health");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body_json()["status"], "ok");
  }
  auto e = c.request("GET", "/v1/nope");  // errors keep the connection too
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(c.request("GET", "/v1/health").status, 200);
}

TEST_F(ServerTest, ChunkedJsonAndExpectContinue) {
  start();
  Conn c(socket_);
  c.send(
      "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
      "Expect: 100-continue\r\n\r\n");
  EXPECT_EQ(c.read_head(), 100);
  c.send_chunk(R"({"memory":)");
  c.send_chunk(R"("64M"})");
  c.send("0\r\n\r\n");
  EXPECT_EQ(c.read_head(), 201);
  EXPECT_EQ(svc_.last_create.limits.memory_bytes, 64ull << 20);
}

TEST_F(ServerTest, ExecStreamsNdjson) {
  start();
  std::string id = create_sandbox();
  Conn c(socket_);
  c.send("POST /v1/sandboxes/" + id + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n" +
         R"({"cmd":["both"]})" + "\n");
  ASSERT_EQ(c.read_head(), 200);
  EXPECT_EQ(c.headers().at("content-type"), "application/x-ndjson");
  EXPECT_EQ(c.headers().at("transfer-encoding"), "chunked");
  auto started = c.next_event();
  ASSERT_TRUE(started);
  EXPECT_EQ((*started)["type"], "started");
  EXPECT_EQ((*started)["pid"], 42);
  auto out = c.next_event();
  EXPECT_EQ((*out)["type"], "stdout");
  EXPECT_EQ(base64_decode((*out)["data"].get<std::string>()), "out");
  auto err = c.next_event();
  EXPECT_EQ((*err)["type"], "stderr");
  EXPECT_EQ(base64_decode((*err)["data"].get<std::string>()), std::string("err\0\xff", 5));
  auto exit = c.next_event();
  EXPECT_EQ((*exit)["type"], "exit");
  EXPECT_EQ((*exit)["exit_code"], 3);
  EXPECT_TRUE((*exit)["signal"].is_null());
  EXPECT_EQ((*exit)["timed_out"], false);
  EXPECT_EQ((*exit)["oom_killed"], false);
  EXPECT_EQ((*exit)["core_dumped"], false);
  EXPECT_DOUBLE_EQ((*exit)["duration_s"], 0.5);
  EXPECT_FALSE(exit->contains("error"));
  EXPECT_FALSE(c.next_event());  // the body ends after exit
  // The connection is reusable after a complete exec.
  EXPECT_EQ(c.request("GET", "/v1/health").status, 200);
}

TEST_F(ServerTest, ExecStartFailureAndDetach) {
  start();
  std::string id = create_sandbox();
  Conn c(socket_);
  auto r = c.request("POST", "/v1/sandboxes/" + id + "/exec", R"({"cmd":["missing"]})");
  ASSERT_EQ(r.status, 200);
  auto line = json::parse(r.body.substr(0, r.body.find('\n')));
  EXPECT_EQ(line["type"], "exit");
  EXPECT_EQ(line["exit_code"], 127);
  EXPECT_NE(line["error"].get<std::string>().find("No such file"), std::string::npos);

  auto d = request(socket_, "POST", "/v1/sandboxes/" + id + "/exec",
                   R"({"cmd":["sleep"],"detach":true})");
  EXPECT_EQ(d.status, 202);
  EXPECT_EQ(d.body_json()["pid"], 42);

  expect_error(request(socket_, "POST", "/v1/sandboxes/sb_nope/exec", R"({"cmd":["echo"]})"), 404,
               "not_found");
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/exec", R"({"cmd":[]})"), 400,
               "invalid_argument");
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/exec", R"({"cmd":["a"]} x)"), 400,
               "invalid_argument", "after the exec request");
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/exec", "[1]"), 400,
               "invalid_argument", "JSON object");
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/exec", ""), 400,
               "invalid_argument", "needs a JSON body");
}

TEST_F(ServerTest, ExecWithSnapshot) {
  start();
  std::string id = create_sandbox();
  Conn c(socket_);
  auto r = c.request("POST", "/v1/sandboxes/" + id + "/exec",
                     R"({"cmd":["echo","hi"],"snapshot":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto started = json::parse(r.body.substr(0, r.body.find('\n')));
  EXPECT_EQ(started["type"], "started");
  std::string snap = started.value("snapshot", "");
  ASSERT_EQ(snap.rfind("snap_", 0), 0u) << r.body;
  EXPECT_EQ(request(socket_, "GET", "/v1/snapshots/" + snap).body_json()["kind"], "exec");

  // Without "snapshot" the started event has no such key.
  auto plain = c.request("POST", "/v1/sandboxes/" + id + "/exec", R"({"cmd":["echo"]})");
  EXPECT_FALSE(json::parse(plain.body.substr(0, plain.body.find('\n'))).contains("snapshot"));

  auto d = request(socket_, "POST", "/v1/sandboxes/" + id + "/exec",
                   R"({"cmd":["sleep"],"detach":true,"snapshot":true})");
  EXPECT_EQ(d.status, 202);
  EXPECT_EQ(d.body_json()["pid"], 42);
  EXPECT_EQ(d.body_json().value("snapshot", "").rfind("snap_", 0), 0u) << d.body;
  EXPECT_FALSE(d.body_json().contains("type"));
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/exec",
                       R"({"cmd":["echo"],"snapshot":"yes"})"),
               400, "invalid_argument", "\"snapshot\" must be true or false");
}

TEST_F(ServerTest, Snapshots) {
  start();
  std::string id = create_sandbox();
  auto taken = request(socket_, "POST", "/v1/sandboxes/" + id + "/snapshots",
                       R"({"name":"before-migrate"})");
  ASSERT_EQ(taken.status, 201) << taken.body;
  json snap = taken.body_json();
  std::string snap_id = snap["id"];
  EXPECT_EQ(snap["name"], "before-migrate");
  EXPECT_EQ(snap["kind"], "manual");
  EXPECT_EQ(snap["sandbox"], id);
  auto unnamed = request(socket_, "POST", "/v1/sandboxes/" + id + "/snapshots", "");
  ASSERT_EQ(unnamed.status, 201) << unnamed.body;  // the body is optional
  EXPECT_TRUE(unnamed.body_json()["name"].is_null());
  expect_error(
      request(socket_, "POST", "/v1/sandboxes/" + id + "/snapshots", R"({"name":"snap_x"})"), 400,
      "invalid_argument", "snapshot name");
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/snapshots", R"({"nmae":"x"})"),
               400, "invalid_argument", "unknown field");
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/snapshots",
                       R"({"name":"before-migrate"})"),
               409, "already_exists");

  auto list = request(socket_, "GET", "/v1/sandboxes/" + id + "/snapshots");
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body_json()["snapshots"].size(), 2u);
  EXPECT_EQ(list.body_json()["snapshots"][1]["id"], snap_id);  // newest first
  EXPECT_EQ(request(socket_, "GET", "/v1/snapshots").body_json()["snapshots"].size(), 2u);
  // By id or by name.
  EXPECT_EQ(request(socket_, "GET", "/v1/snapshots/" + snap_id).body_json()["id"], snap_id);
  EXPECT_EQ(request(socket_, "GET", "/v1/snapshots/before-migrate").body_json()["id"], snap_id);
  expect_error(request(socket_, "GET", "/v1/snapshots/snap_nope"), 404, "not_found",
               "unknown snapshot snap_nope; `space snapshots ID` lists a sandbox's snapshots");
  expect_error(request(socket_, "GET", "/v1/snapshots/bad%20name"), 400, "invalid_argument");

  auto diff = request(socket_, "GET", "/v1/sandboxes/" + id + "/diff?since=before-migrate");
  ASSERT_EQ(diff.status, 200) << diff.body;
  EXPECT_EQ(diff.body_json()["added"][0], "/since/" + snap_id);
  expect_error(request(socket_, "GET", "/v1/sandboxes/" + id + "/diff?since="), 400,
               "invalid_argument", "since");

  auto rb = request(socket_, "POST", "/v1/sandboxes/" + id + "/rollback",
                    R"({"snapshot":"before-migrate"})");
  ASSERT_EQ(rb.status, 200) << rb.body;
  EXPECT_EQ(rb.body_json()["id"], id);
  EXPECT_EQ(rb.body_json()["rollback"]["snapshot"], snap_id);
  EXPECT_EQ(rb.body_json()["rollback"]["saved_as"].get<std::string>().rfind("snap_", 0), 0u);
  expect_error(request(socket_, "POST", "/v1/sandboxes/" + id + "/rollback", ""), 400,
               "invalid_argument", "needs \"snapshot\"");
  expect_error(
      request(socket_, "POST", "/v1/sandboxes/" + id + "/rollback", R"({"snapshot":"snap_nope"})"),
      404, "not_found", "unknown snapshot");

  auto restored = request(socket_, "POST", "/v1/snapshots/" + snap_id + "/restore", "");
  ASSERT_EQ(restored.status, 201) << restored.body;
  EXPECT_NE(restored.body_json()["id"], id);
  EXPECT_EQ(svc_.restored_from, snap_id);
  expect_error(
      request(socket_, "POST", "/v1/snapshots/" + snap_id + "/restore", R"({"profile":"live"})"),
      403, "permission_denied", "never restores into another profile");
  expect_error(request(socket_, "POST", "/v1/snapshots/" + snap_id + "/restore",
                       R"({"profile":"bad/name"})"),
               400, "invalid_argument", "profile");

  EXPECT_EQ(request(socket_, "DELETE", "/v1/snapshots/" + snap_id).status, 204);
  expect_error(request(socket_, "DELETE", "/v1/snapshots/" + snap_id), 404, "not_found");
  // A snapshot outlives its sandbox.
  EXPECT_EQ(request(socket_, "DELETE", "/v1/sandboxes/" + id).status, 204);
  EXPECT_EQ(
      request(socket_, "GET", "/v1/sandboxes/" + id + "/snapshots").body_json()["snapshots"].size(),
      2u);  // the unnamed one and the one saved by the rollback
}

TEST_F(ServerTest, SnapshotsOfAServiceWithoutAStore) {
  svc_.keeps_snapshots = false;
  start();
  std::string id = create_sandbox();
  for (auto [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/sandboxes/" + id + "/snapshots"},
           {"GET", "/v1/sandboxes/" + id + "/snapshots"},
           {"GET", "/v1/snapshots"},
           {"GET", "/v1/snapshots/snap_1"},
           {"DELETE", "/v1/snapshots/snap_1"},
           {"POST", "/v1/snapshots/snap_1/restore"},
           {"GET", "/v1/sandboxes/" + id + "/diff?since=snap_1"}}) {
    SCOPED_TRACE(method + " " + target);
    expect_error(request(socket_, method, target, method == "POST" ? "{}" : ""), 501,
                 "unimplemented", "keeps no snapshots");
  }
  expect_error(
      request(socket_, "POST", "/v1/sandboxes/" + id + "/rollback", R"({"snapshot":"snap_1"})"),
      501, "unimplemented");
}

TEST_F(ServerTest, ExecStdinIsFullDuplex) {
  start();
  std::string id = create_sandbox();
  Conn c(socket_);
  ASSERT_TRUE(c.send("POST /v1/sandboxes/" + id +
                     "/exec HTTP/1.1\r\nHost: x\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"));
  ASSERT_TRUE(c.send_chunk(std::string(R"({"cmd":["cat"],"stdin":true})") + "\nhello"));
  // The response and the echoed stdin arrive while the request body is still open.
  ASSERT_EQ(c.read_head(), 200);
  EXPECT_EQ(c.headers().at("connection"), "close");  // the body is still streaming
  EXPECT_EQ((*c.next_event())["type"], "started");
  auto first = c.next_event();
  ASSERT_TRUE(first);
  EXPECT_EQ(base64_decode((*first)["data"].get<std::string>()), "hello");
  ASSERT_TRUE(c.send_chunk("world"));
  auto second = c.next_event();
  ASSERT_TRUE(second);
  EXPECT_EQ(base64_decode((*second)["data"].get<std::string>()), "world");
  ASSERT_TRUE(c.send("0\r\n\r\n"));  // end of stdin: cat exits
  auto exit = c.next_event();
  ASSERT_TRUE(exit);
  EXPECT_EQ((*exit)["type"], "exit");
  EXPECT_EQ((*exit)["exit_code"], 0);
}

TEST_F(ServerTest, ExecFlowControlIsDrivenByTheClient) {
  start();
  std::string id = create_sandbox();
  Conn c(socket_);
  c.send("POST /v1/sandboxes/" + id + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 18\r\n\r\n" +
         R"({"cmd":["flood"]})" + "\n");
  ASSERT_EQ(c.read_head(), 200);
  size_t bytes = 0;
  for (;;) {
    auto ev = c.next_event();
    ASSERT_TRUE(ev);
    if ((*ev)["type"] == "exit") break;
    if ((*ev)["type"] == "stdout") bytes += base64_decode((*ev)["data"].get<std::string>())->size();
  }
  EXPECT_EQ(bytes, 8u << 20);
  std::lock_guard lock(svc_.stats.mu);
  EXPECT_LE(svc_.stats.max_unconsumed, 1u << 20);
}

TEST_F(ServerTest, ClientDisconnectKillsTheExec) {
  start();
  std::string id = create_sandbox();
  {
    Conn c(socket_);
    c.send("POST /v1/sandboxes/" + id + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 18\r\n\r\n" +
           R"({"cmd":["sleep"]})" + "\n");
    ASSERT_EQ(c.read_head(), 200);
    EXPECT_EQ((*c.next_event())["type"], "started");
  }  // closed abruptly while the command runs
  std::unique_lock lock(svc_.stats.mu);
  EXPECT_TRUE(svc_.stats.cv.wait_for(lock, 5s, [&] { return svc_.stats.kills() >= 1; }))
      << "the exec was not killed after the client went away";
  lock.unlock();

  // Same with stdin streaming: the client vanishes mid-body.
  {
    Conn c(socket_);
    c.send("POST /v1/sandboxes/" + id +
           "/exec HTTP/1.1\r\nHost: x\r\n"
           "Transfer-Encoding: chunked\r\n\r\n");
    c.send_chunk(std::string(R"({"cmd":["sleep"],"stdin":true})") + "\n");
    ASSERT_EQ(c.read_head(), 200);
  }
  lock.lock();
  EXPECT_TRUE(svc_.stats.cv.wait_for(lock, 5s, [&] { return svc_.stats.kills() >= 2; }));
  lock.unlock();
  EXPECT_EQ(request(socket_, "GET", "/v1/health").status, 200);
}

TEST_F(ServerTest, SurvivesGarbageAndAbruptDisconnects) {
  ApiServer::Options o;
  o.idle_timeout = 1s;  // for the truncated header below
  start(o);
  for (std::string garbage :
       {std::string("\x00\x01\x02garbage\r\n\r\n", 14), std::string("GET\r\n\r\n"),
        std::string("GET / HTTP/9.9\r\n\r\n"), std::string(5000, '\xff') + "\r\n\r\n",
        std::string("POST /v1/sandboxes HTTP/1.1\r\nContent-Length: -5\r\n\r\n"),
        std::string("POST /v1/sandboxes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        std::string("GET /v1/health HTTP/1.1\r\nHost: x\r\n")}) {
    Conn c(socket_);
    c.send(garbage);
    // Either a 4xx or a close, never a crash or a hang.
    int status = c.read_head();
    EXPECT_TRUE(status == 0 || (status >= 400 && status < 500)) << status;
  }
  for (int i = 0; i < 20; ++i) {
    Conn c(socket_);
    c.send("POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mem");
  }  // closed mid-body
  auto r = request(socket_, "GET", "/v1/health");
  EXPECT_EQ(r.status, 200);
}

TEST_F(ServerTest, IdleAndSlowLorisConnectionsAreClosed) {
  ApiServer::Options o;
  o.idle_timeout = 300ms;
  start(o);
  Conn idle(socket_);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(idle.closed_by_server());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);

  // A header trickling in a byte at a time is cut off at the same deadline.
  Conn slow(socket_);
  std::string header =
      "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
  t0 = std::chrono::steady_clock::now();
  bool cut = false;
  for (char ch : header) {
    if (!slow.send(std::string_view(&ch, 1))) {
      cut = true;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(cut || slow.read_head() == 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST_F(ServerTest, SlowBodiesTimeOut) {
  ApiServer::Options o;
  o.body_timeout = 400ms;
  start(o);
  // A JSON body dripping in slower than the total body timeout is cut off...
  Conn c(socket_);
  c.send("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{");
  auto t0 = std::chrono::steady_clock::now();
  std::thread drip([&] {
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(100ms);
      if (!c.send(" ")) break;
    }
  });
  EXPECT_EQ(c.read_head(), 504);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  drip.join();
  // ...and so is the JSON part of an exec.
  std::string id = create_sandbox();
  Conn e(socket_);
  e.send("POST /v1/sandboxes/" + id + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n{");
  EXPECT_EQ(e.read_head(), 504);
}

TEST_F(ServerTest, ConnectionsBeyondTheLimitGet503) {
  ApiServer::Options o;
  o.max_connections = 2;
  start(o);
  Conn a(socket_), b(socket_);
  EXPECT_EQ(a.request("GET", "/v1/health").status, 200);
  EXPECT_EQ(b.request("GET", "/v1/health").status, 200);
  Conn c(socket_);
  EXPECT_EQ(c.read_head(), 503);
  auto body = json::parse(c.read_body().value_or("{}"));
  EXPECT_EQ(body["error"]["code"], "unavailable");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("too many connections"),
            std::string::npos);
}

// Each transport has its own budget: TCP clients that never send a request (no token, nothing)
// fill only the TCP listener's, and root on the Unix socket is still served. A silent TCP
// connection is closed after first_request_timeout, freeing its slot.
TEST_F(ServerTest, TcpConnectionsNeverLockOutTheUnixSocket) {
  ApiServer::Options o;
  o.max_connections = 2;
  o.max_tcp_connections = 3;
  o.first_request_timeout = 700ms;
  o.tcp_listen = "127.0.0.1:0";
  start(o);
  ASSERT_NE(server_->tcp_port(), 0);
  auto tcp = [&] {
    auto fd = tcp_connect("127.0.0.1", server_->tcp_port(), 2000ms);
    EXPECT_TRUE(fd) << fd.error().message();
    return std::make_unique<Conn>(fd ? std::move(*fd) : UniqueFd());
  };
  std::vector<std::unique_ptr<Conn>> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(tcp());
  std::this_thread::sleep_for(100ms);  // accepted
  auto over = tcp();
  EXPECT_EQ(over->read_head(), 503) << "the fourth TCP connection is over the TCP budget";
  // The Unix socket has a budget of its own: both of its slots serve.
  Conn a(socket_), b(socket_);
  EXPECT_EQ(a.request("GET", "/v1/health").status, 200);
  EXPECT_EQ(b.request("GET", "/v1/health").status, 200);
  // The silent ones are cut after first_request_timeout, and TCP takes clients again.
  for (auto& c : silent) EXPECT_EQ(c->read_head(), 0) << "closed without an answer";
  std::this_thread::sleep_for(100ms);
  auto again = tcp();
  int st = again->request("GET", "/v1/health").status;  // 401 without tokens configured
  EXPECT_TRUE(st == 200 || st == 401) << st;
}

// A connection per request (what CLIs and simple clients do) reuses the thread of the last
// one instead of creating a thread each time; idle threads leave at once on stop.
TEST_F(ServerTest, ConnectionThreadsAreReused) {
  start();
  auto tasks = [] {
    std::set<std::string> tids;
    for (const auto& e : fs::directory_iterator("/proc/self/task"))
      tids.insert(e.path().filename());
    return tids;
  };
  { EXPECT_EQ(Conn(socket_).request("GET", "/v1/health").status, 200); }
  std::this_thread::sleep_for(200ms);  // its thread is idle now
  const auto before = tasks();
  std::set<std::string> created;
  for (int i = 0; i < 20; ++i) {
    {
      Conn c(socket_);
      EXPECT_EQ(c.request("GET", "/v1/health").status, 200);
      for (const auto& t : tasks())  // the thread serving c is alive while c is open
        if (!before.contains(t)) created.insert(t);
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(created.empty()) << created.size() << " threads created for 20 connections";

  auto t0 = std::chrono::steady_clock::now();
  stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "idle threads must not delay stop";
}

TEST_F(ServerTest, Files) {
  start();
  std::string id = create_sandbox();
  std::string base = "/v1/sandboxes/" + id + "/files";
  EXPECT_EQ(request(socket_, "PUT", base + "?path=/root/a.txt&mode=0755", "hello world",
                    {{"Content-Type", "application/octet-stream"}})
                .status,
            204);
  EXPECT_EQ(svc_.files["/root/a.txt"], "hello world");
  EXPECT_EQ(svc_.modes["/root/a.txt"], 0755u);

  auto got = request(socket_, "GET", base + "?path=%2Froot%2Fa.txt");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "hello world");
  EXPECT_EQ(got.header("x-space-file-type"), "file");
  EXPECT_EQ(got.header("x-space-file-mode"), "0755");
  EXPECT_EQ(got.header("content-type"), "application/octet-stream");

  auto st = request(socket_, "GET", base + "?path=/root/a.txt&stat=true").body_json();
  EXPECT_EQ(st["type"], "file");
  EXPECT_EQ(st["size"], 11);
  EXPECT_EQ(st["mode"], 0755);

  auto dir = request(socket_, "GET", base + "?path=/dir");
  EXPECT_EQ(dir.header("x-space-file-type"), "dir");
  EXPECT_EQ(dir.header("content-type"), "application/x-tar");
  EXPECT_EQ(dir.body, "TARDATA");

  EXPECT_EQ(
      request(socket_, "PUT", base + "?path=/dir", "TAR", {{"Content-Type", "application/x-tar"}})
          .status,
      204);
  EXPECT_EQ(svc_.last_tar, "TAR");
  EXPECT_EQ(svc_.last_tar_dir, "/dir");

  expect_error(request(socket_, "GET", base + "?path=/link"), 400, "invalid_argument", "symlink");
  expect_error(request(socket_, "GET", base + "?path=/missing"), 404, "not_found");
  expect_error(request(socket_, "GET", base), 400, "invalid_argument", "missing query parameter");
  expect_error(request(socket_, "GET", base + "?path=relative"), 400, "invalid_argument",
               "absolute");
  expect_error(request(socket_, "GET", base + "?path=/a%00b"), 400, "invalid_argument", "NUL");
  expect_error(request(socket_, "PUT", base + "?path=/x", "x", {{"Content-Type", "text/plain"}}),
               400, "invalid_argument", "Content-Type");
  expect_error(request(socket_, "PUT", base + "?path=/x&mode=999", "x"), 400, "invalid_argument",
               "octal");
  EXPECT_EQ(request(socket_, "DELETE", base + "?path=/root/a.txt&recursive=true").status, 204);
  expect_error(request(socket_, "DELETE", base + "?path=/root/a.txt"), 404, "not_found");
}

TEST_F(ServerTest, ImagesHealthDoctorMetrics) {
  start();
  Conn c(socket_);
  c.send(
      "PUT /v1/images/deb HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
      "Content-Type: application/x-tar\r\n\r\n");
  for (int i = 0; i < 32; ++i) c.send_chunk(std::string(100000, 'z'));
  c.send("0\r\n\r\n");
  ASSERT_EQ(c.read_head(), 201);
  EXPECT_EQ(json::parse(*c.read_body())["size_bytes"], 3200000);
  EXPECT_EQ(request(socket_, "GET", "/v1/images").body_json()["images"][0]["name"], "host");
  expect_error(request(socket_, "DELETE", "/v1/images/host"), 409, "conflict");
  expect_error(request(socket_, "PUT", "/v1/images/..", "x"), 400, "invalid_argument");

  EXPECT_EQ(request(socket_, "GET", "/v1/doctor").body_json()["namespaces"]["user"], true);
  auto m = request(socket_, "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("space_sandboxes 0\n"), std::string::npos);
  EXPECT_NE(m.body.find("space_api_requests_total{route=\"GET /v1/images\",status=\"200\"} 1"),
            std::string::npos)
      << m.body;
}

TEST_F(ServerTest, StopEndsServeWithOpenConnections) {
  start();
  std::string id = create_sandbox();
  Conn idle(socket_);
  EXPECT_EQ(idle.request("GET", "/v1/health").status, 200);  // now idle in keep-alive
  Conn exec(socket_);
  exec.send("POST /v1/sandboxes/" + id + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 18\r\n\r\n" +
            R"({"cmd":["sleep"]})" + "\n");
  ASSERT_EQ(exec.read_head(), 200);
  auto t0 = std::chrono::steady_clock::now();
  stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_TRUE(idle.closed_by_server());
}

}  // namespace
}  // namespace space::api
