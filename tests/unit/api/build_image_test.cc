// POST /v1/images/{name}/build at the API layer: its query parsed and refused where hostile
// (parse_build_request), its events' JSON, and the handler through the real ApiServer in front
// of a FakeService whose build_image replays a scripted build: the NDJSON stream (whole UTF-8
// characters across chunks, invalid bytes as U+FFFD), a failure after the first event as an
// "error" event, a failure before it as a plain error response, and a token's profile scope.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "api/auth.h"
#include "api/handlers.h"
#include "api/server.h"
#include "fake_service.h"
#include "test_client.h"

namespace space::api {
namespace {

namespace fs = std::filesystem;
using daemon::BuildEvent;
using nlohmann::json;

Result<daemon::BuildRequest> parse(std::string_view target) {
  auto t = parse_target(target);
  if (!t) return fail(std::move(t.error()));
  return handlers::parse_build_request(*t);
}

// `target` is refused with a message containing `needle`.
void expect_refused(std::string_view target, std::string_view needle) {
  auto r = parse(target);
  ASSERT_FALSE(r) << target << " was accepted";
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << target;
  EXPECT_NE(r.error().message().find(needle), std::string::npos)
      << target << ": " << r.error().message();
}

TEST(BuildQuery, Defaults) {
  auto r = parse("/v1/images/app/build");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->dockerfile, "Dockerfile");
  EXPECT_EQ(r->profile, "");
  EXPECT_FALSE(r->no_cache);
  EXPECT_FALSE(r->step_timeout_s);
  EXPECT_TRUE(r->build_args.empty());
  EXPECT_TRUE(r->secrets.empty());
  EXPECT_TRUE(r->allow.empty());
}

TEST(BuildQuery, EveryParameter) {
  auto r = parse(
      "/v1/images/app/build?dockerfile=docker%2FDockerfile.dev&profile=build&no_cache=1"
      "&step_timeout=90.5&build_args=%7B%22PIP%22%3A%2224.0%22%2C%22X_1%22%3A%22a%20b%3Dc%22%7D"
      "&secrets=pypi_token,npm-token&allow=pypi.org:443,*.npmjs.org");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->dockerfile, "docker/Dockerfile.dev");
  EXPECT_EQ(r->profile, "build");
  EXPECT_TRUE(r->no_cache);
  EXPECT_EQ(r->step_timeout_s, 90.5);
  EXPECT_EQ(r->build_args, (std::map<std::string, std::string>{{"PIP", "24.0"}, {"X_1", "a b=c"}}));
  EXPECT_EQ(r->secrets, (std::vector<std::string>{"pypi_token", "npm-token"}));
  EXPECT_EQ(r->allow, (std::vector<std::string>{"pypi.org:443", "*.npmjs.org"}));

  auto d = parse("/v1/images/app/build?no_cache=false&step_timeout=10m&dockerfile=./a/Dockerfile");
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_FALSE(d->no_cache);
  EXPECT_EQ(d->step_timeout_s, 600);
  EXPECT_EQ(d->dockerfile, "./a/Dockerfile");
  // A `.dockerfile.<hex>` entry the CLI appends for a Dockerfile outside the context.
  auto hidden = parse("/v1/images/app/build?dockerfile=.dockerfile.0a1b2c3d");
  ASSERT_TRUE(hidden) << hidden.error().message();
  EXPECT_EQ(hidden->dockerfile, ".dockerfile.0a1b2c3d");
}

TEST(BuildQuery, DockerfileOutsideTheContextIsRefused) {
  expect_refused("/v1/images/app/build?dockerfile=..%2FDockerfile", "leaves the build context");
  expect_refused("/v1/images/app/build?dockerfile=a%2F..%2F..%2Fetc%2Fpasswd",
                 "leaves the build context");
  expect_refused("/v1/images/app/build?dockerfile=..", "leaves the build context");
  expect_refused("/v1/images/app/build?dockerfile=a%2F..", "leaves the build context");
  expect_refused("/v1/images/app/build?dockerfile=%2Fetc%2Fshadow", "is absolute");
  expect_refused("/v1/images/app/build?dockerfile=", "is empty");
  expect_refused("/v1/images/app/build?dockerfile=docker%2F", "names a directory");
  expect_refused("/v1/images/app/build?dockerfile=a%0Ab", "control character");
  expect_refused("/v1/images/app/build?dockerfile=" + std::string(5000, 'a'), "longer than");
  // "..." and "..x" are names, not parent directories.
  EXPECT_TRUE(parse("/v1/images/app/build?dockerfile=...%2F..x"));
}

