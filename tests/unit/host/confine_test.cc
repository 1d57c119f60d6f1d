// The confinement recipe (host/confine.h): a root child confined as space-egress is (a new uid
// and gid, no capability, not dumpable, no_new_privs, a seccomp role) ends up exactly so; a step
// that fails stops the recipe there; the roles compile where space-upper-reader compiles its
// own (RLIMIT_FSIZE 0, a few descriptors), and the reader's allowlist kills what it does not
// list.
#include "host/confine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <functional>
#include <string>

#include "host/seccomp_policy.h"

namespace space::host {
namespace {

// Runs `body` in a forked child; its exit status (or 128 + the signal that killed it).
int in_child(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string status_field(const std::string& name) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0)
      return line.substr(line.find_first_not_of(" \t", name.size() + 1));
  return "";
}

TEST(Confine, AHelperEndsUpAsPlanned) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  int rc = in_child([] {
    auto program = compile_policy(egress_policy(::getpid()));
    auto caps = make_cap_plan(0);
    if (!program || !caps) return 10;
    if (!confine({.become = Identity{54321, 54322},
                  .caps = *caps,
                  .not_dumpable = true,
                  .seccomp = &*program}))
      return 11;
    if (::getuid() != 54321 || ::geteuid() != 54321 || ::getgid() != 54322) return 12;
    if (::getgroups(0, nullptr) != 0) return 13;
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
      if (status_field(set) != "0000000000000000") return 14;
    if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) return 15;
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) return 16;
    if (status_field("Seccomp") != "2") return 17;
    if (::setresuid(0, 0, 0) == 0) return 18;
    // The egress role: no programs, signals to itself only.
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    if (::execve("/bin/true", argv, nullptr) == 0 || errno != EPERM) return 19;
    if (::kill(1, 0) == 0 || errno != EPERM) return 20;
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

TEST(Confine, RefusesRootAndANewIdentityWithoutACapabilityPlan) {
  SeccompProgram program;
  EXPECT_FALSE(confine({.become = Identity{0, 100}, .caps = CapPlan{}, .seccomp = &program}));
  EXPECT_FALSE(confine({.become = Identity{100, 0}, .caps = CapPlan{}, .seccomp = &program}));
  EXPECT_FALSE(confine({.become = Identity{100, 100}, .seccomp = &program}));
  EXPECT_FALSE(confine({}));  // no seccomp program
  EXPECT_EQ(::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), 0) << "nothing was done here";
}

TEST(Confine, AFailingStepStopsTheRecipeThere) {
  int rc = in_child([] {
    auto program = compile_policy(sandbox_policy());
    if (!program) return 10;
    rlimit bad{.rlim_cur = 10, .rlim_max = 5};  // soft above hard: EINVAL
    ConfineFailure f = confine_steps({.nofile = bad, .seccomp = &*program});
    if (f.step != ConfineStep::kNofile || f.err != EINVAL) return 11;
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 0) return 12;
    if (status_field("Seccomp") != "0") return 13;
    auto r = confine({.nofile = bad, .seccomp = &*program});
    if (r || r.error().message().find("RLIMIT_NOFILE") == std::string::npos) return 14;
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

TEST(Confine, RolesCompileUnderTheReadersLimits) {
  int rc = in_child([] {
    const rlimit zero{0, 0}, nofile{8, 8};
    if (::setrlimit(RLIMIT_FSIZE, &zero) != 0 || ::setrlimit(RLIMIT_NOFILE, &nofile) != 0)
      return 10;
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    auto reader = compile_policy(upper_reader_role(3));
    if (!reader || reader->instructions.empty() || !reader->unresolved.empty()) return 11;
    auto sandbox = compile_policy(sandbox_policy());
    if (!sandbox || sandbox->instructions.empty()) return 12;
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

TEST(Confine, TheReadersAllowlistKillsWhatItDoesNotList) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  auto confined = [&](const std::function<void()>& act) {
    return in_child([&] {
      auto program = compile_policy(upper_reader_role(fds[0]));
      if (!program || !confine({.seccomp = &*program})) return 10;
      act();
      return 0;
    });
  };
  char c;
  EXPECT_EQ(confined([&] { (void)::write(fds[1], "x", 1); }), 128 + SIGSYS) << "write to fd 4+";
  EXPECT_EQ(confined([] { (void)::getpid(); }), 128 + SIGSYS) << "getpid is not listed";
  EXPECT_EQ(confined([] { (void)::socket(AF_UNIX, SOCK_STREAM, 0); }), 128 + SIGSYS);
  ASSERT_EQ(::write(fds[1], "y", 1), 1);
  EXPECT_EQ(confined([&] {
              if (::read(fds[0], &c, 1) != 1 || c != 'y') ::_exit(20);
              if (::ioctl(fds[0], FIONREAD, &c) != -1 || errno != ENOTTY) ::_exit(21);
              if (::fsync(fds[0]) != 0) ::_exit(22);  // answered as done
            }),
            0);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace space::host
