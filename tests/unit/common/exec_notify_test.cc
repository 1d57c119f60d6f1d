// Exec notification (common/exec_notify.h), the code the linux runtime's supervisor and the
// microVM agent share, through the real kernel: a child installs the notify-only filter, a
// grandchild execs under it, and the child serves the notification the way both holders do
// (receive, describe, continue). The exec must then run normally; non-exec syscalls must not
// notify at all.
#include "common/exec_notify.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace space {
namespace {

using nlohmann::json;

struct Served {
  bool installed = false;
  std::vector<json> events;  // one per notification served
  int status = -1;           // the grandchild's wait status
};

// Forks a child that installs the filter (no_new_privs: no privilege needed) and forks a
// grandchild running `body`; the child serves up to `max` notifications with `view` and
// reports the events and the grandchild's status through a pipe.
// `wait_ms` bounds the wait for each notification.
Served serve_under_filter(const std::function<void()>& body, ExecView view, int max = 1,
                          int wait_ms = 3000) {
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(p[0]);
    std::string out;
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    auto listener = install_exec_notify_filter();
    if (!listener) {
      out = json{{"installed", false}, {"error", listener.error().message()}}.dump();
      (void)!::write(p[1], out.data(), out.size());
      _exit(0);
    }
    pid_t g = ::fork();
    if (g == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      body();
      _exit(0);
    }
    json events = json::array();
    for (int i = 0; i < max; ++i) {
      pollfd pf{listener->get(), POLLIN, 0};
      if (::poll(&pf, 1, wait_ms) <= 0 || !(pf.revents & POLLIN)) break;
      auto n = receive_exec(listener->get(), view);
      if (!n || !*n) continue;
      events.push_back((*n)->event);
      if (!(*n)->caller_gone) (void)continue_exec(listener->get(), (*n)->id);
    }
    int status = -1;
    ::waitpid(g, &status, 0);
    out = json{{"installed", true}, {"events", events}, {"status", status}, {"g", g}}.dump();
    (void)!::write(p[1], out.data(), out.size());
    _exit(0);
  }
  ::close(p[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  ::waitpid(child, nullptr, 0);
  Served s;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return s;
  s.installed = j.value("installed", false);
  if (!s.installed) return s;
  for (auto& e : j["events"]) s.events.push_back(e);
  s.status = j.value("status", -1);
  // The grandchild's pid, for the checks below.
  s.events.push_back(json{{"grandchild", j.value("g", 0)}, {"child", child}});
  return s;
}

#define SKIP_UNLESS_INSTALLED(s) \
  if (!(s).installed) GTEST_SKIP() << "no seccomp user notification here"

TEST(ExecNotify, DescribesAnExecAndLetsItRun) {
  char arg0[] = "echo", arg1[] = "hello", arg2[] = "two words";
  Served s = serve_under_filter(
      [&] {
        char* argv[] = {arg0, arg1, arg2, nullptr};
        char* envp[] = {nullptr};
        ::execve("/bin/echo", argv, envp);
        _exit(127);
      },
      ExecView{.host = false});
  SKIP_UNLESS_INSTALLED(s);
  ASSERT_EQ(s.events.size(), 2u);  // the exec, and the pids
  const json& ev = s.events[0];
  const json& ids = s.events[1];
  EXPECT_EQ(ev["syscall"], "execve");
  EXPECT_EQ(ev["path"], "/bin/echo");
  EXPECT_EQ(ev["resolved"], "/bin/echo");
  EXPECT_EQ(ev["argv"], json({"echo", "hello", "two words"}));
  EXPECT_EQ(ev["pid"], ids["grandchild"]);
  EXPECT_EQ(ev["ppid"], ids["child"]);
  EXPECT_EQ(ev["uid"], static_cast<int64_t>(::getuid()));
  EXPECT_FALSE(ev.contains("host_pid"));  // the guest's view: its own pids only
  EXPECT_FALSE(ev.contains("argv_truncated"));
  EXPECT_FALSE(ev.contains("caller_gone"));
  // It ran: echo exited 0 (a refused or failed exec would be 127).
  EXPECT_TRUE(WIFEXITED(s.status) && WEXITSTATUS(s.status) == 0) << s.status;
}

TEST(ExecNotify, HostViewShiftsUidsAndNamesTheHostPid) {
  Served s = serve_under_filter(
      [] {
        char a0[] = "true";
        char* argv[] = {a0, nullptr};
        char* envp[] = {nullptr};
        ::execve("/bin/true", argv, envp);
        _exit(127);
      },
      ExecView{.host = true, .uid_base = 0});
  SKIP_UNLESS_INSTALLED(s);
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0]["host_pid"], s.events[1]["grandchild"]);
  EXPECT_EQ(s.events[0]["pid"], s.events[1]["grandchild"]);  // no pid namespace here
}