TEST(BuildQuery, BadValuesAreRefused) {
  expect_refused("/v1/images/app/build?no_cache=maybe", "must be true or false");
  expect_refused("/v1/images/app/build?step_timeout=0", "greater than 0");
  expect_refused("/v1/images/app/build?step_timeout=-5", "greater than 0");
  expect_refused("/v1/images/app/build?step_timeout=86401", "at most 86400");
  expect_refused("/v1/images/app/build?step_timeout=soon", "step_timeout");
  expect_refused("/v1/images/app/build?profile=..%2Fetc", "bad profile name");
  expect_refused("/v1/images/app/build?secrets=a,,b", "empty item");
  expect_refused("/v1/images/app/build?secrets=a%20b", "bad secret name");
  expect_refused("/v1/images/app/build?allow=evil.com%2Fpath", "bad allow entry");
  expect_refused("/v1/images/app/build?allow=a,", "empty item");
  expect_refused("/v1/images/app/build?tag=latest", "unknown query parameter");
}

TEST(BuildQuery, BadBuildArgsAreRefused) {
  expect_refused("/v1/images/app/build?build_args=%7Bnot%20json", "JSON object of strings");
  expect_refused("/v1/images/app/build?build_args=%5B%22A%3D1%22%5D", "JSON object of strings");
  expect_refused("/v1/images/app/build?build_args=%7B%22A%22%3A1%7D", "must be a string");
  expect_refused("/v1/images/app/build?build_args=%7B%22A-B%22%3A%221%22%7D", "build arg name");
  expect_refused("/v1/images/app/build?build_args=%7B%221A%22%3A%221%22%7D", "build arg name");
  expect_refused("/v1/images/app/build?build_args=%7B%22%22%3A%221%22%7D", "build arg name");
  expect_refused("/v1/images/app/build?build_args=%7B%22A%22%3A%22x%5Cu0000y%22%7D", "NUL");
  // At most 256 entries.
  json many = json::object();
  for (int i = 0; i < 257; ++i) many["A" + std::to_string(i)] = "v";
  std::string text = many.dump(), enc;
  for (unsigned char c : text) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%%%02X", c);
    enc += hex;
  }
  expect_refused("/v1/images/app/build?build_args=" + enc, "at most 256");
  many.erase("A0");
  text = many.dump();
  enc.clear();
  for (unsigned char c : text) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%%%02X", c);
    enc += hex;
  }
  auto ok = parse("/v1/images/app/build?build_args=" + enc);
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok->build_args.size(), 256u);
}

TEST(BuildEvents, JsonShapes) {
  EXPECT_EQ(handlers::build_event_json(
                {.kind = BuildEvent::Kind::kStep, .step = 2, .of = 7, .text = "RUN make"}),
            json({{"type", "step"},
                  {"step", 2},
                  {"of", 7},
                  {"instruction", "RUN make"},
                  {"cached", false}}));
  EXPECT_EQ(handlers::build_event_json(
                {.kind = BuildEvent::Kind::kOutput, .step = 2, .text = "x", .is_stderr = true}),
            json({{"type", "output"}, {"step", 2}, {"stream", "stderr"}, {"data", "x"}}));
  EXPECT_EQ(
      handlers::build_event_json(
          {.kind = BuildEvent::Kind::kStepDone, .step = 2, .cached = true, .duration_s = 1.5}),
      json({{"type", "step_done"}, {"step", 2}, {"cached", true}, {"duration_s", 1.5}}));
  EXPECT_EQ(handlers::build_event_json({.kind = BuildEvent::Kind::kWarning, .text = "w"}),
            json({{"type", "warning"}, {"message", "w"}}));
}

// A build that replays `script` (after reading the whole context), then returns `result`.
class BuildingService : public testing::FakeService {
 public:
  std::vector<BuildEvent> script;
  Result<daemon::ImageInfo> result = daemon::ImageInfo{
      .name = "app", .kind = "imported", .size_bytes = 4096, .files = 3, .format = "dockerfile"};
  // What the last build was asked.
  std::optional<daemon::BuildRequest> last;
  std::string context;
  int calls = 0;

