// Firecracker's API client (src/runtime/firecracker/api.h) against a scripted HTTP server on a
// socketpair. Every request it sends is checked against the shapes of Firecracker 1.16's API
// specification, transcribed into fixtures/firecracker-api-shapes.json (see its README.md):
// the method and path must be an endpoint the specification lists, and the body must validate
// against that endpoint's definition, with no property the definition does not list. The
// schema checker used for that is tested first, on bodies that break each rule it enforces.
#include "runtime/firecracker/api.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <algorithm>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "common/fd_stream.h"
#include "runtime/firecracker/vsock.h"

namespace space::runtime::firecracker {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// ---- the specification's shapes and a checker over them ---------------------------------

const json& shapes() {
  static const json j = [] {
    std::ifstream in(std::string(SPACE_TEST_FIXTURES) +
                     "/runtime/firecracker/fixtures/firecracker-api-shapes.json");
    return json::parse(in, nullptr, false);
  }();
  return j;
}

const json& definitions() {
  static const json empty = json::object();
  return shapes().is_object() && shapes().contains("definitions") ? shapes()["definitions"] : empty;
}

// Adds to `errors` each way `value` breaks `schema` (a Swagger 2.0 schema over `defs`), as
// "$.rate_limiter.bandwidth: unknown property \"x\"". Stricter than Swagger: a property the
// schema does not list is an error unless it says additionalProperties: true.
void check(const json& value, const json& schema, const json& defs, const std::string& at,
           std::vector<std::string>& errors, int depth = 0) {
  if (depth > 32) {
    errors.push_back(at + ": $ref nesting too deep");
    return;
  }
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    const std::string prefix = "#/definitions/";
    std::string target = ref->is_string() ? ref->get<std::string>() : "";
    std::string name = target.starts_with(prefix) ? target.substr(prefix.size()) : "";
    if (name.empty() || !defs.contains(name)) {
      errors.push_back(at + ": unresolved $ref \"" + target + "\"");
      return;
    }
    check(value, defs[name], defs, at, errors, depth + 1);
    return;
  }
  if (auto t = schema.find("type"); t != schema.end()) {
    std::string type = t->get<std::string>();
    bool ok = type == "object"    ? value.is_object()
              : type == "string"  ? value.is_string()
              : type == "integer" ? value.is_number_integer()
              : type == "boolean" ? value.is_boolean()
              : type == "array"   ? value.is_array()
                                  : false;
    if (!ok) {
      errors.push_back(at + ": expected " + type + ", got " + value.type_name() + " " +
                       value.dump());
      return;
    }
  }
  if (auto e = schema.find("enum"); e != schema.end()) {
    if (std::find(e->begin(), e->end(), value) == e->end())
      errors.push_back(at + ": " + value.dump() + " is not one of " + e->dump());
  }
  if (value.is_number_integer()) {
    // Compare as long double: exact for every bound in the fixture, and signed/unsigned-safe.
    long double v = value.is_number_unsigned() ? static_cast<long double>(value.get<uint64_t>())
                                               : static_cast<long double>(value.get<int64_t>());
    if (schema.contains("minimum") && v < schema["minimum"].get<long double>())
      errors.push_back(at + ": " + value.dump() + " is below minimum " + schema["minimum"].dump());
    if (schema.contains("maximum") && v > schema["maximum"].get<long double>())
      errors.push_back(at + ": " + value.dump() + " is above maximum " + schema["maximum"].dump());
  }
  if (value.is_object()) {
    const json props = schema.value("properties", json::object());
    for (const auto& r : schema.value("required", json::array())) {
      if (!value.contains(r.get<std::string>()))
        errors.push_back(at + ": missing required \"" + r.get<std::string>() + "\"");
    }
    bool open = schema.value("additionalProperties", json(false)) == json(true);
    for (const auto& [k, v] : value.items()) {
      if (props.contains(k)) {
        check(v, props[k], defs, at + "." + k, errors, depth + 1);
      } else if (!open) {
        errors.push_back(at + ": unknown property \"" + k + "\"");
      }
    }
  }
  if (value.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < value.size(); ++i)
      check(value[i], schema["items"], defs, at + "[" + std::to_string(i) + "]", errors, depth + 1);
  }
}

std::vector<std::string> violations(const json& value, const std::string& definition) {
  std::vector<std::string> errors;
  check(value, json{{"$ref", "#/definitions/" + definition}}, definitions(), "$", errors);
  return errors;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : "; ") + s;
  return out;
}

