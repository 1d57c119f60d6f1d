// Exec tests against the real space-agent binary (see agent_client.h): output streams, exit
// codes and signals, start failures, stdin, concurrency, tree kills, flow control and ps.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include "agent_client.h"
#include "proto/frame.h"

namespace space::agent::testing {
namespace {

class AgentExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_AGENT();
    agent_ = std::make_unique<AgentClient>();
    json h = agent_->hello();
    ASSERT_EQ(h.value("version", 0), 1);
    ASSERT_EQ(h.value("pid", 0), agent_->pid());
  }
  json sh(const std::string& script) { return {{"argv", {"sh", "-c", script}}}; }
  // Pids of processes attributed to `stream` by ps.
  std::vector<int> stream_pids(uint32_t req_stream, uint32_t stream) {
    json r = agent_->request(req_stream, {{"op", "ps"}});
    std::vector<int> pids;
    for (const json& p : r.at("processes"))
      if (p.at("stream").is_number() && p.at("stream").get<uint32_t>() == stream)
        pids.push_back(p.at("pid").get<int>());
    return pids;
  }
  std::unique_ptr<AgentClient> agent_;
};

TEST_F(AgentExecTest, StdoutAndStderrAreSeparate) {
  ExecResult r = agent_->run(1, sh("echo out1; echo err1 >&2; echo out2"));
  ASSERT_TRUE(r.pid.has_value());
  EXPECT_EQ(r.out, "out1\nout2\n");
  EXPECT_EQ(r.err, "err1\n");
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
}

TEST_F(AgentExecTest, ExitCodesAndSignals) {
  EXPECT_EQ(agent_->run(1, sh("exit 7")).exit, json({{"exit_code", 7}}));
  ExecResult killed = agent_->run(2, sh("kill -TERM $$"));
  EXPECT_EQ(killed.exit.value("signal", 0), SIGTERM);
  EXPECT_EQ(killed.exit.value("core_dumped", true), false);
  // SIGPIPE is ignored by the agent but must be back to default in the process.
  ExecResult pipe = agent_->run(3, sh("kill -PIPE $$"));
  EXPECT_EQ(pipe.exit.value("signal", 0), SIGPIPE);
}

TEST_F(AgentExecTest, CommandNotFoundIs127WithoutStarted) {
  ExecResult r = agent_->run(1, {{"argv", {"python4", "-c", "1"}}});
  EXPECT_FALSE(r.pid.has_value());
  EXPECT_EQ(r.exit.value("exit_code", 0), 127);
  EXPECT_EQ(r.exit["error"].value("message", ""), "\"python4\": command not found");
  EXPECT_EQ(r.exit["error"].value("code", ""), "not_found");

  ExecResult abs = agent_->run(2, {{"argv", {"/nonexistent/x"}}});
  EXPECT_EQ(abs.exit.value("exit_code", 0), 127);
}

TEST_F(AgentExecTest, NotExecutableIs126) {
  TempDir t;
  std::string f = t / "script";
  FILE* fp = std::fopen(f.c_str(), "w");
  std::fputs("#!/bin/sh\necho hi\n", fp);
  std::fclose(fp);
  ::chmod(f.c_str(), 0644);
  ExecResult r = agent_->run(1, {{"argv", {f}}});
  EXPECT_FALSE(r.pid.has_value());
  EXPECT_EQ(r.exit.value("exit_code", 0), 126);
  EXPECT_EQ(r.exit["error"].value("message", ""), "exec \"" + f + "\": Permission denied (EACCES)");
  ::chmod(f.c_str(), 0755);
  EXPECT_EQ(agent_->run(2, {{"argv", {f}}}).out, "hi\n");
}

TEST_F(AgentExecTest, PathComesFromTheExecEnvironment) {
  TempDir t;
  std::string f = t / "mytool";
  FILE* fp = std::fopen(f.c_str(), "w");
  std::fputs("#!/bin/sh\necho tool \"$FOO\" \"$(pwd)\"\n", fp);
  std::fclose(fp);
  ::chmod(f.c_str(), 0755);
  ExecResult r = agent_->run(1, {{"argv", {"mytool"}},
                                 {"env", {"PATH=" + t.path() + ":/bin", "FOO=bar"}},
                                 {"cwd", t.path()}});
  EXPECT_EQ(r.out, "tool bar " + t.path() + "\n");
  ExecResult bad_cwd = agent_->run(2, {{"argv", {"true"}}, {"cwd", t / "missing"}});
  EXPECT_EQ(bad_cwd.exit.value("exit_code", 0), 126);
  EXPECT_NE(bad_cwd.exit["error"].value("message", "").find("chdir"), std::string::npos);
}