  Result<daemon::ImageInfo> build_image(
      const std::string& name, const daemon::BuildRequest& req, const daemon::ChunkSource& source,
      const std::function<void(const BuildEvent&)>& progress) override {
    ++calls;
    last = req;
    context.clear();
    std::string chunk;
    for (;;) {
      TRY_VOID(source(chunk));
      if (chunk.empty()) break;
      context += chunk;
    }
    for (const auto& e : script) progress(e);
    if (!result) return fail(Error(result.error()));
    daemon::ImageInfo info = *result;
    info.name = name;
    return info;
  }
};

class BuildServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-build-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ / "space.sock";
    ApiServer::Options o;
    o.profiles = {"test", "build", "prod"};
    auto s = ApiServer::listen(socket_, svc_, o);
    ASSERT_TRUE(s) << s.error().message();
    server_ = std::move(*s);
    thread_ = std::thread([this] { server_->serve(); });
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
    fs::remove_all(dir_);
  }
  // The NDJSON events of a build response (status 200 expected).
  std::vector<json> events(const testing::Response& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/x-ndjson");
    std::vector<json> out;
    size_t start = 0;
    while (start < r.body.size()) {
      size_t nl = r.body.find('\n', start);
      EXPECT_NE(nl, std::string::npos) << "an unterminated line";
      if (nl == std::string::npos) break;
      out.push_back(json::parse(r.body.substr(start, nl - start)));
      start = nl + 1;
    }
    return out;
  }

  BuildingService svc_;
  fs::path dir_, socket_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
};

TEST_F(BuildServerTest, StreamsStepsOutputAndTheImage) {
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, split across two chunks below
  svc_.script = {
      {.kind = BuildEvent::Kind::kWarning, .text = "ADD of a URL is not supported"},
      {.kind = BuildEvent::Kind::kStep, .step = 1, .of = 2, .text = "ENV A=1", .cached = true},
      {.kind = BuildEvent::Kind::kStepDone, .step = 1, .cached = true},
      {.kind = BuildEvent::Kind::kStep, .step = 2, .of = 2, .text = "RUN echo \xff"},
      {.kind = BuildEvent::Kind::kOutput, .step = 2, .text = "price " + euro.substr(0, 2)},
      {.kind = BuildEvent::Kind::kOutput, .step = 2, .text = "oops", .is_stderr = true},
      {.kind = BuildEvent::Kind::kOutput, .step = 2, .text = euro.substr(2) + "5\n"},
      {.kind = BuildEvent::Kind::kOutput, .step = 2, .text = std::string("bad \xC3\x28 \0", 8)},
      {.kind = BuildEvent::Kind::kOutput, .step = 2, .text = "cut \xF0\x9F"},
      {.kind = BuildEvent::Kind::kStepDone, .step = 2, .duration_s = 1.25},
  };
  auto r = testing::request(
      socket_, "POST",
      "/v1/images/app/build?profile=prod&secrets=tok&build_args=%7B%22V%22%3A%221%22%7D",
      std::string("context-tar-bytes"), {{"Content-Type", "application/x-tar"}});
  std::vector<json> ev = events(r);
  ASSERT_EQ(svc_.calls, 1);
  EXPECT_EQ(svc_.context, "context-tar-bytes");
  EXPECT_EQ(svc_.last->profile, "prod");
  EXPECT_EQ(svc_.last->secrets, std::vector<std::string>{"tok"});
  EXPECT_EQ(svc_.last->build_args.at("V"), "1");

  ASSERT_EQ(ev.size(), 12u) << r.body;
  EXPECT_EQ(ev[0], json({{"type", "warning"}, {"message", "ADD of a URL is not supported"}}));
  EXPECT_EQ(ev[1]["type"], "step");
  EXPECT_EQ(ev[1]["cached"], true);
  EXPECT_EQ(ev[1]["of"], 2);
  EXPECT_EQ(ev[2], json({{"type", "step_done"}, {"step", 1}, {"cached", true}, {"duration_s", 0}}));
  EXPECT_EQ(ev[3]["instruction"], "RUN echo \xEF\xBF\xBD");  // invalid byte -> U+FFFD
  // The euro sign's first two bytes wait for the third; stderr is its own stream.
  EXPECT_EQ(ev[4],
            json({{"type", "output"}, {"step", 2}, {"stream", "stdout"}, {"data", "price "}}));
  EXPECT_EQ(ev[5], json({{"type", "output"}, {"step", 2}, {"stream", "stderr"}, {"data", "oops"}}));
  EXPECT_EQ(ev[6]["data"], euro + "5\n");
  EXPECT_EQ(ev[7]["data"], std::string("bad \xEF\xBF\xBD( \0", 10));
  EXPECT_EQ(ev[8]["data"], "cut ");
  // At the step's end the unfinished character goes out, as U+FFFD.
  EXPECT_EQ(ev[9]["stream"], "stdout");
  EXPECT_TRUE(ev[9]["data"].get<std::string>().starts_with("\xEF\xBF\xBD")) << ev[9];
  EXPECT_EQ(ev[10]["type"], "step_done");
  EXPECT_EQ(ev[10]["duration_s"], 1.25);
  EXPECT_EQ(ev[11]["type"], "done");
}

