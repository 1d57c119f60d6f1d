// The agent listening for its daemon (`--channel-listen`), as the firecracker runtime's guests
// run it on a vsock port. Here the listener is a Unix socket (`unix:PATH`), which takes exactly
// the same path through the agent: every accepted connection becomes the channel and replaces
// the one before (a snapshot restore resets the vsock transport and the daemon connects again;
// a restarted daemon connects while the guest may still hold the old connection).
#include <dirent.h>
#include <linux/vm_sockets.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "agent_client.h"

namespace space::agent::testing {
namespace {

class AgentListenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_AGENT();
    agent_ = std::make_unique<AgentClient>(ListenChannel{tmp_ / "channel.sock"});
    ASSERT_TRUE(agent_->connect());
    ASSERT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  }
  bool agent_alive() { return ::kill(agent_->pid(), 0) == 0; }
  // The agent's open fds, or -1 if /proc does not show them (it is non-dumpable: reading its
  // fd directory needs CAP_SYS_PTRACE).
  int agent_fd_count() {
    std::string dir = "/proc/" + std::to_string(agent_->pid()) + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) return -1;
    int n = 0;
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
    return n;
  }
  // The response's error code and errno, e.g. "invalid_argument/22".
  static std::string error_of(const json& r) {
    if (!r.is_object() || r.value("ok", true)) return "ok or nothing: " + r.dump();
    return r["error"].value("code", "") + "/" + std::to_string(r["error"].value("errno", 0));
  }

  TempDir tmp_;
  std::unique_ptr<AgentClient> agent_;
};

TEST_F(AgentListenTest, ServesRequestsOnAnAcceptedConnection) {
  ExecResult r = agent_->run(1, {{"argv", {"echo", "over the listener"}}});
  EXPECT_EQ(r.out, "over the listener\n");
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
  json st = agent_->request(2, {{"op", "stat"}, {"path", "/"}});
  EXPECT_TRUE(st.value("ok", false)) << st.dump();
}

// What agent_reattach_test checks for the spare socketpair, with a new connection instead.
TEST_F(AgentListenTest, ProcessesOutliveTheConnectionAndTheNextOneTakesOver) {
  std::string marker = tmp_ / "marker";
  agent_->send_json(FrameType::kExec, 1,
                    {{"argv", {"sh", "-c", "sleep 0.3; echo done > " + marker}}});
  // A writer far beyond the window: once the connection is gone its output must be discarded,
  // not left to block it.
  agent_->send_json(FrameType::kExec, 2, {{"argv", {"head", "-c", "20000000", "/dev/zero"}}});
  auto s2 = agent_->next(2);
  ASSERT_TRUE(s2 && s2->type == FrameType::kStarted);
  int writer = json::parse(s2->payload).at("pid").get<int>();
  agent_->channel().reset();  // the daemon "dies", or a snapshot restore reset the transport

  for (int i = 0; i < 300 && !std::filesystem::exists(marker); ++i) ::usleep(10000);
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_TRUE(wait_gone(writer));
  EXPECT_TRUE(agent_alive());

  ASSERT_TRUE(agent_->connect());
  EXPECT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  // Old streams send nothing on the new connection; their ids are free again.
  ExecResult r = agent_->run(1, {{"argv", {"echo", "after"}}});
  EXPECT_EQ(r.out, "after\n");
  EXPECT_EQ(r.exit, json({{"exit_code", 0}}));
  // And again: the listener outlives any number of connections.
  agent_->channel().reset();
  ASSERT_TRUE(agent_->connect());
  EXPECT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  EXPECT_EQ(agent_->run(3, {{"argv", {"true"}}}).exit, json({{"exit_code", 0}}));
}

TEST_F(AgentListenTest, ANewConnectionReplacesTheOpenOne) {
  agent_->send_json(FrameType::kExec, 1, {{"argv", {"sh", "-c", "sleep 0.3; echo late"}}});
  auto started = agent_->next(1);
  ASSERT_TRUE(started && started->type == FrameType::kStarted);
  int pid = json::parse(started->payload).at("pid").get<int>();
  UniqueFd old_channel = std::move(agent_->channel());
  ASSERT_TRUE(agent_->connect());
  EXPECT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  // EOF on the old connection: the agent closed its end (the hello it got before is already
  // consumed by SetUp, so nothing else is in between).
  pollfd p{old_channel.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  char c;
  EXPECT_EQ(::read(old_channel.get(), &c, 1), 0);
  // The exec started on the old connection keeps running, detached: it never reports here.
  EXPECT_EQ(::kill(pid, 0), 0);
  EXPECT_FALSE(agent_->next(1, 600ms).has_value());
  EXPECT_TRUE(wait_gone(pid));
  EXPECT_EQ(agent_->run(2, {{"argv", {"echo", "second"}}}).out, "second\n");
}

TEST_F(AgentListenTest, ReattachPingGreetsAgain) {
  agent_->send(FrameType::kPing, 0, "reattach");
  EXPECT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  auto pong = agent_->next(0);
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->type, FrameType::kPong);
  EXPECT_EQ(pong->payload, "reattach");
  agent_->send(FrameType::kPing, 0, "other");
  pong = agent_->next(0);
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->type, FrameType::kPong);  // no hello for any other ping
  EXPECT_EQ(pong->payload, "other");
}