TEST_F(AgentExecTest, InvalidSpecsAreAnsweredWithExitAndError) {
  for (json bad : {json{{"argv", json::array()}}, json{{"argv", "sh"}},
                   json{{"argv", {"true"}}, {"cwd", "relative"}},
                   json{{"argv", {"true"}}, {"uid", -1}}, json{{"argv", {1, 2}}}}) {
    agent_->send_json(FrameType::kExec, 5, bad);
    auto f = agent_->next(5);
    ASSERT_TRUE(f);
    ASSERT_EQ(f->type, FrameType::kExit) << bad;
    json e = json::parse(f->payload);
    EXPECT_EQ(e.value("exit_code", 0), 125) << bad;
    EXPECT_EQ(e["error"].value("code", ""), "invalid_argument") << bad;
  }
  agent_->send(FrameType::kExec, 6, "{not json");
  auto f = agent_->next(6);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kExit);
}

TEST_F(AgentExecTest, SecondExecOnActiveStreamIsRefused) {
  agent_->send_json(FrameType::kExec, 1, sh("sleep 0.3; echo first"));
  agent_->send_json(FrameType::kExec, 1, sh("echo second"));
  ExecResult first_frames = agent_->collect(1);
  // The refusal comes first (exit + error), then the original stream's frames.
  EXPECT_EQ(first_frames.exit["error"].value("code", ""), "exists");
  ExecResult rest = agent_->collect(1);
  EXPECT_EQ(rest.out, "first\n");
  EXPECT_EQ(rest.exit, json({{"exit_code", 0}}));
}

TEST_F(AgentExecTest, StdinRoundTripThroughCat) {
  agent_->send_json(FrameType::kExec, 1, {{"argv", {"cat"}}, {"stdin", true}});
  std::string sent;
  for (int i = 0; i < 40; ++i) {
    std::string chunk(5000, static_cast<char>('a' + i % 26));
    sent += chunk;
    agent_->send(FrameType::kStdin, 1, chunk);
  }
  agent_->send(FrameType::kStdin, 1, "");
  ExecResult r = agent_->collect(1);
  EXPECT_EQ(r.out.size(), sent.size());
  EXPECT_TRUE(r.out == sent);
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
  // Without "stdin": true the process reads /dev/null.
  EXPECT_EQ(agent_->run(2, {{"argv", {"cat"}}}).exit, json({{"exit_code", 0}}));
}

TEST_F(AgentExecTest, SixteenConcurrentExecs) {
  auto start = std::chrono::steady_clock::now();
  for (uint32_t s = 1; s <= 16; ++s) {
    json spec = sh("sleep 0.3; echo stream " + std::to_string(s));
    if (s % 4 == 0) spec["detach"] = true;
    agent_->send_json(FrameType::kExec, s, spec);
  }
  for (uint32_t s = 1; s <= 16; ++s) {
    ExecResult r = agent_->collect(s);
    EXPECT_EQ(r.exit, json({{"exit_code", 0}})) << s;
    EXPECT_EQ(r.out, s % 4 == 0 ? "" : "stream " + std::to_string(s) + "\n");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);  // they ran in parallel
}

TEST_F(AgentExecTest, SignalKillsTheWholeTreeIncludingSetsidChildren) {
  agent_->send_json(FrameType::kExec, 1, sh("setsid sleep 100 & sleep 100 & sleep 100"));
  auto started = agent_->next(1);
  ASSERT_TRUE(started && started->type == FrameType::kStarted);
  // Wait until ps shows the tree: sh + 3 sleeps (+ the shim itself).
  std::vector<int> pids;
  for (int i = 0; i < 200 && pids.size() < 5; ++i) {
    ::usleep(10000);
    pids = stream_pids(100 + i, 1);
  }
  ASSERT_GE(pids.size(), 5u);
  agent_->send_json(FrameType::kSignal, 1, {{"signal", SIGKILL}});
  ExecResult r = agent_->collect(1);
  EXPECT_EQ(r.exit.value("signal", 0), SIGKILL);
  for (int pid : pids) EXPECT_TRUE(wait_gone(pid)) << "pid " << pid << " survived";
}

TEST_F(AgentExecTest, SignalAfterExitReachesBackgroundProcesses) {
  // The main process exits at once; a background child keeps stdout open. The exit arrives
  // after the 200 ms grace, not after the child's 100 s.
  auto t0 = std::chrono::steady_clock::now();
  agent_->send_json(FrameType::kExec, 1, sh("sleep 100 & echo $!"));
  ExecResult r = agent_->collect(1);
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  int bg = std::atoi(r.out.c_str());
  ASSERT_GT(bg, 1);
  EXPECT_EQ(::kill(bg, 0), 0);
  agent_->send_json(FrameType::kSignal, 1, {{"signal", SIGKILL}});
  EXPECT_TRUE(wait_gone(bg));
}

