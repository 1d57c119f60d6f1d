// Exec auditing in the agent (microVM guests; agent/exec_audit.h), with the REAL space-agent
// listening on a Unix socket as on a guest's vsock and `--audit-execs` (outside a VM the agent
// is not PID 1, so it has to be asked): every exec of the processes it starts, and of their
// descendants, comes back in `proc_exec` frames with the exec's stream; a daemon that does not
// read makes the agent drop and count records, never hold an exec back; records made while no
// daemon is attached come on the next connection. Installing the filter without no_new_privs
// takes CAP_SYS_ADMIN, so these tests run as root only.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "agent/options.h"
#include "agent_client.h"

namespace space::agent::testing {
namespace {

#define SKIP_UNLESS_ROOT()                                                           \
  do {                                                                               \
    SKIP_WITHOUT_AGENT();                                                            \
    if (::geteuid() != 0) GTEST_SKIP() << "the agent's exec filter needs root here"; \
  } while (0)

class AgentExecAuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_ROOT();
    agent_ = std::make_unique<AgentClient>(ListenChannel{tmp_ / "channel.sock"},
                                           std::vector<std::string>{"--audit-execs"});
    ASSERT_TRUE(agent_->connect());
    ASSERT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  }

  // proc_exec frames on stream 0 until `done` says enough or `timeout`: the records and the
  // drops they counted.
  struct Reports {
    std::vector<json> events;
    uint64_t dropped = 0;
  };
  template <class Done>
  Reports reports(Done done, std::chrono::milliseconds timeout = 10000ms) {
    Reports r;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done(r)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      auto f = agent_->next(0, left);
      if (!f) break;
      if (f->type != FrameType::kProcExec) continue;
      json j = json::parse(f->payload);
      for (auto& e : j["events"]) r.events.push_back(e);
      r.dropped += j["dropped"].get<uint64_t>();
    }
    return r;
  }
  static bool has_argv0(const std::vector<json>& events, const std::string& a) {
    for (auto& e : events)
      if (!e["argv"].empty() && e["argv"][0] == a) return true;
    return false;
  }

  TempDir tmp_;
  std::unique_ptr<AgentClient> agent_;
};

TEST_F(AgentExecAuditTest, EveryExecOfTheTreeIsReportedWithItsStream) {
  ExecResult r = agent_->run(
      7, {{"argv", {"/bin/sh", "-c", "/bin/true one; /bin/echo two; (/bin/echo three)"}}});
  ASSERT_EQ(r.exit, json({{"exit_code", 0}}));
  ASSERT_TRUE(r.pid);
  Reports rep = reports([](const Reports& r) { return r.events.size() >= 4; });
  ASSERT_EQ(rep.events.size(), 4u);
  EXPECT_EQ(rep.dropped, 0u);
  // In order: the shell itself (the exec's main process), then what it ran.
  EXPECT_EQ(rep.events[0]["argv"],
            json({"/bin/sh", "-c", "/bin/true one; /bin/echo two; (/bin/echo three)"}));
  EXPECT_EQ(rep.events[0]["pid"], *r.pid);
  EXPECT_EQ(rep.events[1]["argv"], json({"/bin/true", "one"}));
  EXPECT_EQ(rep.events[1]["ppid"], *r.pid);
  EXPECT_EQ(rep.events[2]["path"], "/bin/echo");
  EXPECT_EQ(rep.events[3]["argv"], json({"/bin/echo", "three"}));  // from a subshell
  for (const json& e : rep.events) {
    EXPECT_EQ(e["syscall"], "execve");
    EXPECT_EQ(e["stream"], 7) << e.dump();
    EXPECT_EQ(e["uid"], 0);
    EXPECT_EQ(e["cwd"], "/");
    EXPECT_FALSE(e.contains("host_pid"));
  }
}

TEST_F(AgentExecAuditTest, ADaemonThatDoesNotReadCostsRecordsNotExecs) {
  // 600 execs of ~12 KiB records each (7 MiB) while the test reads nothing: far more than the
  // agent queues (1 MiB) plus what the channel and the socket hold. The shell must finish.
  const std::string marker = tmp_ / "done";
  const std::string arg(4000, 'x');
  const std::string script = "i=0; while [ $i -lt 600 ]; do /bin/true " + arg + " " + arg + " " +
                             arg + "; i=$((i+1)); done; : > " + marker;
  agent_->send_json(FrameType::kExec, 9, {{"argv", {"/bin/sh", "-c", script}}, {"detach", true}});
  for (int i = 0; i < 6000 && !std::filesystem::exists(marker); ++i) ::usleep(10000);
  ASSERT_TRUE(std::filesystem::exists(marker)) << "the execs were held back";
  // Every exec (the shell's own and 600 /bin/true) is either reported or counted.
  Reports rep =
      reports([](const Reports& r) { return r.events.size() + r.dropped >= 601; }, 20000ms);
  EXPECT_EQ(rep.events.size() + rep.dropped, 601u);
  EXPECT_GT(rep.dropped, 0u);
  EXPECT_GT(rep.events.size(), 0u);
}

TEST_F(AgentExecAuditTest, RecordsMadeWithoutADaemonComeOnTheNextConnection) {
  agent_->send_json(
      FrameType::kExec, 3,
      {{"argv", {"/bin/sh", "-c", "sleep 0.3; /bin/true while-nobody-listens"}}, {"detach", true}});
  ASSERT_TRUE(agent_->next(3).has_value());  // started
  agent_->channel().reset();                 // the daemon goes away
  ::usleep(800 * 1000);
  ASSERT_TRUE(agent_->connect());
  EXPECT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  Reports rep = reports([](const Reports& r) { return has_argv0(r.events, "/bin/true"); });
  EXPECT_TRUE(has_argv0(rep.events, "/bin/true"));
}

TEST(AgentExecAuditOptions, OnlyForGuestChannels) {
  const char* with_fd[] = {"space-agent", "--channel-fd", "3", "--audit-execs"};
  EXPECT_FALSE(parse_options(4, with_fd));
  const char* valued[] = {"space-agent", "--channel", "/dev/vport0p1", "--audit-execs=1"};
  EXPECT_FALSE(parse_options(4, valued));
  const char* ok[] = {"space-agent", "--channel-listen", "vsock:1024", "--audit-execs"};
  auto o = parse_options(4, ok);
  ASSERT_TRUE(o) << o.error().message();
  EXPECT_TRUE(o->audit_execs);
  // Without the flag: on for the guest's init only.
  const char* plain[] = {"space-agent", "--channel", "/dev/vport0p1"};
  auto p = parse_options(3, plain);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->exec_audit_wanted(1));
  EXPECT_FALSE(p->exec_audit_wanted(4242));
  const char* jail[] = {"space-agent", "--channel-fd", "3"};
  EXPECT_FALSE(parse_options(3, jail)->exec_audit_wanted(1));
}

}  // namespace
}  // namespace space::agent::testing
