// Request parsing and validation: targets, JSON bodies, create/exec requests with every limit,
// ids, paths and query parameters. Each rejection must be a 4xx with the right code.
#include "api/request.h"

#include <gtest/gtest.h>

namespace space::api {
namespace {

using nlohmann::json;

template <class T>
void expect_invalid(const Result<T>& r, std::string_view needle = "") {
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << r.error().message();
  EXPECT_EQ(http_status(r.error().code()), 400);
  if (!needle.empty()) {
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().message();
  }
}

TEST(ParseTarget, SegmentsAndQuery) {
  auto t = parse_target("/v1/sandboxes/sb_1/files?path=%2Fetc%2Fmy+file&stat=true&x");
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->path, "/v1/sandboxes/sb_1/files");
  EXPECT_EQ(t->segments, (std::vector<std::string>{"v1", "sandboxes", "sb_1", "files"}));
  EXPECT_EQ(t->query.at("path"), "/etc/my file");
  EXPECT_EQ(t->query.at("stat"), "true");
  EXPECT_EQ(t->query.at("x"), "");
  EXPECT_EQ(parse_target("/metrics")->segments, std::vector<std::string>{"metrics"});
  EXPECT_EQ(parse_target("/v1//health/")->segments, (std::vector<std::string>{"v1", "health"}));
}

TEST(ParseTarget, RefusesBadTargets) {
  expect_invalid(parse_target(""));
  expect_invalid(parse_target("v1/sandboxes"));
  expect_invalid(parse_target("http://host/v1/sandboxes"));
  expect_invalid(parse_target("/v1/images/a%2Fb"));  // '/' smuggled into a segment
  expect_invalid(parse_target("/v1/images/a%00b"));
  expect_invalid(parse_target("/v1/sandboxes/%2E%2E"));  // ".."
  expect_invalid(parse_target("/v1/x%zz"));
  expect_invalid(parse_target("/v1/x%4"));
  expect_invalid(parse_target("/v1/x?path=%"));
}

TEST(JsonValueScanner, FindsEndIncrementally) {
  std::string body = R"({"cmd":["a}\"{"],"x":{"y":[1,2]}})";
  std::string stream = body + "\nSTDIN{";
  JsonValueScanner s;
  std::string fed;
  JsonValueScanner::State st = JsonValueScanner::State::kIncomplete;
  for (char c : stream) {
    fed += c;
    st = s.feed(fed);
    if (st != JsonValueScanner::State::kIncomplete) break;
  }
  ASSERT_EQ(st, JsonValueScanner::State::kComplete);
  EXPECT_EQ(s.end(), body.size());

  JsonValueScanner arr;
  EXPECT_EQ(arr.feed("  [1]"), JsonValueScanner::State::kNotAnObject);
  JsonValueScanner deep;
  EXPECT_EQ(deep.feed(std::string(100, '{')), JsonValueScanner::State::kTooDeep);
  JsonValueScanner partial;
  EXPECT_EQ(partial.feed(R"({"a":"})"), JsonValueScanner::State::kIncomplete);
}

TEST(ParseJson, RefusesMalformedAndDeep) {
  EXPECT_TRUE(parse_json(R"({"a":[1,2,{"b":null}]})"));
  expect_invalid(parse_json("{"), "malformed JSON");
  expect_invalid(parse_json("{\"a\":}"), "malformed JSON");
  expect_invalid(parse_json("{} {}"), "malformed JSON");
  expect_invalid(parse_json("\xff\xfe"), "the JSON body is not valid UTF-8 (byte 0xFF at offset 0");
  expect_invalid(parse_json(std::string(100000, '[') + std::string(100000, ']')), "nested");
  // Brackets inside strings do not count towards depth.
  EXPECT_TRUE(parse_json("{\"a\":\"" + std::string(1000, '[') + "\"}"));
}