TEST_F(AgentExecTest, FlowControlStopsAtTheWindowAndResumesWithCredits) {
  constexpr size_t kTotal = 8u << 20;
  agent_->send_json(FrameType::kExec, 1,
                    {{"argv", {"head", "-c", std::to_string(kTotal), "/dev/zero"}}});
  size_t got = 0;
  while (auto f = agent_->next(1, 500ms)) {  // no credits: quiet once the window is spent
    if (f->type == FrameType::kStdout) got += f->payload.size();
    ASSERT_NE(f->type, FrameType::kExit);
  }
  EXPECT_EQ(got, proto::kStreamWindow);
  // Credit what we have; the rest flows as we keep crediting.
  agent_->send_json(FrameType::kCredit, 1, {{"bytes", got}});
  ExecResult r = agent_->collect(1);
  EXPECT_EQ(got + r.out.size(), kTotal);
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
}

TEST_F(AgentExecTest, PsShowsStreamsAndKillRefusesInit) {
  agent_->send_json(FrameType::kExec, 7, {{"argv", {"sleep", "100"}}, {"detach", true}});
  auto started = agent_->next(7);
  ASSERT_TRUE(started && started->type == FrameType::kStarted);
  int pid = json::parse(started->payload).at("pid").get<int>();
  json ps = agent_->request(1, {{"op", "ps"}});
  ASSERT_TRUE(ps.value("ok", false)) << ps;
  bool saw_agent = false, saw_sleep = false;
  for (const json& p : ps.at("processes")) {
    if (p.at("pid") == agent_->pid()) {
      saw_agent = true;
      EXPECT_TRUE(p.at("stream").is_null());
    }
    if (p.at("pid") == pid) {
      saw_sleep = true;
      EXPECT_EQ(p.at("stream"), 7);
      EXPECT_EQ(p.at("argv"), json({"sleep", "100"}));
      EXPECT_EQ(p.at("uid"), ::geteuid());
      EXPECT_EQ(p.at("state").get<std::string>().size(), 1u);
    }
  }
  EXPECT_TRUE(saw_agent);
  EXPECT_TRUE(saw_sleep);

  for (int bad : {1, 0, -1, agent_->pid()}) {
    json r = agent_->request(2, {{"op", "kill"}, {"pid", bad}, {"signal", 9}});
    EXPECT_FALSE(r.value("ok", true)) << bad;
    EXPECT_EQ(r["error"].value("code", ""), "invalid_argument");
  }
  json k = agent_->request(3, {{"op", "kill"}, {"pid", pid}, {"signal", SIGKILL}});
  EXPECT_TRUE(k.value("ok", false)) << k;
  ExecResult r = agent_->collect(7);
  EXPECT_EQ(r.exit.value("signal", 0), SIGKILL);
}

TEST_F(AgentExecTest, RunsAsRequestedUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  ExecResult r = agent_->run(1, {{"argv", {"id", "-u"}}, {"uid", 65534}, {"gid", 65534}});
  EXPECT_EQ(r.out, "65534\n");
  ExecResult g = agent_->run(2, {{"argv", {"id", "-G"}}, {"uid", 65534}, {"gid", 65534}});
  EXPECT_EQ(g.out, "65534\n");
}

