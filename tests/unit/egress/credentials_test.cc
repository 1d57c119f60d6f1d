// Credentials: secret definitions are parsed strictly and never echo a value; a secret applies
// only to its hosts, methods and path prefixes; values come from literals, spaced's environment,
// files and real commands (scripts in a temp dir: TTL cache with an injected clock, timeout that
// kills and reaps, non-zero exit, output cap, clean environment and fds); placeholders are
// random; the streaming redactor gives the same output for every way a body is split.
#include "egress/credentials.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

namespace space::egress {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::seconds;

json base_def() {
  return {{"value", "s3cr3t-literal-value"},
          {"hosts", {"api.github.com", "*.githubusercontent.com"}},
          {"profiles", {"live"}}};
}

Error parse_error(const std::string& name, const json& j) {
  auto d = SecretDef::from_json(name, j);
  EXPECT_FALSE(d) << "accepted: " << j.dump();
  if (d) return Error(Code::kInternal, "accepted");
  return d.error();
}

// ---- SecretDef::from_json ----------------------------------------------------------------

TEST(SecretDefTest, FullDefinition) {
  json j = {{"command", {"/usr/local/bin/mint-token", "--ttl", "900"}},
            {"ttl", "15m"},
            {"hosts", {"API.GitHub.com.", "*.githubusercontent.com"}},
            {"methods", {"GET", "POST"}},
            {"paths", {"/repos/"}},
            {"profiles", {"live"}},
            {"env_var", "GH_TOKEN"},
            {"header", "Authorization"},
            {"format", "Bearer {}"}};
  auto d = SecretDef::from_json("GITHUB_TOKEN", j);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->name, "GITHUB_TOKEN");
  EXPECT_EQ(d->source, SecretDef::Source::kCommand);
  EXPECT_EQ(d->command, (std::vector<std::string>{"/usr/local/bin/mint-token", "--ttl", "900"}));
  EXPECT_EQ(d->ttl, seconds(900));
  ASSERT_EQ(d->hosts.size(), 2u);
  EXPECT_EQ(d->hosts[0].text(), "api.github.com");
  EXPECT_EQ(d->hosts[1].text(), "*.githubusercontent.com");
  EXPECT_EQ(d->methods, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(d->paths, (std::vector<std::string>{"/repos/"}));
  EXPECT_EQ(d->profiles, (std::vector<std::string>{"live"}));
  EXPECT_EQ(d->env_var, "GH_TOKEN");
  EXPECT_EQ(d->header, "Authorization");
  EXPECT_EQ(d->format, "Bearer {}");
}

TEST(SecretDefTest, DefaultsAndSources) {
  auto d = SecretDef::from_json("TOKEN", base_def());
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->source, SecretDef::Source::kValue);
  EXPECT_EQ(d->value, "s3cr3t-literal-value");
  EXPECT_EQ(d->env_var, "TOKEN");
  EXPECT_EQ(d->format, "{}");
  EXPECT_TRUE(d->header.empty());
  EXPECT_TRUE(d->methods.empty());
  EXPECT_TRUE(d->paths.empty());
  EXPECT_EQ(d->ttl, seconds(300));

  json e = base_def();
  e.erase("value");
  e["env"] = "GH_TOKEN";
  d = SecretDef::from_json("TOKEN", e);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->source, SecretDef::Source::kEnv);
  EXPECT_EQ(d->value, "GH_TOKEN");

  json f = base_def();
  f.erase("value");
  f["file"] = "/etc/space/gh";
  d = SecretDef::from_json("TOKEN", f);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->source, SecretDef::Source::kFile);
  EXPECT_EQ(d->value, "/etc/space/gh");

  json c = base_def();
  c.erase("value");
  c["command"] = {"/bin/true"};
  c["ttl"] = 60;
  d = SecretDef::from_json("TOKEN", c);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->ttl, seconds(60));
}

TEST(SecretDefTest, NamesAreChecked) {
  EXPECT_TRUE(SecretDef::from_json("_a1", base_def()));
  EXPECT_TRUE(SecretDef::from_json(std::string(64, 'A'), base_def()));
  for (std::string bad : {"", "1ABC", "A-B", "A B", "A.B", "\xc3\xa9t\xc3\xa9"}) {
    Error e = parse_error(bad, base_def());
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(e.message().find("name must match"), std::string::npos) << e.message();
  }
  Error e = parse_error(std::string(65, 'A'), base_def());
  EXPECT_NE(e.message().find("name must match"), std::string::npos) << e.message();
}