// "/drives/{drive_id}" matches "/drives/rootfs": a {name} segment is any non-empty segment.
bool path_matches(std::string_view tmpl, std::string_view path) {
  for (;;) {
    size_t a = tmpl.find('/', 1), b = path.find('/', 1);
    std::string_view ts = tmpl.substr(0, a), ps = path.substr(0, b);
    bool param = ts.size() > 3 && ts[1] == '{' && ts.back() == '}';
    if (param ? ps.size() < 2 : ts != ps) return false;
    if (a == std::string_view::npos || b == std::string_view::npos)
      return a == std::string_view::npos && b == std::string_view::npos;
    tmpl.remove_prefix(a);
    path.remove_prefix(b);
  }
}

// The fixture's endpoint for `method path`, or nullptr.
const json* endpoint(const std::string& method, const std::string& path) {
  if (!shapes().is_object()) return nullptr;
  for (const auto& e : shapes()["endpoints"]) {
    if (e["method"] == method && path_matches(e["path"].get<std::string>(), path)) return &e;
  }
  return nullptr;
}

// ---- a scripted HTTP server ----------------------------------------------------------------

struct Reply {
  int status = 204;
  std::string body;    // JSON text; empty = none
  std::string raw;     // if set: written verbatim instead of a response
  bool close = false;  // hang up after writing
  bool hang = false;   // never answer; wait for the client to hang up
};

struct Recorded {
  std::string method, target, body;
  std::map<std::string, std::string> headers;  // lower-case names
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads requests on `fd` and answers each with the next Reply (500 once the script runs out),
// until the client hangs up.
void serve_http(UniqueFd fd, std::vector<Reply> script, std::vector<Recorded>& out,
                std::mutex& mu) {
  FdStream stream(std::move(fd));
  boost::beast::flat_buffer buffer;
  for (size_t i = 0;; ++i) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(8 << 20);
    boost::system::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec) return;
    const auto& req = parser.get();
    Recorded r{std::string(req.method_string()), std::string(req.target()), req.body(), {}};
    for (const auto& f : req)
      r.headers[lower(std::string(f.name_string()))] = std::string(f.value());
    {
      std::lock_guard lock(mu);
      out.push_back(std::move(r));
    }
    Reply reply = i < script.size()
                      ? script[i]
                      : Reply{500, R"({"fault_message":"test server: no reply scripted"})"};
    if (reply.hang) {
      stream.wait_hangup();
      return;
    }
    if (!reply.raw.empty()) {
      if (stream.write_all(reply.raw) || reply.close) return;
      continue;
    }
    http::response<http::string_body> res{static_cast<http::status>(reply.status), 11};
    res.set(http::field::server, "Firecracker API");
    if (!reply.body.empty()) {
      res.set(http::field::content_type, "application/json");
      res.body() = reply.body;
    }
    res.prepare_payload();
    http::write(stream, res, ec);
    if (ec || reply.close) return;
  }
}

class TestServer {
 public:
  explicit TestServer(std::vector<Reply> script) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
    client_ = UniqueFd(sv[0]);
    thread_ = std::thread(serve_http, UniqueFd(sv[1]), std::move(script), std::ref(requests_),
                          std::ref(mu_));
  }
  ~TestServer() {
    client_.reset();
    if (thread_.joinable()) thread_.join();
  }
  UniqueFd take_client_fd() { return std::move(client_); }
  // Waits for the server to finish (the client must have hung up) and returns what arrived.
  std::vector<Recorded> finish() {
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  UniqueFd client_;
  std::mutex mu_;
  std::vector<Recorded> requests_;
  std::thread thread_;
};