TEST_F(AgentExecTest, ProcessGetsCleanSignalStateAndUmask) {
  ExecResult r = agent_->run(1, sh("grep -E '^(SigBlk|SigIgn)' /proc/self/status; umask"));
  EXPECT_EQ(r.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n0022\n");
}

TEST_F(AgentExecTest, ProcessInheritsOnlyStdio) {
  // Start a few execs first so their pipes exist in the agent while this one forks.
  agent_->send_json(FrameType::kExec, 1, {{"argv", {"cat"}}, {"stdin", true}});
  agent_->send_json(FrameType::kExec, 2, {{"argv", {"sleep", "5"}}, {"detach", true}});
  ASSERT_TRUE(agent_->next(1));
  ASSERT_TRUE(agent_->next(2));
  ExecResult r = agent_->run(3, sh("ls /proc/$$/fd"));
  EXPECT_EQ(r.out, "0\n1\n2\n");
  agent_->send_json(FrameType::kSignal, 2, {{"signal", SIGKILL}});
  agent_->send(FrameType::kStdin, 1, "");
  EXPECT_EQ(agent_->collect(1).exit, json({{"exit_code", 0}}));
}

TEST_F(AgentExecTest, ClosingStdinReachesTheProcessWhileOtherExecsRun) {
  // If a later exec's shim kept a copy of the first exec's stdin pipe, cat would never see EOF.
  agent_->send_json(FrameType::kExec, 1, {{"argv", {"cat"}}, {"stdin", true}});
  ASSERT_TRUE(agent_->next(1));
  for (uint32_t s = 2; s <= 4; ++s)
    agent_->send_json(FrameType::kExec, s, {{"argv", {"sleep", "5"}}, {"stdin", true}});
  for (uint32_t s = 2; s <= 4; ++s) ASSERT_TRUE(agent_->next(s));
  agent_->send(FrameType::kStdin, 1, "bye\n");
  agent_->send(FrameType::kStdin, 1, "");
  ExecResult r = agent_->collect(1, 3000ms);
  EXPECT_EQ(r.out, "bye\n");
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
  for (uint32_t s = 2; s <= 4; ++s) agent_->send_json(FrameType::kSignal, s, {{"signal", 9}});
  for (uint32_t s = 2; s <= 4; ++s) EXPECT_EQ(agent_->collect(s).exit.value("signal", 0), 9);
}

TEST_F(AgentExecTest, ShimKilledFromInsideStillYieldsExit) {
  // The worker's parent is the shim; killing it re-parents the worker to the agent, which
  // then reaps it and reports its status itself.
  ExecResult r = agent_->run(1, sh("kill -9 $PPID; sleep 0.1; echo alive; exit 3"));
  EXPECT_EQ(r.out, "alive\n");
  EXPECT_EQ(r.exit, json({{"exit_code", 3}}));
  // And a signal still reaches a worker whose shim is gone.
  agent_->send_json(FrameType::kExec, 2, sh("kill -9 $PPID; exec sleep 100"));
  ASSERT_TRUE(agent_->next(2));
  ::usleep(100000);
  agent_->send_json(FrameType::kSignal, 2, {{"signal", SIGKILL}});
  EXPECT_EQ(agent_->collect(2, 3000ms).exit.value("signal", 0), SIGKILL);
}

// The agent is non-dumpable, so a process of the same uid can neither read its fds (where the
// channel and the spare socketpair live) nor ptrace it. Without PR_SET_DUMPABLE 0 the same-uid
// `ls` below would succeed.
TEST(AgentPostureTest, SameUidProcessCannotReachTheAgentsFds) {
  SKIP_WITHOUT_AGENT();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start the agent as another uid";
  AgentClient agent({}, /*run_as_uid=*/65534);
  ASSERT_EQ(agent.hello().value("pid", 0), agent.pid());
  std::string fds = "/proc/" + std::to_string(agent.pid()) + "/fd";
  ExecResult r = agent.run(1, {{"argv", {"sh", "-c", "id -u; ls " + fds + " >/dev/null"}}});
  EXPECT_EQ(r.out, "65534\n");
  EXPECT_NE(r.exit.value("exit_code", 0), 0) << "a same-uid process listed " << fds;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  // The exec's own /proc entry stays readable: only the agent is shielded.
  ExecResult self = agent.run(2, {{"argv", {"sh", "-c", "ls /proc/$$/fd"}}});
  EXPECT_EQ(self.exit, json({{"exit_code", 0}}));
}

TEST_F(AgentExecTest, PingPongAndUnknownFramesAreHarmless) {
  agent_->send(FrameType::kPing, 42, "abc");
  auto f = agent_->next(42);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kPong);
  EXPECT_EQ(f->payload, "abc");
  // Frames of the wrong direction, signals/credits/stdin for unknown streams: ignored.
  agent_->send(FrameType::kStdout, 9, "x");
  agent_->send(FrameType::kSignal, 9, R"({"signal":9})");
  agent_->send(FrameType::kSignal, 9, R"({"signal":"x"})");
  agent_->send(FrameType::kCredit, 9, R"({"bytes":-5})");
  agent_->send(FrameType::kStdin, 9, "zzz");
  agent_->send(FrameType::kData, 9, "zzz");
  EXPECT_EQ(agent_->run(1, sh("echo still here")).out, "still here\n");
}

TEST_F(AgentExecTest, KillingTheAgentKillsExecTrees) {
  agent_->send_json(FrameType::kExec, 1, sh("sleep 100 & sleep 100"));
  ASSERT_TRUE(agent_->next(1));
  std::vector<int> pids;
  for (int i = 0; i < 200 && pids.size() < 3; ++i) {
    ::usleep(10000);
    pids = stream_pids(100 + i, 1);
  }
  ASSERT_GE(pids.size(), 3u);
  agent_.reset();  // SIGKILL
  for (int pid : pids)
    EXPECT_TRUE(wait_gone(pid, 3000ms, /*allow_zombie=*/true)) << "pid " << pid << " survived";
}

}  // namespace
}  // namespace space::agent::testing