TEST(CreateRequest, DefaultsAndFullForm) {
  auto empty = parse_create_request(json::object());
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->runtime, "linux");
  EXPECT_EQ(empty->image, "host");
  EXPECT_EQ(empty->profile, "test");

  auto r = parse_create_request(json::parse(R"({
    "runtime": "qemu", "image": "debian-12", "profile": "live", "memory": "1.5G", "cpus": 2.5,
    "pids": 100, "disk": 1048576, "timeout": "5m", "env": {"A": "1", "B": "x=y"},
    "secrets": ["GITHUB_TOKEN"], "allow": ["pypi.org:443", "*.github.com"], "workdir": "/work"})"));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->runtime, "qemu");
  EXPECT_EQ(r->image, "debian-12");
  EXPECT_EQ(r->profile, "live");
  EXPECT_EQ(r->limits.memory_bytes, 3ull << 29);
  EXPECT_DOUBLE_EQ(r->limits.cpus, 2.5);
  EXPECT_EQ(r->limits.pids, 100u);
  EXPECT_EQ(r->limits.disk_bytes, 1u << 20);
  EXPECT_DOUBLE_EQ(*r->timeout_s, 300);
  EXPECT_EQ(r->env, (std::vector<std::string>{"A=1", "B=x=y"}));
  EXPECT_EQ(r->secrets, std::vector<std::string>{"GITHUB_TOKEN"});
  EXPECT_EQ(r->allow.size(), 2u);
  EXPECT_EQ(r->workdir, "/work");
  EXPECT_DOUBLE_EQ(parse_create_request(json{{"cpus", "0.5"}})->limits.cpus, 0.5);
  EXPECT_DOUBLE_EQ(*parse_create_request(json{{"timeout", 2.5}})->timeout_s, 2.5);
}

TEST(CreateRequest, EveryLimit) {
  auto check = [](json body, std::string_view needle) {
    SCOPED_TRACE(body.dump());
    expect_invalid(parse_create_request(body), needle);
  };
  check(json::array(), "JSON object");
  check({{"runtime", "docker"}}, "unknown runtime");
  check({{"runtime", 1}}, "must be a string");
  check({{"memroy", "1G"}}, "unknown field");
  check({{"memory", "15M"}}, "minimum of 16M");
  check({{"memory", (16 << 20) - 1}}, "minimum of 16M");
  check({{"memory", -1}}, "whole number of bytes");
  check({{"memory", 1.5e9}}, "whole number of bytes");
  check({{"memory", "lots"}}, "invalid size");
  check({{"memory", "99999999999E"}}, "too large");
  check({{"disk", "1023K"}}, "minimum of 1M");
  check({{"cpus", 0}}, "greater than 0");
  check({{"cpus", -1}}, "greater than 0");
  check({{"cpus", 1024.5}}, "at most 1024");
  check({{"cpus", "x"}}, "number");
  check({{"cpus", true}}, "number");
  check({{"pids", 7}}, "at least 8");
  check({{"pids", 4194305}}, "at most 4194304");
  check({{"pids", 8.5}}, "whole number");
  check({{"pids", "256"}}, "whole number");
  check({{"timeout", 0}}, "greater than 0");
  check({{"timeout", -5}}, "greater than 0");
  check({{"timeout", "soon"}}, "invalid duration");
  check({{"timeout", 1e12}}, "100 years");
  check({{"env", {"A=1"}}}, "object");
  check({{"env", {{"", "1"}}}}, "empty variable name");
  check({{"env", {{"A=B", "1"}}}}, "'='");
  check({{"env", {{std::string("A\0B", 3), "1"}}}}, "NUL");
  check({{"env", {{"A", 1}}}}, "must be a string");
  check({{"env", {{"A", std::string("x\0y", 3)}}}}, "NUL");
  check({{"secrets", "GITHUB_TOKEN"}}, "array");
  check({{"secrets", {"bad name"}}}, "secret name");
  check({{"allow", {"http://x.com/"}}}, "allow");
  check({{"allow", {""}}}, "allow");
  check({{"image", "../etc"}}, "image name");
  check({{"image", ""}}, "image name");
  check({{"profile", "a/b"}}, "profile");
  check({{"workdir", "relative"}}, "absolute");
  check({{"workdir", "/" + std::string(5000, 'a')}}, "longer than");
}