// Each case: a change to base_def() and a word the message must contain.
TEST(SecretDefTest, RefusesInvalidDefinitions) {
  struct Case {
    std::function<void(json&)> edit;
    std::string expect;
  };
  // Replaces the literal with another source / sets keys.
  auto source = [](json s) {
    return [s](json& j) {
      j.erase("value");
      j.update(s);
    };
  };
  auto set = [](json s) { return [s](json& j) { j.update(s); }; };
  std::vector<Case> cases = {
      {[](json& j) { j = json::array(); }, "must be an object"},
      {[](json& j) { j["valeu"] = "x"; }, "unknown key \"valeu\""},
      {[](json& j) { j.erase("value"); }, "exactly one of"},
      {[](json& j) { j["env"] = "X"; }, "exactly one of"},
      {[](json& j) { j["command"] = {"/bin/true"}; }, "exactly one of"},
      {[](json& j) { j["value"] = 5; }, "value must be a string"},
      {[](json& j) { j["value"] = ""; }, "value is empty"},
      {[](json& j) { j["value"] = "a\r\nX-Evil: 1"; }, "control character"},
      {[](json& j) { j["value"] = "short"; }, "shorter than 8 bytes"},
      {[](json& j) { j["ttl"] = "5m"; }, "ttl is only allowed with command"},
      {source({{"env", "1BAD"}}), "not a variable name"},
      {source({{"file", "relative/path"}}), "absolute path"},
      {source({{"command", json::array()}}), "command is empty"},
      {source({{"command", "/bin/true"}}), "must be an array"},
      {source({{"command", {"/bin/echo", 5}}}), "command[1]"},
      {source({{"command", {"mint"}}}), "absolute path"},
      {source({{"command", {"/bin/x"}}, {"ttl", "soon"}}), "ttl"},
      {source({{"command", {"/bin/x"}}, {"ttl", -1}}), "ttl"},
      {[](json& j) { j.erase("hosts"); }, "hosts is required"},
      {[](json& j) { j["hosts"] = json::array(); }, "hosts is empty"},
      {set({{"hosts", {"ok.example", "bad host!"}}}), "hosts[1]"},
      {[](json& j) { j["methods"] = {"get"}; }, "upper-case"},
      {[](json& j) { j["methods"] = {"GE T"}; }, "upper-case"},
      {[](json& j) { j["methods"] = {""}; }, "upper-case"},
      {[](json& j) { j["paths"] = {"repos/"}; }, "must start with '/'"},
      {[](json& j) { j["paths"] = {"/a?b"}; }, "contains a query"},
      {[](json& j) { j["paths"] = {"/a/..;/b"}; }, "dot segment"},
      {[](json& j) { j["paths"] = {"/a%2e/b"}; }, "encoded dot"},
      {[](json& j) { j["placeholder_in"] = "Authorization"; }, "must be an array"},
      {[](json& j) { j["placeholder_in"] = {"Bad Header"}; }, "not a header name"},
      {[](json& j) { j["placeholder_in"] = {"Content-Length"}; }, "frames the message"},
      {[](json& j) { j["placeholder_in"] = {"query:"}; }, "query parameter name"},
      {[](json& j) { j["placeholder_in"] = {"query:a&b"}; }, "query parameter name"},
      {[](json& j) { j.erase("profiles"); }, "profiles is required"},
      {[](json& j) { j["profiles"] = json::array(); }, "profiles is empty"},
      {[](json& j) { j["profiles"] = {""}; }, "empty name"},
      {[](json& j) { j["profiles"] = {1}; }, "profiles[0]"},
      {[](json& j) { j["env_var"] = "A-B"; }, "not a variable name"},
      {[](json& j) { j["header"] = "Bad Header"; }, "not a field name"},
      {[](json& j) { j["header"] = "Content-Length"; }, "cannot be set"},
      {[](json& j) { j["header"] = "host"; }, "cannot be set"},
      {[](json& j) { j["format"] = "Bearer {}"; }, "format needs header"},
      {set({{"header", "X-Token"}, {"format", "Bearer"}}), "exactly once"},
      {set({{"header", "X-Token"}, {"format", "{}{}"}}), "exactly once"},
      {set({{"header", "X-Token"}, {"format", "{}\r\nX: 1"}}), "control"},
  };
  for (const auto& c : cases) {
    json j = base_def();
    c.edit(j);
    Error e = parse_error("GITHUB_TOKEN", j);
    EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.message();
    EXPECT_TRUE(e.message().starts_with("secret GITHUB_TOKEN: ")) << e.message();
    EXPECT_NE(e.message().find(c.expect), std::string::npos)
        << "expected \"" << c.expect << "\" in: " << e.message();
    // The literal value never shows up, whatever is wrong.
    EXPECT_EQ(e.message().find("s3cr3t"), std::string::npos) << e.message();
  }
}

TEST(SecretDefTest, TtlRoundsDownToSeconds) {
  json j = base_def();
  j.erase("value");
  j["command"] = {"/bin/true"};
  j["ttl"] = "90s";
  EXPECT_EQ(SecretDef::from_json("T", j)->ttl, seconds(90));
  j["ttl"] = "1.5";
  EXPECT_EQ(SecretDef::from_json("T", j)->ttl, seconds(1));
  j["ttl"] = "0";
  EXPECT_EQ(SecretDef::from_json("T", j)->ttl, seconds(0));
}

// ---- bound_to / applies ------------------------------------------------------------------

Host host(std::string_view raw) {
  auto h = normalize_host(raw);
  EXPECT_TRUE(h) << raw << ": " << h.error().message();
  return h ? *h : Host{};
}

TEST(SecretDefTest, BoundToItsHostsOnly) {
  auto d = SecretDef::from_json("T", base_def());
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->bound_to(host("api.github.com")));
  EXPECT_TRUE(d->bound_to(host("API.GITHUB.COM.")));
  EXPECT_TRUE(d->bound_to(host("raw.githubusercontent.com")));
  EXPECT_TRUE(d->bound_to(host("a.b.githubusercontent.com")));
  EXPECT_FALSE(d->bound_to(host("githubusercontent.com")));
  EXPECT_FALSE(d->bound_to(host("github.com")));
  EXPECT_FALSE(d->bound_to(host("api.github.com.evil.example")));
  EXPECT_FALSE(d->bound_to(host("140.82.112.6")));
}

