// Channel loss and reattach: when the daemon's channel ends (EOF or a bad frame) the agent keeps
// running its processes and waits; the first frame on the spare socketpair makes the spare the
// channel, with a fresh spare at the same fd numbers.
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>

#include "agent_client.h"

namespace space::agent::testing {
namespace {

class AgentReattachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_AGENT();
    agent_ = std::make_unique<AgentClient>();
    ASSERT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  }
  // Pings on the test's copy of the spare's daemon end and switches the client to it.
  void reattach() {
    UniqueFd spare = std::move(agent_->spare());
    agent_->use_channel(std::move(spare));
    agent_->send(FrameType::kPing, 0, "reattach");
    json h = agent_->hello();
    EXPECT_EQ(h.value("pid", 0), agent_->pid());
    auto pong = agent_->next(0);
    ASSERT_TRUE(pong);
    EXPECT_EQ(pong->type, FrameType::kPong);
    EXPECT_EQ(pong->payload, "reattach");
  }
  bool agent_alive() { return ::kill(agent_->pid(), 0) == 0; }
  std::unique_ptr<AgentClient> agent_;
};

TEST_F(AgentReattachTest, ProcessesOutliveTheChannelAndTheSpareTakesOver) {
  TempDir tmp;
  std::string marker = tmp / "marker";
  agent_->send_json(FrameType::kExec, 1,
                    {{"argv", {"sh", "-c", "sleep 0.3; echo done > " + marker}}});
  // A writer far beyond the window: after the channel is gone its output must be discarded,
  // not left to block it.
  agent_->send_json(FrameType::kExec, 2, {{"argv", {"head", "-c", "20000000", "/dev/zero"}}});
  auto s2 = agent_->next(2);
  ASSERT_TRUE(s2 && s2->type == FrameType::kStarted);
  int writer = json::parse(s2->payload).at("pid").get<int>();
  agent_->channel().reset();  // the daemon "dies"

  for (int i = 0; i < 300 && !std::filesystem::exists(marker); ++i) ::usleep(10000);
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_TRUE(wait_gone(writer));
  EXPECT_TRUE(agent_alive());

  reattach();
  // Old streams send nothing on the new channel; their ids are free again.
  ExecResult r = agent_->run(1, {{"argv", {"echo", "after"}}});
  EXPECT_EQ(r.out, "after\n");
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
}

TEST_F(AgentReattachTest, ReattachWhileTheOldChannelIsOpenClosesIt) {
  agent_->send_json(FrameType::kExec, 1, {{"argv", {"sh", "-c", "sleep 0.3; echo late"}}});
  auto started = agent_->next(1);
  ASSERT_TRUE(started && started->type == FrameType::kStarted);
  UniqueFd old_channel = std::move(agent_->channel());
  reattach();
  char c;
  EXPECT_EQ(::read(old_channel.get(), &c, 1), 0);  // EOF: the agent closed its end
  // The exec started on the old channel never reports on the new one.
  EXPECT_FALSE(agent_->next(1, 600ms).has_value());
}

TEST_F(AgentReattachTest, BadFrameHeaderClosesTheChannelOnly) {
  std::string bad;
  ASSERT_TRUE(proto::encode(FrameType::kPing, 0, "x", bad));
  bad[5] = 1;  // flags
  agent_->send_raw(bad);
  EXPECT_FALSE(agent_->next(0, 2000ms).has_value());
  EXPECT_TRUE(agent_->eof());
  EXPECT_TRUE(agent_alive());
  reattach();
  EXPECT_EQ(agent_->run(1, {{"argv", {"true"}}}).exit, json({{"exit_code", 0}}));
}

TEST_F(AgentReattachTest, RepeatedReattachThroughPidfdGetfd) {
  reattach();
  // The new spare's daemon end is at fd 5 again; take it the way a restarted daemon does.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, agent_->pid(), 0));
  ASSERT_GE(pidfd, 0);
  UniqueFd pf(pidfd);
  int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pf.get(), 5, 0));
  if (fd < 0 && errno == EPERM) GTEST_SKIP() << "pidfd_getfd needs ptrace rights over the agent";
  ASSERT_GE(fd, 0) << std::strerror(errno);
  agent_->spare().reset(fd);
  reattach();
  EXPECT_EQ(agent_->run(1, {{"argv", {"echo", "third channel"}}}).out, "third channel\n");
}

}  // namespace
}  // namespace space::agent::testing