class FirecrackerApi : public ::testing::Test {
 protected:
  ApiClient& serve(std::vector<Reply> script) {
    client_.reset();  // the previous server waits for its client to hang up
    server_ = std::make_unique<TestServer>(std::move(script));
    client_.emplace(server_->take_client_fd());
    return *client_;
  }
  std::vector<Recorded> finish() {
    client_.reset();
    return server_->finish();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  std::unique_ptr<TestServer> server_;
  std::optional<ApiClient> client_;
};
class FirecrackerApiErrors : public FirecrackerApi {};

// Checks a recorded request against the fixture: an endpoint it lists, a body that validates
// against the endpoint's definition (or none where it takes none), our headers. Returns the
// parsed body (null for none).
json conforming(const Recorded& r) {
  EXPECT_EQ(r.headers.count("host") ? r.headers.at("host") : "", "localhost");
  EXPECT_EQ(r.headers.count("accept") ? r.headers.at("accept") : "", "application/json");
  const json* e = endpoint(r.method, r.target);
  if (e == nullptr) {
    ADD_FAILURE() << "Firecracker 1.16 has no endpoint " << r.method << " " << r.target;
    return nullptr;
  }
  if ((*e)["body"].is_null()) {
    EXPECT_EQ(r.body, "") << r.method << " " << r.target << " takes no body";
    return nullptr;
  }
  EXPECT_EQ(r.headers.count("content-type") ? r.headers.at("content-type") : "",
            "application/json");
  json body = json::parse(r.body, nullptr, false);
  EXPECT_FALSE(body.is_discarded()) << r.body;
  auto errors = violations(body, (*e)["body"].get<std::string>());
  EXPECT_TRUE(errors.empty()) << r.method << " " << r.target << " body " << r.body << " breaks "
                              << (*e)["body"] << ": " << join(errors);
  return body;
}

// Firecracker's answer when `method path` succeeds: the fixture's success status, with
// `response` as the body where the endpoint returns one (checked against its definition).
Reply success(const std::string& method, const std::string& path, const json& response = nullptr) {
  const json* e = endpoint(method, path);
  if (e == nullptr) {
    ADD_FAILURE() << "no endpoint " << method << " " << path << " in the fixture";
    return {};
  }
  Reply r{.status = (*e)["success"].get<int>()};
  if (!(*e)["response"].is_null()) {
    auto errors = violations(response, (*e)["response"].get<std::string>());
    EXPECT_TRUE(errors.empty()) << "test bug: " << response << ": " << join(errors);
    r.body = response.dump();
  }
  return r;
}

const json kInstanceInfo = {{"id", "sb-1a2b"},
                            {"state", "Running"},
                            {"vmm_version", "1.16.0"},
                            {"app_name", "Firecracker"}};

// ---- the checker itself ----------------------------------------------------------------------

TEST(FirecrackerApiShapes, FixtureHoldsWhatTheClientUses) {
  ASSERT_TRUE(shapes().is_object()) << "cannot read the fixture under " << SPACE_TEST_FIXTURES;
  for (const char* name : {"MachineConfiguration",
                           "BootSource",
                           "Drive",
                           "PartialDrive",
                           "Vsock",
                           "EntropyDevice",
                           "Balloon",
                           "BalloonUpdate",
                           "BalloonStats",
                           "RateLimiter",
                           "TokenBucket",
                           "SnapshotCreateParams",
                           "SnapshotLoadParams",
                           "MemoryBackend",
                           "VsockOverride",
                           "Vm",
                           "InstanceActionInfo",
                           "InstanceInfo",
                           "FirecrackerVersion",
                           "Error",
                           "Logger",
                           "SerialDevice"}) {
    EXPECT_TRUE(definitions().contains(name)) << name;
  }
  // Every $ref resolves; every endpoint names definitions that exist.
  std::function<void(const json&, const std::string&)> refs = [&](const json& j,
                                                                  const std::string& at) {
    if (j.is_object()) {
      if (auto r = j.find("$ref"); r != j.end()) {
        std::string name = r->get<std::string>().substr(std::string("#/definitions/").size());
        EXPECT_TRUE(definitions().contains(name)) << at << ": " << *r;
      }
      for (const auto& [k, v] : j.items()) refs(v, at + "." + k);
    }
  };
  refs(definitions(), "definitions");
  ASSERT_GE(shapes()["endpoints"].size(), 15u);
  for (const auto& e : shapes()["endpoints"]) {
    for (const char* k : {"body", "response"}) {
      if (!e[k].is_null()) {
        EXPECT_TRUE(definitions().contains(e[k])) << e;
      }
    }
    int s = e["success"];
    EXPECT_TRUE(s == 200 || s == 204) << e;
  }
}

TEST(FirecrackerApiShapes, CheckerAcceptsConformingBodies) {
  EXPECT_EQ(join(violations({{"action_type", "InstanceStart"}}, "InstanceActionInfo")), "");
  EXPECT_EQ(join(violations({{"drive_id", "rootfs"},
                             {"is_root_device", true},
                             {"path_on_host", "/r.ext4"},
                             {"rate_limiter",
                              {{"bandwidth", {{"size", 1}, {"refill_time", 2}}},
                               {"ops", {{"size", 1}, {"refill_time", 2}, {"one_time_burst", 3}}}}}},
                            "Drive")),
            "");
  EXPECT_EQ(join(violations({{"vcpu_count", 32}, {"mem_size_mib", 128}, {"cpu_template", "None"}},
                            "MachineConfiguration")),
            "");
  EXPECT_EQ(join(violations({{"snapshot_path", "s"},
                             {"network_overrides", {{{"iface_id", "a"}, {"host_dev_name", "b"}}}}},
                            "SnapshotLoadParams")),
            "");
  EXPECT_EQ(join(violations(kInstanceInfo, "InstanceInfo")), "");
}

TEST(FirecrackerApiShapes, CheckerCatchesEachKindOfViolation) {
  struct Case {
    const char* definition;
    json body;
    const char* expect;  // a substring of the violation
  };
  const std::vector<Case> cases = {
      {"InstanceActionInfo", json::object(), "$: missing required \"action_type\""},
      {"BootSource", {{"kernel_image_path", 5}}, "$.kernel_image_path: expected string"},
      {"MachineConfiguration", {{"vcpu_count", "2"}, {"mem_size_mib", 1}}, "expected integer"},
      {"MachineConfiguration", {{"vcpu_count", 1.5}, {"mem_size_mib", 1}}, "expected integer"},
      {"Drive", {{"drive_id", "a"}, {"is_root_device", "yes"}}, "expected boolean"},
      {"Drive",
       {{"drive_id", "a"}, {"is_root_device", true}, {"rate_limiter", json::array()}},
       "$.rate_limiter: expected object"},
      {"SnapshotLoadParams",
       {{"snapshot_path", "s"}, {"network_overrides", json::object()}},
       "$.network_overrides: expected array"},
      {"SnapshotLoadParams",
       {{"snapshot_path", "s"}, {"network_overrides", {{{"iface_id", "a"}}}}},
       "$.network_overrides[0]: missing required \"host_dev_name\""},
      {"Vm", {{"state", "Running"}}, "is not one of"},
      {"MachineConfiguration",
       {{"vcpu_count", 1}, {"mem_size_mib", 1}, {"cpu_template", "T3"}},
       "$.cpu_template: \"T3\" is not one of"},
      {"Vsock", {{"guest_cid", 2}, {"uds_path", "v"}}, "below minimum 3"},
      {"TokenBucket", {{"size", -1}, {"refill_time", 0}}, "below minimum 0"},
      {"MachineConfiguration", {{"vcpu_count", 33}, {"mem_size_mib", 1}}, "above maximum 32"},
      {"Vsock", {{"guest_cid", 3}, {"uds_path", "v"}, {"cid", 3}}, "unknown property \"cid\""},
      {"Drive",
       {{"drive_id", "a"},
        {"is_root_device", true},
        {"rate_limiter", {{"bandwidth", {{"size", 1}, {"refill_time_ms", 2}}}}}},
       "$.rate_limiter.bandwidth: unknown property \"refill_time_ms\""},
      {"SnapshotLoadParams",
       {{"snapshot_path", "s"}, {"mem_backend", {{"backend_type", "File"}}}},
       "$.mem_backend: missing required \"backend_path\""},
      {"NoSuchDefinition", json::object(), "unresolved $ref"},
  };
  for (const auto& c : cases) {
    auto errors = violations(c.body, c.definition);
    EXPECT_NE(join(errors).find(c.expect), std::string::npos)
        << c.definition << " " << c.body << " gave: " << join(errors);
  }
}

TEST(FirecrackerApiShapes, EndpointMatching) {
  EXPECT_NE(endpoint("PUT", "/drives/rootfs"), nullptr);
  EXPECT_NE(endpoint("GET", "/"), nullptr);
  EXPECT_EQ(endpoint("PUT", "/drives/"), nullptr);
  EXPECT_EQ(endpoint("PUT", "/drives/a/b"), nullptr);
  EXPECT_EQ(endpoint("PUT", "/drives"), nullptr);
  EXPECT_EQ(endpoint("DELETE", "/vm"), nullptr);
  EXPECT_EQ(endpoint("PUT", "/vm"), nullptr);  // only PATCH
  EXPECT_EQ(endpoint("GET", "/versions"), nullptr);
}

// ---- every typed call: endpoint, body shape, exact body, success status ------------------

TEST_F(FirecrackerApi, EveryCallSendsTheSpecifiedShape) {
  struct Case {
    std::string name;
    std::function<Result<void>(ApiClient&)> call;
    std::string method, path;
    json body;  // exactly what must arrive
  };
  const TokenBucket bw{.size = 1 << 20, .refill_time_ms = 100, .one_time_burst = 4 << 20};
  const TokenBucket ops{.size = 500, .refill_time_ms = 1000};
  const json bw_json = {{"size", 1 << 20}, {"refill_time", 100}, {"one_time_burst", 4 << 20}};
  const json ops_json = {{"size", 500}, {"refill_time", 1000}};
  const std::vector<Case> cases = {
      {"machine config",
       [](ApiClient& c) {
         return c.put_machine_config({2, 512, false, true});
       },
       "PUT",
       "/machine-config",
       {{"vcpu_count", 2}, {"mem_size_mib", 512}, {"smt", false}, {"track_dirty_pages", true}}},
      {"boot source, kernel only",
       [](ApiClient& c) { return c.put_boot_source({.kernel_image_path = "/vmlinux"}); },
       "PUT",
       "/boot-source",
       {{"kernel_image_path", "/vmlinux"}}},
      {"boot source, all",
       [](ApiClient& c) {
         return c.put_boot_source({"/vmlinux", "/initrd", "console=ttyS0"});
       },
       "PUT",
       "/boot-source",
       {{"kernel_image_path", "/vmlinux"},
        {"initrd_path", "/initrd"},
        {"boot_args", "console=ttyS0"}}},
      {"drive",
       [](ApiClient& c) {
         return c.put_drive({"rootfs", "/image.ext4", true, true});
       },
       "PUT",
       "/drives/rootfs",
       {{"drive_id", "rootfs"},
        {"path_on_host", "/image.ext4"},
        {"is_root_device", true},
        {"is_read_only", true}}},
      {"drive, rate limited",
       [&](ApiClient& c) {
         return c.put_drive({"scratch_1", "/w.img", false, false, RateLimiter{bw, ops}});
       },
       "PUT",
       "/drives/scratch_1",
       {{"drive_id", "scratch_1"},
        {"path_on_host", "/w.img"},
        {"is_root_device", false},
        {"is_read_only", false},
        {"rate_limiter", {{"bandwidth", bw_json}, {"ops", ops_json}}}}},
      {"drive, empty rate limiter omitted",
       [](ApiClient& c) {
         return c.put_drive({"d-2", "/d", false, false, RateLimiter{}});
       },
       "PUT",
       "/drives/d-2",
       {{"drive_id", "d-2"},
        {"path_on_host", "/d"},
        {"is_root_device", false},
        {"is_read_only", false}}},
      {"patch drive path",
       [](ApiClient& c) { return c.patch_drive("scratch", "/new.img", std::nullopt); },
       "PATCH",
       "/drives/scratch",
       {{"drive_id", "scratch"}, {"path_on_host", "/new.img"}}},
      {"patch drive limiter",
       [&](ApiClient& c) {
         return c.patch_drive("scratch", std::nullopt, RateLimiter{{}, ops});
       },
       "PATCH",
       "/drives/scratch",
       {{"drive_id", "scratch"}, {"rate_limiter", {{"ops", ops_json}}}}},
      {"vsock",
       [](ApiClient& c) {
         return c.put_vsock({3, "/v.sock"});
       },
       "PUT",
       "/vsock",
       {{"guest_cid", 3}, {"uds_path", "/v.sock"}}},
      {"entropy", [](ApiClient& c) { return c.put_entropy(); }, "PUT", "/entropy", json::object()},
      {"entropy, rate limited",
       [&](ApiClient& c) {
         return c.put_entropy(RateLimiter{bw, {}});
       },
       "PUT",
       "/entropy",
       {{"rate_limiter", {{"bandwidth", bw_json}}}}},
      {"balloon",
       [](ApiClient& c) {
         return c.put_balloon({256, true, 5});
       },
       "PUT",
       "/balloon",
       {{"amount_mib", 256}, {"deflate_on_oom", true}, {"stats_polling_interval_s", 5}}},
      {"patch balloon",
       [](ApiClient& c) { return c.patch_balloon(64); },
       "PATCH",
       "/balloon",
       {{"amount_mib", 64}}},
      {"start",
       [](ApiClient& c) { return c.instance_start(); },
       "PUT",
       "/actions",
       {{"action_type", "InstanceStart"}}},
      {"pause", [](ApiClient& c) { return c.pause(); }, "PATCH", "/vm", {{"state", "Paused"}}},
      {"resume", [](ApiClient& c) { return c.resume(); }, "PATCH", "/vm", {{"state", "Resumed"}}},
      {"full snapshot",
       [](ApiClient& c) {
         return c.create_snapshot({"/s/vm.state", "/s/mem"}, 60s);
       },
       "PUT",
       "/snapshot/create",
       {{"snapshot_path", "/s/vm.state"}, {"mem_file_path", "/s/mem"}, {"snapshot_type", "Full"}}},
      {"diff snapshot",
       [](ApiClient& c) {
         return c.create_snapshot({"/s/vm.state", "/s/mem", true}, 60s);
       },
       "PUT",
       "/snapshot/create",
       {{"snapshot_path", "/s/vm.state"}, {"mem_file_path", "/s/mem"}, {"snapshot_type", "Diff"}}},
      {"load snapshot, file",
       [](ApiClient& c) {
         return c.load_snapshot({"/t/vm.state", "/t/mem"}, 60s);
       },
       "PUT",
       "/snapshot/load",
       {{"snapshot_path", "/t/vm.state"},
        {"mem_backend", {{"backend_type", "File"}, {"backend_path", "/t/mem"}}},
        {"resume_vm", true}}},
      {"load snapshot, uffd and everything",
       [](ApiClient& c) {
         return c.load_snapshot({.snapshot_path = "/t/vm.state",
                                 .mem_file_path = "/run/uffd.sock",
                                 .uffd = true,
                                 .track_dirty_pages = true,
                                 .resume_vm = false,
                                 .clock_realtime = true,
                                 .vsock_uds_override = "/jail/v.sock"},
                                60s);
       },
       "PUT",
       "/snapshot/load",
       {{"snapshot_path", "/t/vm.state"},
        {"mem_backend", {{"backend_type", "Uffd"}, {"backend_path", "/run/uffd.sock"}}},
        {"track_dirty_pages", true},
        {"resume_vm", false},
        {"clock_realtime", true},
        {"vsock_override", {{"uds_path", "/jail/v.sock"}}}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ApiClient& client = serve({success(c.method, c.path)});
    auto r = c.call(client);
    EXPECT_TRUE(r) << r.error().message();
    auto requests = finish();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].method, c.method);
    EXPECT_EQ(requests[0].target, c.path);
    EXPECT_EQ(conforming(requests[0]), c.body);
  }
}

TEST_F(FirecrackerApi, DescribeReadsInstanceInfo) {
  ApiClient& c = serve({success("GET", "/", kInstanceInfo)});
  auto info = c.describe();
  ASSERT_TRUE(info) << info.error().message();
  EXPECT_EQ(info->id, "sb-1a2b");
  EXPECT_EQ(info->state, "Running");
  EXPECT_EQ(info->vmm_version, "1.16.0");
  EXPECT_EQ(info->app_name, "Firecracker");
  auto requests = finish();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].target, "/");
  conforming(requests[0]);
}