TEST(SecretDefTest, AppliesChecksMethodAndPath) {
  json j = base_def();
  j["methods"] = {"GET", "POST"};
  j["paths"] = {"/repos/", "/user"};
  auto d = SecretDef::from_json("T", j);
  ASSERT_TRUE(d) << d.error().message();
  Host gh = host("api.github.com");
  EXPECT_TRUE(d->applies(gh, "GET", "/repos/a/b"));
  EXPECT_TRUE(d->applies(gh, "POST", "/repos/a/b?x=/admin"));
  EXPECT_TRUE(d->applies(gh, "GET", "/user"));
  EXPECT_TRUE(d->applies(gh, "GET", "/users"));  // a prefix, as in the policy
  EXPECT_FALSE(d->applies(gh, "DELETE", "/repos/a/b"));
  EXPECT_FALSE(d->applies(gh, "get", "/repos/a/b"));
  EXPECT_FALSE(d->applies(gh, "GET", "/admin"));
  EXPECT_FALSE(d->applies(gh, "GET", "/admin?/repos/"));
  EXPECT_FALSE(d->applies(gh, "GET", ""));
  EXPECT_FALSE(d->applies(gh, "GET", "*"));
  EXPECT_FALSE(d->applies(host("github.com"), "GET", "/repos/a"));
  // A prefix cannot be sidestepped with dot segments or encoded separators.
  for (std::string_view t :
       {"/repos/../admin", "/repos/%2e%2E/admin", "/repos/.%2e/admin", "/repos/./x", "/repos/a%2fb",
        "/repos/a%5Cb", "/repos\\..\\admin", "/repos/.."}) {
    EXPECT_FALSE(d->applies(gh, "GET", t)) << t;
  }
  EXPECT_TRUE(d->applies(gh, "GET", "/repos/a..b/.c/x"));
  // Exactly as the profile's path check reads a path: dot segments with ";" parameters (which
  // Tomcat-style servers strip before resolving) and encoded dots refuse the binding.
  for (std::string_view t : {"/repos/..;/admin", "/repos/%2e%2e;x/admin", "/repos/..%3b/admin",
                             "/repos/.;/x", "/repos/...;/x", "/repos/a/%2e%2ex"}) {
    EXPECT_FALSE(d->applies(gh, "GET", t)) << t;
    EXPECT_EQ(d->applies(gh, "GET", t), check_path(d->paths, t).allowed) << t;
  }

  auto any = SecretDef::from_json("T", base_def());
  ASSERT_TRUE(any);
  EXPECT_TRUE(any->applies(gh, "DELETE", "/anything/../at/all"));
  EXPECT_FALSE(any->applies(host("example.com"), "GET", "/"));
}

// ---- SecretStore: literal, env, file -----------------------------------------------------

class SecretStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-cred-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static SecretDef def(const std::string& name, json source) {
    json j = base_def();
    j.erase("value");
    j.update(source);
    auto d = SecretDef::from_json(name, j);
    EXPECT_TRUE(d) << d.error().message();
    return d ? *d : SecretDef{};
  }
  static SecretStore store(SecretDef d) {
    std::map<std::string, SecretDef> m;
    m.emplace(d.name, std::move(d));
    return SecretStore(std::move(m));
  }
  void write(const std::string& name, const std::string& data, mode_t mode = 0600) {
    std::ofstream(dir_ / name, std::ios::binary) << data;
    fs::permissions(dir_ / name, static_cast<fs::perms>(mode));
  }
  // A shell script in the temp dir; `body` may use $DIR.
  std::string script(const std::string& name, const std::string& body) {
    write(name, "#!/bin/sh\nDIR='" + dir_.string() + "'\n" + body + "\n", 0700);
    return (dir_ / name).string();
  }
  std::string slurp(const std::string& name) {
    std::ifstream in(dir_ / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Whether a process exists at all (a zombie still does).
  static bool exists(pid_t pid) { return fs::exists("/proc/" + std::to_string(pid)); }

  fs::path dir_;
};

TEST_F(SecretStoreTest, LiteralAndUnknown) {
  SecretStore s = store(def("LIT", {{"value", "abc12345"}}));
  ASSERT_NE(s.find("LIT"), nullptr);
  EXPECT_EQ(s.find("NOPE"), nullptr);
  EXPECT_EQ(s.defs().size(), 1u);
  auto v = s.value("LIT");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "abc12345");
  auto missing = s.value("NOPE");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
}

// A value from a source that is too short to be masked safely is refused at use.
TEST_F(SecretStoreTest, ShortValuesRefused) {
  const char* var = "SPACE_CRED_TEST_SHORT";
  ::setenv(var, "1234567", 1);
  SecretStore s = store(def("SHORT", {{"env", var}}));
  auto v = s.value("SHORT");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kUnavailable);
  EXPECT_NE(v.error().message().find("too short to be masked"), std::string::npos)
      << v.error().message();
  EXPECT_EQ(v.error().message().find("1234567"), std::string::npos) << v.error().message();
  ::setenv(var, "12345678", 1);
  EXPECT_EQ(s.value("SHORT").value_or(""), "12345678");
  ::unsetenv(var);
}

TEST_F(SecretStoreTest, EnvReadAtEachUse) {
  const char* var = "SPACE_CRED_TEST_ENV_SOURCE";
  ::unsetenv(var);
  SecretStore s = store(def("ENVSEC", {{"env", var}}));
  auto v = s.value("ENVSEC");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kUnavailable);
  EXPECT_NE(v.error().message().find(var), std::string::npos) << v.error().message();
  EXPECT_NE(v.error().message().find("not set"), std::string::npos) << v.error().message();
  EXPECT_TRUE(v.error().message().starts_with("secret ENVSEC: ")) << v.error().message();

  ::setenv(var, "first-value", 1);
  v = s.value("ENVSEC");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "first-value");
  ::setenv(var, "rotated-value", 1);
  EXPECT_EQ(s.value("ENVSEC").value_or(""), "rotated-value");

  ::setenv(var, "", 1);
  EXPECT_FALSE(s.value("ENVSEC"));
  ::setenv(var, "bad\nvalue-with-newline", 1);
  v = s.value("ENVSEC");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().message().find("value-with-newline"), std::string::npos);
  ::unsetenv(var);
}