TEST(CreateRequest, SnapshotEvery) {
  EXPECT_FALSE(parse_create_request(json::object())->snapshot_every_s) << "unset: the profile's";
  EXPECT_DOUBLE_EQ(*parse_create_request(json{{"snapshot_every", "10m"}})->snapshot_every_s, 600);
  EXPECT_DOUBLE_EQ(*parse_create_request(json{{"snapshot_every", 30}})->snapshot_every_s, 30);
  // 0 = off, in either form.
  EXPECT_EQ(*parse_create_request(json{{"snapshot_every", 0}})->snapshot_every_s, 0);
  EXPECT_EQ(*parse_create_request(json{{"snapshot_every", "0"}})->snapshot_every_s, 0);
  EXPECT_EQ(*parse_create_request(json{{"snapshot_every", "0s"}})->snapshot_every_s, 0);
  auto check = [](json body, std::string_view needle) {
    SCOPED_TRACE(body.dump());
    expect_invalid(parse_create_request(body), needle);
  };
  check({{"snapshot_every", -1}}, "0 (off) or at least 1 second");
  check({{"snapshot_every", "500ms"}}, "at least 1 second");
  check({{"snapshot_every", 0.5}}, "at least 1 second");
  check({{"snapshot_every", "often"}}, "invalid duration");
  check({{"snapshot_every", true}}, "number of seconds");
  check({{"snapshot_every", 1e12}}, "100 years");
}

TEST(ExecRequest, Valid) {
  auto r = parse_exec_request(json::parse(R"({"cmd":["sh","-c","echo hi"],"env":{"X":"1"},
                                              "cwd":"/tmp","timeout":"10s","stdin":true})"));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->argv, (std::vector<std::string>{"sh", "-c", "echo hi"}));
  EXPECT_EQ(r->env, std::vector<std::string>{"X=1"});
  EXPECT_EQ(r->cwd, "/tmp");
  EXPECT_DOUBLE_EQ(*r->timeout_s, 10);
  EXPECT_TRUE(r->stdin);
  EXPECT_FALSE(r->detach);
  EXPECT_FALSE(r->snapshot);
  auto snap = parse_exec_request(json{{"cmd", {"ls"}}, {"snapshot", true}, {"detach", true}});
  ASSERT_TRUE(snap) << snap.error().message();
  EXPECT_TRUE(snap->snapshot);
  EXPECT_TRUE(snap->detach);
}

TEST(ExecRequest, Invalid) {
  auto check = [](json body, std::string_view needle) {
    SCOPED_TRACE(body.dump());
    expect_invalid(parse_exec_request(body), needle);
  };
  // No "cmd" at all is the sandbox's default command (its image's), decided by the service.
  auto no_cmd = parse_exec_request(json::object());
  ASSERT_TRUE(no_cmd) << no_cmd.error().message();
  EXPECT_TRUE(no_cmd->argv.empty());
  check({{"cmd", json::array()}}, "non-empty");
  check({{"cmd", {""}}}, "non-empty");
  check({{"cmd", "ls -l"}}, "array");
  check({{"cmd", {"ls", 1}}}, "string");
  check({{"cmd", {std::string("l\0s", 3)}}}, "NUL");
  check({{"cmd", {"ls"}}, {"cwd", "tmp"}}, "absolute");
  check({{"cmd", {"ls"}}, {"timeout", 0}}, "greater than 0");
  check({{"cmd", {"ls"}}, {"detach", "yes"}}, "true or false");
  check({{"cmd", {"ls"}}, {"detach", true}, {"stdin", true}}, "cannot both");
  check({{"cmd", {"ls"}}, {"tyy", true}}, "unknown field");
  check({{"cmd", {"ls"}}, {"tty", 1}}, "true or false");
  check({{"cmd", {"ls"}}, {"rows", 0}}, "1-4096");
  check({{"cmd", {"ls"}}, {"cols", 5000}}, "1-4096");
  check({{"cmd", {"ls"}}, {"tty", true}, {"detach", true}}, "cannot both be true");
  check({{"cmd", {"ls"}}, {"env", {{"A=", "x"}}}}, "'='");
  check({{"cmd", {"ls"}}, {"snapshot", 1}}, "\"snapshot\" must be true or false");
}