TEST_F(FirecrackerApi, VersionReadsFirecrackerVersion) {
  ApiClient& c = serve({success("GET", "/version", {{"firecracker_version", "1.16.0"}})});
  auto v = c.version();
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "1.16.0");
  auto requests = finish();
  ASSERT_EQ(requests.size(), 1u);
  conforming(requests[0]);
}

TEST_F(FirecrackerApi, BalloonStatisticsAreReturnedAsSent) {
  const json stats = {{"target_pages", 16384}, {"actual_pages", 16000},  {"target_mib", 64},
                      {"actual_mib", 62},      {"free_memory", 1 << 30}, {"oom_kill", 0}};
  ApiClient& c = serve({success("GET", "/balloon/statistics", stats)});
  auto s = c.balloon_statistics();
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(*s, stats);
  auto requests = finish();
  ASSERT_EQ(requests.size(), 1u);
  conforming(requests[0]);
}

TEST_F(FirecrackerApi, CallsShareOneKeepAliveConnection) {
  ApiClient& c = serve({success("PUT", "/actions"), success("PATCH", "/vm"),
                        success("GET", "/version", {{"firecracker_version", "1.16.0"}})});
  EXPECT_TRUE(c.instance_start());
  EXPECT_TRUE(c.pause());
  EXPECT_TRUE(c.version());
  auto requests = finish();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].target, "/vm");
  EXPECT_EQ(requests[2].target, "/version");
}