TEST_F(AgentListenTest, BadFrameHeaderClosesTheConnectionOnly) {
  std::string bad;
  ASSERT_TRUE(proto::encode(FrameType::kPing, 0, "x", bad));
  bad[5] = 1;  // flags
  agent_->send_raw(bad);
  EXPECT_FALSE(agent_->next(0, 2000ms).has_value());
  EXPECT_TRUE(agent_->eof());
  EXPECT_TRUE(agent_alive());
  ASSERT_TRUE(agent_->connect());
  EXPECT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  EXPECT_EQ(agent_->run(1, {{"argv", {"true"}}}).exit, json({{"exit_code", 0}}));
}

// A burst of connections: the newest wins, every other one is closed, and the agent does not
// keep fds for them.
TEST_F(AgentListenTest, AConnectBurstLeavesOneChannelAndNoExtraFds) {
  int fds_before = agent_fd_count();
  std::vector<UniqueFd> conns;
  for (int i = 0; i < 40; ++i) {
    UniqueFd c = agent_->connect_listener();
    ASSERT_TRUE(c);
    conns.push_back(std::move(c));
  }
  // The last one is the newest whatever the agent's passes saw; it gets hello.
  agent_->use_channel(std::move(conns.back()));
  conns.pop_back();
  EXPECT_EQ(agent_->hello().value("pid", 0), agent_->pid());
  // Every other one reaches EOF (after a hello if it was the channel for a while).
  auto deadline = std::chrono::steady_clock::now() + 5s;
  for (auto& c : conns) {
    bool eof = false;
    char buf[4096];
    while (!eof && std::chrono::steady_clock::now() < deadline) {
      pollfd p{c.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) == 1) eof = ::read(c.get(), buf, sizeof buf) <= 0;
    }
    EXPECT_TRUE(eof);
  }
  if (fds_before >= 0) {
    EXPECT_EQ(agent_fd_count(), fds_before);
  }
  EXPECT_EQ(agent_->run(1, {{"argv", {"echo", "newest"}}}).out, "newest\n");
}

// `resync` passes the guest-only guard on a listen channel: a bad hostname is refused by the
// field checks (invalid_argument, EINVAL), not by the guard (permission_denied, EPERM), and
// nothing on the host is changed. (AgentFilesTest.ResyncIsRefusedOutsideAVmGuest checks that
// the same request gets EPERM over --channel-fd.)
TEST_F(AgentListenTest, ResyncIsForGuestChannels) {
  char before[256] = {};
  ASSERT_EQ(::gethostname(before, sizeof before - 1), 0);
  json r = agent_->request(1, {{"op", "resync"},
                               {"hostname", "Bad/Host"},
                               {"time_ns", 1000000000},
                               {"seed", std::string(128, 'a')}});
  EXPECT_EQ(error_of(r), "invalid_argument/" + std::to_string(EINVAL)) << r.dump();
  char after[256] = {};
  ASSERT_EQ(::gethostname(after, sizeof after - 1), 0);
  EXPECT_STREQ(before, after);
  EXPECT_GT(std::time(nullptr), 1700000000) << "the host clock was set";
}

// Runs the agent with `args` and returns its exit status once it exits (-1 if it still runs
// after `timeout`; it is then killed).
int agent_exit_status(std::vector<std::string> args, std::chrono::milliseconds timeout) {
  args.insert(args.begin(), agent_binary());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close_range(3, ~0u, 0);
    int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 2);  // the expected start-up failure is not test output
    ::execve(argv[0], argv.data(), envp);
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ::usleep(5000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

TEST(AgentListenStartTest, ListenFailureFailsStartUp) {
  SKIP_WITHOUT_AGENT();
  TempDir tmp;
  std::string taken = tmp / "taken";
  { std::ofstream(taken) << "x"; }
  EXPECT_EQ(agent_exit_status({"--channel-listen", "unix:" + taken}, 5000ms), 1);
  EXPECT_EQ(agent_exit_status({"--channel-listen", "unix:" + (tmp / "no/such/dir/sock")}, 5000ms),
            1);
  EXPECT_EQ(agent_exit_status({"--channel-listen", "tcp:1"}, 5000ms), 2);  // usage
}

// The vsock form binds VMADDR_CID_ANY:PORT. Nothing on a host can connect to it without the
// vsock_loopback transport, so this only checks that the agent starts listening and waits.
TEST(AgentListenStartTest, VsockListenerStartsWhereVsockExists) {
  SKIP_WITHOUT_AGENT();
  UniqueFd probe(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe) GTEST_SKIP() << "no AF_VSOCK here: " << std::strerror(errno);
  std::random_device rd;
  unsigned port = 20000 + rd() % 40000;
  sockaddr_vm sa{};
  sa.svm_family = AF_VSOCK;
  sa.svm_cid = VMADDR_CID_ANY;
  sa.svm_port = port;
  if (::bind(probe.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0)
    GTEST_SKIP() << "cannot bind a vsock port here: " << std::strerror(errno);
  // The port is taken by the probe: start-up must fail...
  EXPECT_EQ(agent_exit_status({"--channel-listen", "vsock:" + std::to_string(port)}, 5000ms), 1);
  probe.reset();
  // ...and succeed once it is free: the agent then waits for a daemon.
  EXPECT_EQ(agent_exit_status({"--channel-listen", "vsock:" + std::to_string(port)}, 500ms), -1);
}

}  // namespace
}  // namespace space::agent::testing