TEST(SnapshotRequests, BodiesAndReferences) {
  EXPECT_EQ(parse_snapshot_request(json::object())->name, "");
  EXPECT_EQ(parse_snapshot_request(json{{"name", nullptr}})->name, "");
  EXPECT_EQ(parse_snapshot_request(json{{"name", "before-migrate.v2_1"}})->name,
            "before-migrate.v2_1");
  EXPECT_EQ(parse_snapshot_request(json{{"name", std::string(64, 'n')}})->name.size(), 64u);
  auto bad_snapshot = [](json body, std::string_view needle) {
    SCOPED_TRACE(body.dump());
    expect_invalid(parse_snapshot_request(body), needle);
  };
  bad_snapshot(json::array(), "JSON object");
  bad_snapshot({{"name", ""}}, "snapshot name");
  bad_snapshot({{"name", std::string(65, 'n')}}, "snapshot name");
  bad_snapshot({{"name", "-x"}}, "snapshot name");
  bad_snapshot({{"name", "a b"}}, "snapshot name");
  bad_snapshot({{"name", "a/b"}}, "snapshot name");
  bad_snapshot({{"name", "snap_0123"}}, "\"snap_\"");
  bad_snapshot({{"name", 5}}, "must be a string");
  bad_snapshot({{"label", "x"}}, "unknown field");

  EXPECT_EQ(*parse_rollback_request(json{{"snapshot", "snap_0123456789abcdef01234567"}}),
            "snap_0123456789abcdef01234567");
  EXPECT_EQ(*parse_rollback_request(json{{"snapshot", "before-migrate"}}), "before-migrate");
  expect_invalid(parse_rollback_request(json::object()), "needs \"snapshot\"");
  expect_invalid(parse_rollback_request(json{{"snapshot", "../x"}}), "bad snapshot");
  expect_invalid(parse_rollback_request(json{{"snapshot", 1}}), "must be a string");
  expect_invalid(parse_rollback_request(json{{"snapshot", "s"}, {"force", true}}), "unknown field");
  expect_invalid(parse_rollback_request(json::array()), "JSON object");

  EXPECT_FALSE(*parse_restore_request(json::object()));
  EXPECT_FALSE(*parse_restore_request(json{{"profile", nullptr}}));
  EXPECT_EQ(**parse_restore_request(json{{"profile", "test"}}), "test");
  expect_invalid(parse_restore_request(json{{"profile", "a/b"}}), "profile");
  expect_invalid(parse_restore_request(json{{"image", "x"}}), "unknown field");

  EXPECT_TRUE(check_snapshot_ref("snap_0123456789abcdef01234567"));
  EXPECT_TRUE(check_snapshot_ref("nightly"));
  // A cluster node's ids carry its name (docs/cluster.md): up to 128 characters in all.
  EXPECT_TRUE(check_snapshot_ref("snap_0123456789abcdef01234567-ip-10-0-1-2.ec2.internal"));
  EXPECT_TRUE(check_snapshot_ref(std::string(128, 'a')));
  expect_invalid(check_snapshot_ref(""), "`space snapshots ID`");
  expect_invalid(check_snapshot_ref(std::string(129, 'a')));
  expect_invalid(check_snapshot_ref(".."));
  expect_invalid(check_snapshot_ref(std::string("a\0b", 3)));
  expect_invalid(check_snapshot_ref("-x", "query parameter since"), "query parameter since");
}

TEST(Identifiers, IdsNamesPaths) {
  EXPECT_TRUE(check_sandbox_id("sb_0123abcd"));
  expect_invalid(check_sandbox_id(""), "`space ls`");
  expect_invalid(check_sandbox_id("../x"));
  expect_invalid(check_sandbox_id(".hidden"));
  expect_invalid(check_sandbox_id("sb 1"));
  expect_invalid(check_sandbox_id(std::string(129, 'a')));
  EXPECT_TRUE(check_image_name("debian-12.1_slim"));
  expect_invalid(check_image_name("a/b"));
  expect_invalid(check_image_name("-rf"));
  EXPECT_TRUE(check_sandbox_path("/"));
  EXPECT_TRUE(check_sandbox_path("/a/../b"));  // resolved inside the sandbox's root
  expect_invalid(check_sandbox_path("etc/passwd"), "absolute");
  expect_invalid(check_sandbox_path(""), "absolute");
  expect_invalid(check_sandbox_path(std::string("/a\0b", 4)), "NUL");
  expect_invalid(check_sandbox_path("/" + std::string(4096, 'a')), "longer than");
}

