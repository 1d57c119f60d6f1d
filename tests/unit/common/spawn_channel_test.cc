// spawn_with_channel (common/subprocess.h) with real programs: the helper talks on fd 3 (also
// when the socket pair lands on fd 3 itself, where dup2(3, 3) would leave close-on-exec set),
// has nothing else of ours open, gets the environment asked for, its own process group when
// asked, and is killed and reaped when its ChildProcess goes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "common/subprocess.h"

namespace space {
namespace {

// Everything the helper writes on its end until it closes it (5 s at most).
std::string read_all(int fd) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<SpawnedHelper> sh(const std::string& script, const ChannelOptions& o = {}) {
  return spawn_with_channel("/bin/sh", {"sh", "-c", script}, o);
}

TEST(SpawnWithChannel, TalksOnFd3AndHasNothingElseOpen) {
  // Fds of ours without close-on-exec, low and high, must not reach the helper.
  UniqueFd leaky(::open("/dev/null", O_RDONLY));
  ASSERT_TRUE(leaky.valid());
  UniqueFd high(::fcntl(leaky.get(), F_DUPFD, 100));
  ASSERT_TRUE(high.valid());
  auto h = sh("read line <&3; echo \"$line\" >&3; exec ls /proc/self/fd >&3");
  ASSERT_TRUE(h) << h.error().message();
  ASSERT_EQ(::write(h->channel.get(), "ping\n", 5), 5);
  std::istringstream in(read_all(h->channel.get()));
  std::string echoed;
  std::set<std::string> fds;
  in >> echoed;
  for (std::string fd; in >> fd;) fds.insert(fd);
  EXPECT_EQ(echoed, "ping");
  // 0-2, the channel, and 4: the directory ls is reading.
  EXPECT_EQ(fds, (std::set<std::string>{"0", "1", "2", "3", "4"}));
  int status = h->child.kill_and_wait(0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_wait_status(status);
  EXPECT_EQ(h->child.pid(), -1);
}

TEST(SpawnWithChannel, ChannelLandingOnFd3) {
  // With fd 0 closed and 3 free the socket pair is (0, 3): the helper's end is 3 already.
  int saved = ::fcntl(0, F_DUPFD_CLOEXEC, 10);
  ASSERT_GE(saved, 0);
  bool three_free = ::fcntl(3, F_GETFD) < 0;
  ::close(0);
  auto h = sh("echo on3 >&3", {.type = ChannelType::kSeqPacket});
  bool ours_on_0 = h && h->channel.get() == 0;
  if (ours_on_0) h->channel.reset(::fcntl(0, F_DUPFD_CLOEXEC, 10));  // (closes 0)
  ::dup2(saved, 0);
  ::close(saved);
  ASSERT_TRUE(h) << h.error().message();
  if (three_free) {
    EXPECT_TRUE(ours_on_0);  // so the other end was 3
  }
  char buf[64] = {};
  pollfd p{h->channel.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  ssize_t n = ::recv(h->channel.get(), buf, sizeof buf, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "on3\n");
  int status = h->child.kill_and_wait(0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_wait_status(status);
}

TEST(SpawnWithChannel, Environment) {
  ::setenv("SPACE_SPAWN_TEST_SECRET", "hush", 1);
  auto plain = sh("env | sort >&3");
  ASSERT_TRUE(plain) << plain.error().message();
  std::string env = read_all(plain->channel.get());
  EXPECT_EQ(env.find("SPACE_SPAWN_TEST_SECRET"), std::string::npos) << env;
  EXPECT_NE(env.find("LC_ALL=C\n"), std::string::npos) << env;
  auto given = sh("env >&3", {.env = std::vector<std::string>{"ONLY=this"}});
  ASSERT_TRUE(given);
  EXPECT_NE(read_all(given->channel.get()).find("ONLY=this"), std::string::npos);
  auto inherited = sh("env >&3", {.inherit_env = true});
  ASSERT_TRUE(inherited);
  EXPECT_NE(read_all(inherited->channel.get()).find("SPACE_SPAWN_TEST_SECRET=hush"),
            std::string::npos);
  ::unsetenv("SPACE_SPAWN_TEST_SECRET");
}

TEST(SpawnWithChannel, StdinAndProcessGroup) {
  auto h = sh("head -c 1 >&3; echo \"|$(cut -d' ' -f5 /proc/$$/stat)\" >&3",
              {.own_process_group = true});
  ASSERT_TRUE(h) << h.error().message();
  std::string out = read_all(h->channel.get());
  // stdin is /dev/null: head reads nothing; the group is the helper's own.
  EXPECT_EQ(out, "|" + std::to_string(h->child.pid()) + "\n");
  auto same = sh("cut -d' ' -f5 /proc/$$/stat >&3");
  ASSERT_TRUE(same);
  EXPECT_EQ(read_all(same->channel.get()), std::to_string(::getpgrp()) + "\n");
}

TEST(SpawnWithChannel, KilledAndReapedWithItsGuard) {
  pid_t pid;
  {
    auto h = sh("exec sleep 100");
    ASSERT_TRUE(h) << h.error().message();
    pid = h->child.pid();
    ASSERT_GT(pid, 0);
  }
  // Reaped: no longer our child (waitpid says so), so not a zombie either.
  int st;
  EXPECT_EQ(::waitpid(pid, &st, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(SpawnWithChannel, MissingProgram) {
  auto h = spawn_with_channel("/nonexistent/helper", {"helper"});
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message().find("/nonexistent/helper"), std::string::npos);
  EXPECT_FALSE(spawn_with_channel("/bin/sh", {}));
}

}  // namespace
}  // namespace space