// ---- errors --------------------------------------------------------------------------------

TEST_F(FirecrackerApiErrors, RefusalCarriesTheRequestAndFirecrackersWords) {
  ApiClient& c = serve({{400, R"({"fault_message":"Invalid block device path"})"},
                        success("PUT", "/drives/rootfs")});
  auto r = c.put_drive({"rootfs", "/missing", true, true});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.error().message(),
            "Firecracker refused PUT /drives/rootfs (400): Invalid block device path");
  // A refusal leaves the connection usable.
  EXPECT_TRUE(c.put_drive({"rootfs", "/image", true, true}));
  EXPECT_EQ(finish().size(), 2u);
}

TEST_F(FirecrackerApiErrors, RefusalTextIsSanitizedAndCapped) {
  json fault = {{"fault_message", "bad\x1b[31m red\r\nline\x07\x7f two" + std::string(5000, 'A')}};
  ApiClient& c = serve({{400, fault.dump()}});
  auto r = c.pause();
  ASSERT_FALSE(r);
  const std::string& m = r.error().message();
  for (unsigned char ch : m) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "char " << int(ch);
  EXPECT_NE(m.find("Firecracker refused PATCH /vm (400): bad[31m red line two"), std::string::npos)
      << m;
  EXPECT_LT(m.size(), 400u);
  EXPECT_TRUE(m.ends_with("...")) << m;
}