TEST_F(SecretStoreTest, FileTrimmedAndRereadEachUse) {
  write("tok", "  file-token-1\n\n \t\n");
  SecretStore s = store(def("F", {{"file", (dir_ / "tok").string()}}));
  auto v = s.value("F");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "file-token-1");
  write("tok", "file-token-2\r\n");
  EXPECT_EQ(s.value("F").value_or(""), "file-token-2");
}

TEST_F(SecretStoreTest, FileErrors) {
  SecretStore s = store(def("F", {{"file", (dir_ / "tok").string()}}));
  auto v = s.value("F");  // missing
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("ENOENT"), std::string::npos) << v.error().message();
  EXPECT_NE(v.error().message().find((dir_ / "tok").string()), std::string::npos);

  write("tok", "\n \n");
  v = s.value("F");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("empty"), std::string::npos) << v.error().message();

  write("tok", std::string(64 * 1024, 'x'));
  EXPECT_TRUE(s.value("F"));
  write("tok", std::string(64 * 1024 + 1, 'x'));
  v = s.value("F");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("larger than"), std::string::npos) << v.error().message();

  write("tok", "line-one-secret\nline-two-secret\n");
  v = s.value("F");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("control character"), std::string::npos);
  EXPECT_EQ(v.error().message().find("line-one"), std::string::npos) << v.error().message();

  fs::remove(dir_ / "tok");
  ASSERT_EQ(::mkfifo((dir_ / "tok").c_str(), 0600), 0);  // must not hang
  v = s.value("F");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("not a regular file"), std::string::npos);
}

// ---- SecretStore: commands ---------------------------------------------------------------

TEST_F(SecretStoreTest, CommandCachedForTtlWithInjectedClock) {
  std::string mint = script("mint", R"(
n=$(cat "$DIR/count" 2>/dev/null || echo 0)
n=$((n + 1))
echo $n > "$DIR/count"
printf '  minted-token-%s\n\n' $n)");
  SecretStore s = store(def("MINT", {{"command", {mint}}, {"ttl", "15m"}}));
  auto now = std::chrono::steady_clock::time_point(std::chrono::hours(1000));
  s.set_clock([&now] { return now; });

  auto v = s.value("MINT");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "minted-token-1");
  EXPECT_EQ(slurp("count"), "1\n");

  now += std::chrono::minutes(14) + seconds(59);
  EXPECT_EQ(s.value("MINT").value_or(""), "minted-token-1");
  EXPECT_EQ(slurp("count"), "1\n");

  now += seconds(1);  // 15 minutes after the first run: expired
  EXPECT_EQ(s.value("MINT").value_or(""), "minted-token-2");
  EXPECT_EQ(slurp("count"), "2\n");
  EXPECT_EQ(s.value("MINT").value_or(""), "minted-token-2");
  EXPECT_EQ(slurp("count"), "2\n");
}

TEST_F(SecretStoreTest, CommandArgumentsAndTtlZero) {
  std::string mint = script("mint", R"(
echo x >> "$DIR/runs"
echo "$1-$2")");
  SecretStore s = store(def("M", {{"command", {mint, "two words", "b"}}, {"ttl", "0"}}));
  EXPECT_EQ(s.value("M").value_or(""), "two words-b");
  EXPECT_EQ(s.value("M").value_or(""), "two words-b");
  EXPECT_EQ(slurp("runs"), "x\nx\n");  // ttl 0: never reused
}

TEST_F(SecretStoreTest, CommandGetsOnlyPathNullStdinAndNoStrayFds) {
  ::setenv("SPACE_CRED_TEST_LEAK", "leaked", 1);
  // An fd without O_CLOEXEC, as another thread might leave one: the command must not see it.
  int raw = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(raw, 0);
  ASSERT_EQ(::dup2(raw, 57), 57);
  ::close(raw);
  std::string probe = script("probe", R"sh(
cat
[ -e /proc/$$/fd/57 ] && fd=leaked || fd=clean
printf '[%s][%s][%s][%s][%s]' "${SPACE_CRED_TEST_LEAK:-unset}" "${HOME:-nohome}" "$PATH" \
  "$fd" "$(pwd)")sh");
  SecretStore s = store(def("P", {{"command", {probe}}}));
  auto v = s.value("P");
  ::close(57);
  ::unsetenv("SPACE_CRED_TEST_LEAK");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "[unset][nohome][/usr/sbin:/usr/bin:/sbin:/bin][clean][/]");
}