TEST(QueryParams, BoolModeSignalPid) {
  Target t = *parse_target("/x?a=true&b=0&c=maybe&mode=0755&badmode=0999&big=17777&sig=9&s0=0");
  EXPECT_TRUE(*parse_bool_param(t, "a", false));
  EXPECT_FALSE(*parse_bool_param(t, "b", true));
  EXPECT_TRUE(*parse_bool_param(t, "absent", true));
  expect_invalid(parse_bool_param(t, "c", false), "true or false");
  EXPECT_EQ(*parse_mode_param(t, "mode", 0644), 0755u);
  EXPECT_EQ(*parse_mode_param(t, "absent", 0644), 0644u);
  expect_invalid(parse_mode_param(t, "badmode", 0), "octal");
  expect_invalid(parse_mode_param(t, "big", 0), "octal");
  EXPECT_EQ(*parse_signal_param(t, "sig", 15), 9);
  EXPECT_EQ(*parse_signal_param(t, "absent", 15), 15);
  expect_invalid(parse_signal_param(t, "s0", 15), "signal number");
  expect_invalid(parse_signal_param(t, "c", 15), "signal number");
  EXPECT_EQ(*parse_pid("123"), 123);
  expect_invalid(parse_pid("0"), "`space ps");
  expect_invalid(parse_pid("-1"));
  expect_invalid(parse_pid("12a"));
  expect_invalid(parse_pid("99999999999"));
}

// --- UTF-8 ------------------------------------------------------------------------------------