TEST_F(FirecrackerApiErrors, ServerErrorIsInternal) {
  ApiClient& c = serve({{500, R"({"fault_message":"boom"})"}, {503, "not json\n"}});
  auto r = c.instance_start();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInternal);
  EXPECT_EQ(r.error().message(), "Firecracker refused PUT /actions (500): boom");
  auto r2 = c.resume();
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code(), Code::kInternal);
  EXPECT_EQ(r2.error().message(), "Firecracker refused PATCH /vm (503): not json");
}

TEST_F(FirecrackerApiErrors, CloseMidResponseIsUnavailableAndStaysSo) {
  ApiClient& c =
      serve({{.raw = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"firecracker_version\"",
              .close = true}});
  auto r = c.version();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable) << r.error().message();
  auto again = c.pause();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kUnavailable);
  EXPECT_EQ(finish().size(), 1u);  // nothing more was sent
}

TEST_F(FirecrackerApiErrors, ConnectionCloseAnswerEndsTheConnection) {
  ApiClient& c =
      serve({{.raw = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", .close = true}});
  EXPECT_TRUE(c.pause());
  auto again = c.resume();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kUnavailable);
}

TEST_F(FirecrackerApiErrors, NoAnswerTimesOut) {
  ApiClient& c = serve({{.hang = true}});
  auto start = Clock::now();
  auto r = c.create_snapshot({"/s", "/m"}, 150ms);
  auto took = Clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout) << r.error().message();
  EXPECT_NE(r.error().message().find("PUT /snapshot/create"), std::string::npos);
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 3s);
  // A late answer would be out of step: the connection is done.
  EXPECT_EQ(c.pause().error().code(), Code::kUnavailable);
}