TEST_F(SecretStoreTest, CommandTimeoutKillsAndReaps) {
  // The script leaves a grandchild in its process group; the test is its subreaper so that it
  // can check the grandchild was killed too, and reap it.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  std::string slow = script("slow", R"(
echo $$ > "$DIR/pid"
sleep 30 &
echo $! > "$DIR/grandchild"
wait)");
  SecretStore s = store(def("SLOW", {{"command", {slow}}}));
  s.set_command_timeout(std::chrono::milliseconds(1000));
  auto start = std::chrono::steady_clock::now();
  auto v = s.value("SLOW");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kTimeout);
  EXPECT_NE(v.error().message().find(slow), std::string::npos) << v.error().message();
  EXPECT_LT(took, seconds(5));
  EXPECT_GE(took, std::chrono::milliseconds(950));

  pid_t pid = std::stoi(slurp("pid"));
  EXPECT_FALSE(exists(pid)) << "the command is still there (running or a zombie)";
  pid_t grandchild = std::stoi(slurp("grandchild"));
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(grandchild, &status, 0);
  } while (r < 0 && errno == EINTR);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  ASSERT_EQ(r, grandchild);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST_F(SecretStoreTest, CommandLeftoverIsKilledWhenItExits) {
  // The command exits at once but leaves its stdout open in something that runs on: the
  // leftover (in its process group) is killed when the command exits, so its value is taken
  // without waiting for the timeout, and nothing stays behind.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  std::string s1 = script("leaky", R"(
sleep 30 &
echo $! > "$DIR/grandchild"
echo token-value-0123456789)");
  SecretStore s = store(def("L", {{"command", {s1}}}));
  s.set_command_timeout(std::chrono::milliseconds(5000));
  auto start = std::chrono::steady_clock::now();
  auto v = s.value("L");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "token-value-0123456789");
  EXPECT_LT(took, seconds(4));
  pid_t grandchild = std::stoi(slurp("grandchild"));
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(grandchild, &status, 0);
  } while (r < 0 && errno == EINTR);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  ASSERT_EQ(r, grandchild);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST_F(SecretStoreTest, CommandNonZeroExit) {
  std::string fail = script("fail", R"(
echo $$ > "$DIR/pid"
echo 'half-minted-token-value'
echo 'mint: upstream said no' >&2
exit 3)");
  SecretStore s = store(def("FAIL", {{"command", {fail}}}));
  auto v = s.value("FAIL");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kUnavailable);
  const std::string& m = v.error().message();
  EXPECT_TRUE(m.starts_with("secret FAIL: ")) << m;
  EXPECT_NE(m.find("status 3"), std::string::npos) << m;
  EXPECT_NE(m.find("mint: upstream said no"), std::string::npos) << m;
  EXPECT_EQ(m.find("half-minted"), std::string::npos) << m;
  EXPECT_FALSE(exists(std::stoi(slurp("pid"))));
}

TEST_F(SecretStoreTest, CommandStderrExcerptIsBoundedAndCannotLeakStdout) {
  std::string noisy = script("noisy", R"(
echo 'stdout-token-abcdef'
echo 'stdout-token-abcdef' >&2
head -c 100000 /dev/zero | tr '\0' e >&2
exit 1)");
  SecretStore s = store(def("N", {{"command", {noisy}}}));
  auto v = s.value("N");
  ASSERT_FALSE(v);
  const std::string& m = v.error().message();
  EXPECT_EQ(m.find("stdout-token-abcdef"), std::string::npos) << m;
  EXPECT_LT(m.size(), 700u) << m;
  EXPECT_NE(m.find("eeee"), std::string::npos) << m;
}

TEST_F(SecretStoreTest, CommandKilledBySignal) {
  std::string sig = script("sig", "kill -9 $$");
  SecretStore s = store(def("S", {{"command", {sig}}}));
  auto v = s.value("S");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("signal 9"), std::string::npos) << v.error().message();
}

TEST_F(SecretStoreTest, CommandOutputCap) {
  std::string exact = script("exact", "head -c 65536 /dev/zero | tr '\\0' a");
  SecretStore ok = store(def("E", {{"command", {exact}}}));
  auto v = ok.value("E");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(v->size(), 65536u);

  // Writes 1 MiB: refused once past 64 KiB, and the writer killed and reaped, not waited for.
  std::string huge = script("huge", R"(
echo $$ > "$DIR/pid"
exec head -c 1048576 /dev/zero)");
  SecretStore s = store(def("H", {{"command", {huge}}}));
  v = s.value("H");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kUnavailable);
  EXPECT_NE(v.error().message().find("more than 64K"), std::string::npos) << v.error().message();
  EXPECT_FALSE(exists(std::stoi(slurp("pid"))));
}

TEST_F(SecretStoreTest, CommandEmptyOutputAndSpawnFailure) {
  std::string empty = script("empty", "printf ' \\n\\n'");
  SecretStore s = store(def("E", {{"command", {empty}}}));
  auto v = s.value("E");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("printed nothing"), std::string::npos) << v.error().message();

  SecretStore m = store(def("M", {{"command", {(dir_ / "no-such-mint").string()}}}));
  v = m.value("M");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("not found or not executable"), std::string::npos)
      << v.error().message();

  write("notexec", "#!/bin/sh\necho hi\n", 0600);
  SecretStore n = store(def("N", {{"command", {(dir_ / "notexec").string()}}}));
  v = n.value("N");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("not found or not executable"), std::string::npos)
      << v.error().message();
}

// A failed command is not run again before its backoff (2 s, doubling) has passed: callers
// in between get the same error without a run, so no caller can make spaced run it at will.
TEST_F(SecretStoreTest, FailuresBackOff) {
  std::string flaky = script("flaky", R"(
echo x >> "$DIR/runs"
if [ -e "$DIR/ok" ]; then echo good-token; else echo "refresh=rt-123" >&2; exit 7; fi)");
  SecretStore s = store(def("F", {{"command", {flaky}}}));
  auto t0 = std::chrono::steady_clock::now();
  auto now = t0;
  s.set_clock([&] { return now; });
  auto v = s.value("F");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("status 7"), std::string::npos) << v.error().message();
  write("ok", "");
  v = s.value("F");  // within the backoff: the same error, no run
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("not retried for another"), std::string::npos)
      << v.error().message();
  EXPECT_EQ(slurp("runs"), "x\n");
  now = t0 + std::chrono::seconds(3);
  EXPECT_EQ(s.value("F").value_or(""), "good-token");
  EXPECT_EQ(slurp("runs"), "x\nx\n");
}