TEST(Utf8, WellFormedPerRfc3629) {
  for (std::string ok : {std::string(""), std::string("plain ascii"), std::string("\xC3\xA9"),
                         std::string("\xE2\x82\xAC"), std::string("\xED\x9F\xBF"),  // U+D7FF
                         std::string("\xEE\x80\x80"), std::string("\xF0\x90\x80\x80"),
                         std::string("\xF4\x8F\xBF\xBF"),  // U+10FFFF
                         std::string("a\0b", 3)}) {
    EXPECT_FALSE(invalid_utf8_at(ok)) << ok;
  }
  const std::pair<std::string, size_t> bad[] = {
      {"\xFF", 0},              // never valid
      {"ab\x80", 2},            // a continuation byte without a lead
      {"\xC0\xAF", 0},          // overlong '/'
      {"\xC1\xBF", 0},          // overlong
      {"\xE0\x80\xAF", 0},      // overlong 3-byte
      {"\xF0\x80\x80\xAF", 0},  // overlong 4-byte
      {"\xED\xA0\x80", 0},      // U+D800, a UTF-16 surrogate
      {"\xED\xBF\xBF", 0},      // U+DFFF
      {"\xF4\x90\x80\x80", 0},  // past U+10FFFF
      {"\xF5\x80\x80\x80", 0},  // lead byte past U+10FFFF
      {"ok\xC3", 2},            // truncated at the end
      {"ok\xE2\x82", 2},        // truncated 3-byte
      {"\xC3\x28", 0},          // a lead byte followed by ASCII
      {"\xE2\x28\xA1", 0},
      {"\xC3\xA9\xFE", 2},  // valid, then not
  };
  for (const auto& [s, at] : bad) {
    auto got = invalid_utf8_at(s);
    ASSERT_TRUE(got) << testing::PrintToString(s);
    EXPECT_EQ(*got, at) << testing::PrintToString(s);
  }
  EXPECT_EQ(utf8_lossy("a\xFF"
                       "b\xC3"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xC3\xA9"), "\xC3\xA9");
  expect_invalid(check_utf8("/tmp/\xFF", "query parameter path"),
                 "query parameter path is not valid UTF-8 (byte 0xFF at offset 5)");
}

TEST(Utf8, EveryTargetFieldIsChecked) {
  EXPECT_TRUE(parse_target("/v1/sandboxes/sb_1/files?path=/tmp/%C3%A9t%C3%A9"));
  EXPECT_EQ(parse_target("/v1/sandboxes/sb_1/files?path=/%C3%A9")->query.at("path"), "/\xC3\xA9");
  expect_invalid(parse_target("/v1/sandboxes/sb_1/files?path=/tmp/%FF"),
                 "query parameter path is not valid UTF-8 (byte 0xFF at offset 5)");
  expect_invalid(parse_target("/v1/sandboxes/sb_1/files?path=/tmp/\xFF"),
                 "query parameter path is not valid UTF-8");  // raw, not percent-encoded
  expect_invalid(parse_target("/v1/sandboxes/sb_1/files?path=%ED%A0%80"), "query parameter path");
  expect_invalid(parse_target("/v1/sandboxes/sb_1?%FF=1"), "a query parameter name");
  expect_invalid(parse_target("/v1/sandboxes/%C0%AF"),
                 "path segment 3 of the request target is not valid UTF-8");
  expect_invalid(parse_target("/v1/\xF4\x90\x80\x80/x"), "path segment 2");
  // The message says what to do.
  expect_invalid(parse_target("/v1/x?a=%FF"), "percent-encode the UTF-8 bytes");
}

TEST(Utf8, JsonBodiesNameTheField) {
  expect_invalid(parse_json("{\"env\": {\"A\": \"\xFF\"}}"),
                 "field env.A of the JSON body is not valid UTF-8 (byte 0xFF at offset 15 of "
                 "the body)");
  expect_invalid(parse_json("{\"cmd\": [\"echo\", \"x\xC3\x28\"]}"), "field cmd[1] of the JSON");
  expect_invalid(parse_json("{\"env\": {\"ok\": \"1\", \"\xFE\": \"x\"}}"),
                 "a key in field env of the JSON body");
  expect_invalid(parse_json("{\"\xFE\": 1}"), "a key of the JSON body");
  expect_invalid(parse_json("{\"a\": \xFF}"), "field a of the JSON body is not valid UTF-8");
  expect_invalid(parse_json("{\"a\": {\"b\": [1, {\"c\": \"\\u00e9\"}], \"d\": \"\xC0\xAF\"}}"),
                 "field a.d of the JSON body");
  // \u escapes of half a surrogate pair: valid JSON syntax, no Unicode text.
  expect_invalid(parse_json(R"({"env": {"A": "\ud800"}})"),
                 "field env.A of the JSON body has a \\u escape of an unpaired UTF-16 surrogate");
  expect_invalid(parse_json(R"({"cmd": ["x", "\udc00"]})"), "field cmd[1] of the JSON body");
  // Well-formed text and escapes pass.
  auto ok = parse_json(R"({"env": {"A": "\u00e9\ud83d\ude00"}, "cmd": ["é"]})");
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ((*ok)["env"]["A"], "\xC3\xA9\xF0\x9F\x98\x80");
  // Other syntax errors keep their message, made valid UTF-8.
  auto syntax = parse_json("{\"a\": tru}");
  ASSERT_FALSE(syntax);
  EXPECT_NE(syntax.error().message().find("malformed JSON body"), std::string::npos);
  EXPECT_FALSE(invalid_utf8_at(syntax.error().message()));
}

TEST(Utf8, JsonFieldAt) {
  std::string t = R"({"a": [10, {"b": "xyz"}], "c": {"d": )";
  EXPECT_EQ(json_field_at(t, t.find("xyz") + 1), "field a[1].b of the JSON body");
  EXPECT_EQ(json_field_at(t, t.size()), "field c.d of the JSON body");
  EXPECT_EQ(json_field_at(t, t.find("\"c\"") + 1), "a key of the JSON body");
  EXPECT_EQ(json_field_at("\"x", 1), "the JSON body");
  EXPECT_EQ(json_field_at(R"({"a\"b": ")", 10), "field a\\\"b of the JSON body");
}

}  // namespace
}  // namespace space::api