TEST_F(FirecrackerApiErrors, OversizedBodyIsRefused) {
  {
    std::string raw = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(2 << 20) + "\r\n\r\n\"" + std::string((2 << 20) - 2, 'x') +
                      "\"";
    ApiClient& c = serve({{.raw = raw}});
    auto r = c.balloon_statistics();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error().message();
    EXPECT_NE(r.error().message().find("larger than 1 MiB"), std::string::npos)
        << r.error().message();
    finish();
  }
  {  // the same without a Content-Length: chunks until the limit is crossed
    std::string raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 24; ++i) raw += "10000\r\n" + std::string(0x10000, ' ') + "\r\n";
    raw += "0\r\n\r\n";
    ApiClient& c = serve({{.raw = raw}});
    auto r = c.balloon_statistics();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error().message();
    finish();
  }
}

TEST_F(FirecrackerApiErrors, MalformedAnswersAreProtocolErrors) {
  {
    ApiClient& c = serve({{.raw = "SSH-2.0-OpenSSH\r\n\r\n"}});
    auto r = c.pause();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error().message();
    finish();
  }
  {
    ApiClient& c = serve({{200, "{not json"}});
    auto r = c.version();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error().message();
    finish();
  }
  {
    ApiClient& c = serve({{200, "[1,2]"}});
    auto r = c.balloon_statistics();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error().message();
  }
}

TEST_F(FirecrackerApiErrors, DescribeWithoutARequiredFieldFails) {
  for (const char* field : {"id", "state", "vmm_version", "app_name"}) {
    SCOPED_TRACE(field);
    json info = kInstanceInfo;
    info.erase(field);
    EXPECT_FALSE(violations(info, "InstanceInfo").empty());  // indeed not the specified shape
    ApiClient& c = serve({{200, info.dump()}});
    auto r = c.describe();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kProtocol);
    EXPECT_NE(r.error().message().find(field), std::string::npos) << r.error().message();
    finish();
  }
  ApiClient& c = serve({{200, R"({"version":"1.16.0"})"}});
  auto v = c.version();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kProtocol);
}