TEST_F(SecretStoreTest, BackoffDoublesAndResets) {
  std::string bad =
      script("bad", R"(echo x >> "$DIR/runs"; [ -e "$DIR/ok" ] && echo token-ok || exit 1)");
  SecretStore s = store(def("B", {{"command", {bad}}, {"ttl", 0}}));
  auto t0 = std::chrono::steady_clock::now();
  auto now = t0;
  s.set_clock([&] { return now; });
  auto runs = [&] {
    std::string r = slurp("runs");
    return std::count(r.begin(), r.end(), 'x');
  };
  EXPECT_FALSE(s.value("B"));  // run 1 fails: next try after 2 s
  now = t0 + std::chrono::milliseconds(2100);
  EXPECT_FALSE(s.value("B"));  // run 2 fails: next after 4 s more
  now += std::chrono::seconds(3);
  EXPECT_FALSE(s.value("B"));  // inside the 4 s: no run
  EXPECT_EQ(runs(), 2);
  now += std::chrono::seconds(2);
  write("ok", "");
  EXPECT_EQ(s.value("B").value_or(""), "token-ok");  // run 3 succeeds: the backoff is gone
  EXPECT_EQ(s.value("B").value_or(""), "token-ok");  // ttl 0: run 4
  EXPECT_EQ(runs(), 4);
}

// The permit is asked only when a command would really run; a refusal runs nothing.
TEST_F(SecretStoreTest, PermitGatesRunsOnly) {
  std::string mint = script("mint", R"(echo x >> "$DIR/runs"; echo permit-token)");
  SecretStore s = store(def("P", {{"command", {mint}}, {"ttl", "1h"}}));
  int asked = 0;
  auto v = s.value("P", [&] {
    ++asked;
    return false;
  });
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code(), Code::kResourceExhausted);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "runs"));
  EXPECT_EQ(s.value("P",
                    [&] {
                      ++asked;
                      return true;
                    })
                .value_or(""),
            "permit-token");
  EXPECT_EQ(s.value("P",
                    [&] {
                      ++asked;
                      return false;
                    })
                .value_or(""),
            "permit-token");  // cached
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(slurp("runs"), "x\n");
}

// Every value handed out (and the literal ones from the start) is in the mask, in its forms;
// only the last kRemembered distinct values of a secret are kept.
TEST_F(SecretStoreTest, MaskPatternsCoverValuesSeen) {
  std::string mint = script("mint", R"(n=$(cat "$DIR/n" 2>/dev/null || echo 0); n=$((n+1));
echo $n > "$DIR/n"; echo "minted-token-$n")");
  std::map<std::string, SecretDef> m;
  m.emplace("LIT", def("LIT", {{"value", "literal/value+1"}}));
  m.emplace("CMD", def("CMD", {{"command", {mint}}, {"ttl", 0}}));
  SecretStore s(std::move(m));
  auto masked = [&](const std::string& text) { return Redactor(s.mask_patterns()).mask(text); };
  EXPECT_EQ(masked("a literal/value+1 b"), "a " + std::string(15, '*') + " b");
  EXPECT_EQ(masked("literal\\/value+1"), std::string(16, '*'));    // JSON "\/"
  EXPECT_EQ(masked("literal%2Fvalue%2B1"), std::string(19, '*'));  // percent-encoded
  EXPECT_EQ(masked("minted-token-1"), "minted-token-1");           // never minted yet
  auto first = s.mask_patterns();
  EXPECT_EQ(s.mask_patterns(), first);  // nothing new: not rebuilt
  for (int i = 1; i <= 5; ++i) {
    s.set_clock([] { return std::chrono::steady_clock::now(); });
    ASSERT_EQ(s.value("CMD").value_or(""), "minted-token-" + std::to_string(i));
  }
  EXPECT_NE(s.mask_patterns(), first);
  EXPECT_EQ(masked("minted-token-1"), "minted-token-1");  // the oldest fell out
  for (int i = 2; i <= 5; ++i)
    EXPECT_EQ(masked("minted-token-" + std::to_string(i)), std::string(14, '*')) << i;
}

TEST_F(SecretStoreTest, ConcurrentCallersShareOneRun) {
  std::string mint = script("mint", R"(
echo x >> "$DIR/runs"
sleep 0.3
echo shared-token)");
  SecretStore s = store(def("C", {{"command", {mint}}}));
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (s.value("C").value_or("") == "shared-token") ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 8);
  EXPECT_EQ(slurp("runs"), "x\n");
}