TEST(ExecNotify, ArgvByteBudgetCutsAndSaysSo) {
  Served s = serve_under_filter(
      [] {
        char a0[] = "echo", a1[] = "hello", a2[] = "world";
        char* argv[] = {a0, a1, a2, nullptr};
        char* envp[] = {nullptr};
        ::execve("/bin/echo", argv, envp);
        _exit(127);
      },
      ExecView{.host = false, .max_argv_bytes = 8});
  SKIP_UNLESS_INSTALLED(s);
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0]["argv"], json({"echo", "hell"}));
  EXPECT_EQ(s.events[0]["argv_truncated"], true);
}

TEST(ExecNotify, FdExecIsResolvedThroughTheFd) {
  Served s = serve_under_filter(
      [] {
        int fd = ::open("/bin/true", O_RDONLY);
        char a0[] = "payload";
        char* argv[] = {a0, nullptr};
        char* envp[] = {nullptr};
        char empty[] = "";
        ::syscall(SYS_execveat, fd, empty, argv, envp, AT_EMPTY_PATH);
        _exit(127);
      },
      ExecView{.host = false});
  SKIP_UNLESS_INSTALLED(s);
  ASSERT_EQ(s.events.size(), 2u);
  const json& ev = s.events[0];
  EXPECT_EQ(ev["syscall"], "execveat");
  EXPECT_EQ(ev["path"], "");
  EXPECT_EQ(ev["at_empty_path"], true);
  EXPECT_TRUE(ev.contains("fd"));
  char real[4096];
  ASSERT_NE(::realpath("/bin/true", real), nullptr);
  EXPECT_EQ(ev["resolved"], real);
  EXPECT_EQ(ev["argv"], json({"payload"}));
  EXPECT_TRUE(WIFEXITED(s.status) && WEXITSTATUS(s.status) == 0) << s.status;
}

TEST(ExecNotify, OtherSyscallsAreNotNotified) {
  // The grandchild makes plenty of syscalls and exits without an exec: nothing to serve.
  Served s = serve_under_filter(
      [] {
        for (int i = 0; i < 100; ++i) (void)::getppid();
        int fd = ::open("/dev/null", O_RDONLY);
        ::close(fd);
        _exit(3);
      },
      ExecView{.host = false}, 1, 300);
  SKIP_UNLESS_INSTALLED(s);
  ASSERT_EQ(s.events.size(), 1u);  // only the pids
  EXPECT_TRUE(WIFEXITED(s.status) && WEXITSTATUS(s.status) == 3) << s.status;
}

TEST(ExecNotify, ProgramEndsInAllowThenNotify) {
  auto p = exec_notify_program();
  ASSERT_GE(p.size(), 4u);
  EXPECT_EQ(p.back().k, static_cast<uint32_t>(SECCOMP_RET_USER_NOTIF));
  EXPECT_EQ(p[p.size() - 2].k, static_cast<uint32_t>(SECCOMP_RET_ALLOW));
  // Every jump stays inside the program.
  for (size_t i = 0; i < p.size(); ++i)
    if (BPF_CLASS(p[i].code) == BPF_JMP) {
      EXPECT_LT(i + 1 + p[i].jt, p.size());
      EXPECT_LT(i + 1 + p[i].jf, p.size());
    }
}

TEST(ExecNotify, KnowsTheNativeAbi) {
  auto a = exec_abi(
#if defined(__x86_64__)
      AUDIT_ARCH_X86_64,
#else
      AUDIT_ARCH_AARCH64,
#endif
      __NR_execveat);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->at);
  EXPECT_EQ(a->ptr_size, 8u);
  EXPECT_FALSE(exec_abi(0x1234, __NR_execve));
}

}  // namespace
}  // namespace space