TEST_F(FirecrackerApiErrors, BadDriveIdIsRefusedWithoutSending) {
  ApiClient& c = serve({});
  for (std::string id :
       {std::string(""), std::string("../etc"), std::string("a/b"), std::string("a b"),
        std::string(65, 'x'), std::string("d?x=1"), std::string("rootfs HTTP/1.1\r\nHost: evil")}) {
    SCOPED_TRACE(id);
    auto put = c.put_drive({id, "/img", false, false});
    ASSERT_FALSE(put);
    EXPECT_EQ(put.error().code(), Code::kInvalidArgument);
    auto patch = c.patch_drive(id, "/img", std::nullopt);
    ASSERT_FALSE(patch);
    EXPECT_EQ(patch.error().code(), Code::kInvalidArgument);
  }
  // 64 characters are fine: sent (and refused by the server, which has no reply scripted).
  auto longest = c.put_drive({std::string(64, 'x'), "/img", false, false});
  ASSERT_FALSE(longest);
  EXPECT_EQ(longest.error().code(), Code::kInternal);
  auto requests = finish();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].target, "/drives/" + std::string(64, 'x'));
}

TEST_F(FirecrackerApiErrors, BodyThatIsNotUtf8IsRefusedWithoutSending) {
  ApiClient& c = serve({});
  auto r = c.put_boot_source({.kernel_image_path = "/boot/\xff\xfe"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  auto bad = c.request("PUT", "/vm\r\nX: y", json::object());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(finish().size(), 0u);
}

// ---- connect_jailed() + ApiClient: how the runtime reaches the API socket (vsock.h) --------

std::filesystem::path temp_dir() {
  std::string tmpl = "/tmp/space-fc-api-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  return tmpl;
}

// The API socket `name` in `dir`, as the runtime connects to it (the peer is this process).
Result<ApiClient> connect_api(const std::filesystem::path& dir, const std::string& name,
                              Clock::time_point deadline, int pidfd = -1) {
  UniqueFd d(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  UniqueFd fd = TRY(connect_jailed(d.get(), name, ::geteuid(), deadline, pidfd));
  return ApiClient(std::move(fd));
}

TEST(FirecrackerApiConnect, SocketThatAppearsLaterIsConnected) {
  auto dir = temp_dir();
  auto path = dir / "api.sock";
  std::vector<Recorded> requests;
  std::mutex mu;
  std::thread firecracker([&] {  // starts listening 50 ms later
    std::this_thread::sleep_for(50ms);
    UniqueFd l(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    if (::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l.get(), 1))
      return;
    pollfd p{l.get(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return;
    UniqueFd conn(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
    serve_http(std::move(conn), {success("GET", "/version", {{"firecracker_version", "1.16.0"}})},
               requests, mu);
  });
  auto start = Clock::now();
  std::optional<Result<ApiClient>> c(connect_api(dir, "api.sock", Clock::now() + 5s));
  auto took = Clock::now() - start;
  std::optional<Result<std::string>> v;
  if (*c) v = (*c)->version();
  c.reset();  // hangs up: the thread's server returns
  firecracker.join();
  ASSERT_TRUE(v) << "connect failed";
  EXPECT_GE(took, 40ms);
  ASSERT_TRUE(*v) << v->error().message();
  EXPECT_EQ(**v, "1.16.0");
  EXPECT_EQ(requests.size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(FirecrackerApiConnect, SocketThatNeverAppearsTimesOut) {
  auto dir = temp_dir();
  auto start = Clock::now();
  auto c = connect_api(dir, "api.sock", start + 200ms);
  auto took = Clock::now() - start;
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kTimeout) << c.error().message();
  EXPECT_GE(took, 195ms);
  EXPECT_LT(took, 2s);
  std::filesystem::remove_all(dir);
}

TEST(FirecrackerApiConnect, ExitedFirecrackerFailsAtOnce) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(0);
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  int err = errno;
  if (!pidfd) {
    ::waitpid(pid, nullptr, 0);
    GTEST_SKIP() << "pidfd_open: " << std::strerror(err);
  }
  auto dir = temp_dir();
  auto start = Clock::now();
  auto c = connect_api(dir, "api.sock", start + 10s, pidfd.get());
  auto took = Clock::now() - start;
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kUnavailable);
  EXPECT_NE(c.error().message().find("Firecracker exited"), std::string::npos);
  EXPECT_LT(took, 2s);
  ::waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(dir);
}

TEST(FirecrackerApiConnect, OverlongPathIsInvalid) {
  auto dir = temp_dir();
  auto c = connect_api(dir, std::string(200, 'x'), Clock::now() + 1s);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace space::runtime::firecracker