TEST_F(SecretStoreTest, SlowCommandDoesNotBlockOtherSecrets) {
  std::string slow = script("slow", "sleep 1; echo slow-token");
  std::map<std::string, SecretDef> m;
  m.emplace("SLOW", def("SLOW", {{"command", {slow}}}));
  m.emplace("LIT", def("LIT", {{"value", "literal-value"}}));
  SecretStore s(std::move(m));
  std::thread t([&] { EXPECT_EQ(s.value("SLOW").value_or(""), "slow-token"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s.value("LIT").value_or(""), "literal-value");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  t.join();
}

// ---- placeholders, replace_all -----------------------------------------------------------

TEST(PlaceholderTest, FormatAndRandomness) {
  std::string a = make_placeholder("GITHUB_TOKEN");
  std::string b = make_placeholder("GITHUB_TOKEN");
  std::regex re("space_ph_GITHUB_TOKEN_[0-9a-f]{32}");
  EXPECT_TRUE(std::regex_match(a, re)) << a;
  EXPECT_TRUE(std::regex_match(b, re)) << b;
  EXPECT_NE(a, b);
}

TEST(ReplaceAllTest, Basics) {
  std::string s = "Bearer PH and PH, PHPH";
  EXPECT_EQ(replace_all(s, "PH", "tok"), 4u);
  EXPECT_EQ(s, "Bearer tok and tok, toktok");
  EXPECT_EQ(replace_all(s, "", "x"), 0u);
  EXPECT_EQ(s, "Bearer tok and tok, toktok");
  EXPECT_EQ(replace_all(s, "absent", "x"), 0u);
  std::string a = "aaa";
  EXPECT_EQ(replace_all(a, "aa", "b"), 1u);  // left to right, not overlapping
  EXPECT_EQ(a, "ba");
  std::string grow = "a-a";
  EXPECT_EQ(replace_all(grow, "a", "aa"), 2u);  // the replacement is not rescanned
  EXPECT_EQ(grow, "aa-aa");
  std::string del = "xPHy";
  EXPECT_EQ(replace_all(del, "PH", ""), 1u);
  EXPECT_EQ(del, "xy");
}

// ---- Redactor ----------------------------------------------------------------------------

// The definition, written the slow way: every byte inside an occurrence of a secret is '*'.
std::pair<std::string, size_t> reference(const std::string& in,
                                         const std::vector<std::string>& secrets) {
  std::string out = in;
  size_t count = 0;
  std::vector<std::string> uniq;
  for (const auto& s : secrets) {
    if (!s.empty() && std::find(uniq.begin(), uniq.end(), s) == uniq.end()) uniq.push_back(s);
  }
  for (size_t i = 0; i < in.size(); ++i) {
    for (const auto& s : uniq) {
      if (in.compare(i, s.size(), s) == 0) {
        ++count;
        for (size_t k = 0; k < s.size(); ++k) out[i + k] = '*';
      }
    }
  }
  return {out, count};
}

std::string redact_split(const std::vector<std::string>& secrets, const std::string& in,
                         const std::vector<size_t>& cuts, size_t* count = nullptr) {
  Redactor r(secrets);
  size_t keep = 0;
  for (const auto& s : secrets) keep = std::max(keep, s.empty() ? 0 : s.size() - 1);
  std::string out;
  size_t prev = 0;
  for (size_t c : cuts) {
    out += r.feed(std::string_view(in).substr(prev, c - prev));
    // Never holds back more than the longest secret minus one.
    EXPECT_GE(out.size() + keep, c);
    EXPECT_LE(out.size(), c);
    prev = c;
  }
  out += r.feed(std::string_view(in).substr(prev));
  out += r.finish();
  if (count) *count = r.redactions();
  return out;
}

TEST(RedactorTest, OneShot) {
  Redactor r({"hunter2"});
  std::string out = r.feed("pass=hunter2; again hunter2.");
  out += r.finish();
  EXPECT_EQ(out, "pass=*******; again *******.");
  EXPECT_EQ(r.redactions(), 2u);
}

TEST(RedactorTest, NoSecretsPassesThrough) {
  Redactor r({"", ""});
  EXPECT_EQ(r.feed("abc"), "abc");
  EXPECT_EQ(r.feed(""), "");
  EXPECT_EQ(r.finish(), "");
  EXPECT_EQ(r.redactions(), 0u);
}

TEST(RedactorTest, HoldsBackOnlyWhatCouldStartAMatch) {
  Redactor r({"abcdef"});
  EXPECT_EQ(r.feed("0123456789"), "01234");  // 5 = len - 1 held back
  EXPECT_EQ(r.feed("ab"), "56");
  EXPECT_EQ(r.feed("cdef!"), "789**");
  EXPECT_EQ(r.finish(), "****!");
  EXPECT_EQ(r.redactions(), 1u);
}

TEST(RedactorTest, EverySplitOfABoundaryMatch) {
  std::string in = "xx-TOKEN123-yy-TOKEN123";
  std::string want = "xx-********-yy-********";
  for (size_t a = 0; a <= in.size(); ++a) {
    for (size_t b = a; b <= in.size(); ++b) {
      size_t count = 0;
      EXPECT_EQ(redact_split({"TOKEN123"}, in, {a, b}, &count), want) << a << "," << b;
      EXPECT_EQ(count, 2u);
    }
  }
  // One byte at a time.
  std::vector<size_t> cuts;
  for (size_t i = 1; i < in.size(); ++i) cuts.push_back(i);
  EXPECT_EQ(redact_split({"TOKEN123"}, in, cuts), want);
}

TEST(RedactorTest, OverlappingAdjacentAndNested) {
  EXPECT_EQ(reference("ababab", {"abab"}).first, "******");
  std::vector<size_t> ones = {1, 2, 3, 4, 5};
  size_t count = 0;
  EXPECT_EQ(redact_split({"abab"}, "ababab", ones, &count), "******");
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(redact_split({"abab"}, "xababy", {}, &count), "x****y");
  EXPECT_EQ(redact_split({"ab"}, "ababab", {3}, &count), "******");
  EXPECT_EQ(count, 3u);
  // Secrets of different lengths, one inside another, one overlapping another's end.
  std::vector<std::string> secrets = {"long-secret-value", "secret", "value!!", "q"};
  std::string in = "a long-secret-value!! secret q long-secret-valu";
  std::string want = "a " + std::string(19, '*') + " ****** * long-******-valu";
  EXPECT_EQ(reference(in, secrets).first, want);
  for (size_t cut = 0; cut <= in.size(); ++cut) {
    EXPECT_EQ(redact_split(secrets, in, {cut}, &count), want) << cut;
    EXPECT_EQ(count, 6u);
  }
}

TEST(RedactorTest, DuplicateSecretsCountOnce) {
  size_t count = 0;
  EXPECT_EQ(redact_split({"abc", "abc", ""}, "abcabc", {2}, &count), "******");
  EXPECT_EQ(count, 2u);
}

TEST(RedactorTest, FinishResetsTheStream) {
  Redactor r({"secret"});
  EXPECT_EQ(r.feed("sec"), "");
  EXPECT_EQ(r.finish(), "sec");
  EXPECT_EQ(r.feed("ret"), "");  // not joined to the previous body
  EXPECT_EQ(r.finish(), "ret");
  EXPECT_EQ(r.redactions(), 0u);
}

// Random bodies over a small alphabet (so secrets overlap and recur by chance too) with planted
// secrets, split at random points: the output equals the one-shot reference and holds no secret.
TEST(RedactorTest, PropertyRandomSplitsMatchOneShot) {
  std::mt19937 rng(20240611);
  auto rand_string = [&](size_t n, std::string_view alphabet) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::string> secrets;
    size_t nsec = 1 + rng() % 4;
    for (size_t i = 0; i < nsec; ++i) secrets.push_back(rand_string(rng() % 12, "abcd"));
    std::string in = rand_string(rng() % 200, "abcde");
    for (int k = rng() % 6; k > 0; --k) {
      const std::string& s = secrets[rng() % secrets.size()];
      in.insert(rng() % (in.size() + 1), s);
    }
    std::vector<size_t> cuts;
    for (int k = rng() % 10; k > 0; --k) cuts.push_back(rng() % (in.size() + 1));
    std::sort(cuts.begin(), cuts.end());

    auto [want, want_count] = reference(in, secrets);
    size_t count = 0;
    std::string got = redact_split(secrets, in, cuts, &count);
    ASSERT_EQ(got.size(), in.size());
    ASSERT_EQ(got, want) << "in=" << in << " iter=" << iter;
    ASSERT_EQ(count, want_count);
    for (const auto& s : secrets) {
      if (s.empty()) continue;
      ASSERT_EQ(got.find(s), std::string::npos) << s << " in " << got;
    }
  }
}

}  // namespace
}  // namespace space::egress

