// Exec spec validation, PATH lookup candidates and start-failure messages.
#include "agent/exec_spec.h"

#include <gtest/gtest.h>

namespace space::agent {
namespace {

TEST(ExecSpec, ParsesDefaultsAndFields) {
  auto s = parse_exec_spec(R"({"argv":["sh","-c","echo hi"]})");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->cwd, "/");
  EXPECT_FALSE(s->stdin_pipe);
  EXPECT_FALSE(s->detach);
  auto full = parse_exec_spec(
      R"({"argv":["x"],"env":["A=1"],"cwd":"/tmp","uid":1000,"gid":100,"stdin":true,)"
      R"("detach":false,"stdin_credit":true})");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->uid, 1000u);
  EXPECT_EQ(full->gid, 100u);
  EXPECT_TRUE(full->stdin_pipe);
  EXPECT_TRUE(full->stdin_credit);
  // detach wins over stdin.
  EXPECT_FALSE(parse_exec_spec(R"({"argv":["x"],"stdin":true,"detach":true})")->stdin_pipe);
}

TEST(ExecSpec, UserResolvesFromPasswd) {
  const char* passwd =
      "root:x:0:0:root:/root:/bin/sh\n"
      "dev:x:1000:1001:Dev:/home/dev:/bin/bash\n"
      "broken:x:abc:1:::\n"
      "short:x:5\n";
  auto spec = [](const char* json) { return *parse_exec_spec(json); };
  ExecSpec s = spec(R"({"argv":["id"],"user":"dev"})");
  ASSERT_TRUE(apply_user(s, passwd)) << "a name";
  EXPECT_EQ(s.uid, 1000u);
  EXPECT_EQ(s.gid, 1001u);
  EXPECT_EQ(s.cwd, "/home/dev");
  EXPECT_EQ(s.env, (std::vector<std::string>{"HOME=/home/dev", "USER=dev", "LOGNAME=dev"}));
  // What the request set wins.
  s = spec(R"({"argv":["id"],"user":"dev","cwd":"/tmp","env":["HOME=/x"]})");
  ASSERT_TRUE(apply_user(s, passwd));
  EXPECT_EQ(s.cwd, "/tmp");
  EXPECT_EQ(s.env, (std::vector<std::string>{"HOME=/x", "USER=dev", "LOGNAME=dev"}));
  // Numbers need no entry.
  s = spec(R"({"argv":["id"],"user":"4242"})");
  ASSERT_TRUE(apply_user(s, ""));
  EXPECT_EQ(s.uid, 4242u);
  EXPECT_EQ(s.gid, 4242u);
  EXPECT_EQ(s.cwd, "/");
  s = spec(R"({"argv":["id"],"user":"7:8"})");
  ASSERT_TRUE(apply_user(s, ""));
  EXPECT_EQ(s.gid, 8u);
  // Unknown, malformed entries, a bad group, no user at all.
  s = spec(R"({"argv":["id"],"user":"nobody"})");
  auto r = apply_user(s, passwd);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNotFound);
  EXPECT_NE(r.error().message().find("no user \"nobody\""), std::string::npos);
  s = spec(R"({"argv":["id"],"user":"broken"})");
  EXPECT_FALSE(apply_user(s, passwd));
  s = spec(R"({"argv":["id"],"user":"short"})");
  EXPECT_FALSE(apply_user(s, passwd));
  s = spec(R"({"argv":["id"],"user":"1:x"})");
  EXPECT_FALSE(apply_user(s, passwd));
  s = spec(R"({"argv":["id"]})");
  ASSERT_TRUE(apply_user(s, passwd));
  EXPECT_EQ(s.uid, 0u);
  EXPECT_FALSE(parse_exec_spec(R"({"argv":["id"],"user":""})"));
}

TEST(ExecSpec, RejectsInvalidSpecs) {
  for (
      const char* bad :
      {R"({})", R"({"argv":[]})", R"({"argv":"sh"})", R"({"argv":[1]})", R"({"argv":["a\u0000b"]})",
       R"({"argv":["x"],"env":["NOEQUALS"]})", R"({"argv":["x"],"env":["=x"]})",
       R"({"argv":["x"],"cwd":"rel"})", R"({"argv":["x"],"uid":-1})",
       R"({"argv":["x"],"uid":4294967295})", R"({"argv":["x"],"stdin":"yes"})", R"([1,2])",
       R"(not json)",
       R"({"argv":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})"}) {
    auto s = parse_exec_spec(bad);
    ASSERT_FALSE(s) << bad;
    EXPECT_EQ(s.error().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(ExecSpec, CandidatesFollowTheExecsPath) {
  ExecSpec s;
  s.argv = {"tool"};
  EXPECT_EQ(exec_candidates(s).front(), "/usr/local/sbin/tool");  // default PATH
  s.env = {"PATH=/a:/b/::/c"};
  EXPECT_EQ(exec_candidates(s),
            (std::vector<std::string>{"/a/tool", "/b/tool", "tool", "/c/tool"}));
  s.argv = {"./rel/tool"};
  EXPECT_EQ(exec_candidates(s), std::vector<std::string>{"./rel/tool"});
  s.argv = {""};
  EXPECT_TRUE(exec_candidates(s).empty());
}

TEST(ExecSpec, StartFailureMessages) {
  ExecSpec s;
  s.argv = {"python4"};
  s.cwd = "/nope";
  auto nf = describe_start_failure(s, WorkerStep::kExec, ENOENT);
  EXPECT_EQ(nf.exit_code, 127);
  EXPECT_EQ(nf.error.message(), "\"python4\": command not found");
  s.argv = {"/x"};
  auto acc = describe_start_failure(s, WorkerStep::kExec, EACCES);
  EXPECT_EQ(acc.exit_code, 126);
  EXPECT_EQ(acc.error.message(), "exec \"/x\": Permission denied (EACCES)");
  EXPECT_EQ(describe_start_failure(s, WorkerStep::kExec, ENOENT).exit_code, 127);
  EXPECT_EQ(describe_start_failure(s, WorkerStep::kExec, ENOEXEC).exit_code, 126);
  auto cd = describe_start_failure(s, WorkerStep::kChdir, ENOENT);
  EXPECT_EQ(cd.exit_code, 126);
  EXPECT_EQ(cd.error.message(), "chdir \"/nope\": No such file or directory (ENOENT)");
}

}  // namespace
}  // namespace space::agent
