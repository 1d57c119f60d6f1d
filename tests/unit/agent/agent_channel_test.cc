// The agent over a character device (`--channel PATH`), as the microVM runtimes start it. A
// pty stands in for the virtio-serial port; being a tty, the agent must switch it to raw mode
// or the line discipline would mangle frames (CR/LF translation, echo, ^C, ^D).
#include <fcntl.h>
#include <stdlib.h>
#include <termios.h>
#include <unistd.h>

#include "agent_client.h"

namespace space::agent::testing {
namespace {

TEST(AgentChannelTest, SpeaksFramesOverATtyDevice) {
  SKIP_WITHOUT_AGENT();
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) GTEST_SKIP() << "no pty available: " << std::strerror(errno);
  UniqueFd m(master);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  std::string slave = ::ptsname(master);
  AgentClient agent(slave, std::move(m));
  json h = agent.hello();
  EXPECT_EQ(h.value("pid", 0), agent.pid());
  // Bytes a cooked tty would eat or rewrite: CR, LF, ^C, ^D, ^Z, ^S, DEL, NUL.
  std::string tricky = "a\r\nb\x03\x04\x1a\x13\x7f";
  tricky.push_back('\0');
  agent.send(FrameType::kPing, 1, tricky);
  auto pong = agent.next(1);
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->type, FrameType::kPong);
  EXPECT_TRUE(pong->payload == tricky);
  ExecResult r = agent.run(2, {{"argv", {"printf", "x\\ny\\r\\n"}}});
  EXPECT_EQ(r.out, "x\ny\r\n");
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
}

}  // namespace
}  // namespace space::agent::testing