TEST_F(BuildServerTest, EndsWithTheImage) {
  svc_.script = {{.kind = BuildEvent::Kind::kStep, .step = 1, .of = 1, .text = "ENV A=1"},
                 {.kind = BuildEvent::Kind::kStepDone, .step = 1}};
  std::vector<json> ev = events(testing::request(socket_, "POST", "/v1/images/app/build", "x"));
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2]["type"], "done");
  EXPECT_EQ(ev[2]["image"]["name"], "app");
  EXPECT_EQ(ev[2]["image"]["format"], "dockerfile");
  EXPECT_EQ(ev[2]["image"]["size_bytes"], 4096);
  // No profile named: the configured "build" profile, named by the handler.
  EXPECT_EQ(svc_.last->profile, "build");
}

TEST_F(BuildServerTest, AFailureAfterTheFirstEventIsAnErrorEvent) {
  svc_.script = {{.kind = BuildEvent::Kind::kStep, .step = 1, .of = 1, .text = "RUN false"},
                 {.kind = BuildEvent::Kind::kOutput, .step = 1, .text = "boom\n"}};
  svc_.result = fail(Code::kConflict, "step 1 (RUN false) exited with code 1");
  std::vector<json> ev = events(testing::request(socket_, "POST", "/v1/images/app/build", "x"));
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2]["type"], "error");
  EXPECT_EQ(ev[2]["error"]["code"], "conflict");
  EXPECT_EQ(ev[2]["error"]["message"], "building image app: step 1 (RUN false) exited with code 1");
}

TEST_F(BuildServerTest, AFailureBeforeAnyEventIsAPlainError) {
  svc_.result = fail(Code::kAlreadyExists, "an image named app exists");
  auto r = testing::request(socket_, "POST", "/v1/images/app/build", "x");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.body_json()["error"]["code"], "already_exists");

  // Bad parameters never reach the service.
  svc_.calls = 0;
  r = testing::request(socket_, "POST", "/v1/images/app/build?dockerfile=..%2Fx", "x");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("leaves the build context"), std::string::npos) << r.body;
  r = testing::request(socket_, "POST", "/v1/images/-bad/build", "x");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(svc_.calls, 0);
}

TEST(BuildScope, ATokenBuildsOnlyWithItsProfiles) {
  BuildingService fake;
  Principal p;
  p.token = {.id = "0123456789ab", .name = "ci", .profiles = {"test"}, .ops = {"images"}};
  ScopedService scoped(fake, p);
  auto noop = [](const BuildEvent&) {};
  daemon::ChunkSource empty = [](std::string& out) -> Result<void> {
    out.clear();
    return {};
  };
  auto denied = scoped.build_image("app", {.profile = "prod"}, empty, noop);
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code(), Code::kPermissionDenied);
  EXPECT_NE(denied.error().message().find("may not build with profile prod"), std::string::npos)
      << denied.error().message();
  auto unnamed = scoped.build_image("app", {.profile = ""}, empty, noop);
  ASSERT_FALSE(unnamed);
  EXPECT_EQ(unnamed.error().code(), Code::kPermissionDenied);
  EXPECT_EQ(fake.calls, 0);
  auto ok = scoped.build_image("app", {.profile = "test"}, empty, noop);
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(fake.calls, 1);
}

}  // namespace
}  // namespace space::api