namespace space::egress {
namespace {

// The gateway process's definitions carry where a value goes, never where it comes from.
TEST(SecretWire, DefinitionsTravelWithoutTheirSource) {
  json j = base_def();
  j["methods"] = {"GET"};
  j["paths"] = {"/repos/"};
  j["placeholder_in"] = {"Authorization", "query:key"};
  auto d = SecretDef::from_json("GH", j);
  ASSERT_TRUE(d) << d.error().message();
  json wire = d->to_wire();
  EXPECT_EQ(wire.dump().find("s3cr3t"), std::string::npos) << wire.dump();
  auto r = SecretDef::from_wire("GH", json::parse(wire.dump()));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->source, SecretDef::Source::kRemote);
  EXPECT_TRUE(r->value.empty());
  EXPECT_EQ(r->methods, d->methods);
  EXPECT_EQ(r->paths, d->paths);
  EXPECT_EQ(r->placeholder_headers, d->placeholder_headers);
  EXPECT_EQ(r->placeholder_query, d->placeholder_query);
  EXPECT_EQ(r->env_var, d->env_var);
  auto gh = normalize_host("api.github.com");
  EXPECT_TRUE(r->applies(*gh, "GET", "/repos/x"));
  EXPECT_FALSE(r->applies(*gh, "POST", "/repos/x"));
  // A header definition keeps its header and format.
  json h = base_def();
  h["header"] = "X-Api-Key";
  h["format"] = "Key {}";
  auto hd = SecretDef::from_json("K", h);
  ASSERT_TRUE(hd);
  auto hr = SecretDef::from_wire("K", hd->to_wire());
  ASSERT_TRUE(hr) << hr.error().message();
  EXPECT_EQ(hr->header, "X-Api-Key");
  EXPECT_EQ(hr->format, "Key {}");
  // A source smuggled into the wire form is refused.
  json bad = d->to_wire();
  bad["command"] = {"/bin/sh", "-c", "id"};
  EXPECT_FALSE(SecretDef::from_wire("GH", bad));
}

// A fetching store reads nothing itself: every value comes through fetch, for a sandbox, and is
// remembered for masking; spaced's own known values can be added.
TEST(SecretWire, FetchingStore) {
  auto d = SecretDef::from_wire("GH", SecretDef::from_json("GH", base_def())->to_wire());
  ASSERT_TRUE(d);
  std::vector<std::pair<std::string, std::string>> asked;
  SecretStore store(
      {{"GH", *d}},
      [&](const std::string& name, const std::string& sandbox) -> Result<std::string> {
        asked.emplace_back(name, sandbox);
        if (sandbox == "sb_b") return fail(Code::kPermissionDenied, "not granted");
        return std::string("fetched-value-0123456789");
      });
  EXPECT_TRUE(store.remembered("GH").empty());
  auto v = store.value("GH", {}, "sb_a");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, "fetched-value-0123456789");
  EXPECT_FALSE(store.value("GH", {}, "sb_b"));
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0], std::make_pair(std::string("GH"), std::string("sb_a")));
  store.remember_values("GH", {"old-value-abcdefghij", "x"});  // too short: not a mask
  EXPECT_EQ(store.remembered("GH"),
            (std::vector<std::string>{"fetched-value-0123456789", "old-value-abcdefghij"}));
  std::string body = "a old-value-abcdefghij b fetched-value-0123456789";
  Redactor r(store.mask_patterns());
  std::string out = r.feed(body) + r.finish();
  EXPECT_EQ(out.find("old-value"), std::string::npos) << out;
  EXPECT_EQ(out.find("fetched-value"), std::string::npos) << out;
}

}  // namespace
}  // namespace space::egress
