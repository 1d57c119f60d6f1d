// The seccomp policy: the table covers what the design requires, compiles, and the compiled
// program behaves as the table says (checked by running syscalls under it in a child process).
#include "host/seccomp.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "host/seccomp_policy.h"

namespace space::host {
namespace {

TEST(SeccompPolicy, CoversTheRequiredSyscalls) {
  std::set<std::string> names;
  for (const auto& r : sandbox_policy()) {
    names.insert(std::string(r.syscall));
    EXPECT_FALSE(r.reason.empty()) << r.syscall << " needs a reason";
    EXPECT_GT(r.errno_value, 0) << r.syscall;
  }
  for (const char* s : {"mount",
                        "umount2",
                        "pivot_root",
                        "chroot",
                        "swapon",
                        "swapoff",
                        "reboot",
                        "kexec_load",
                        "kexec_file_load",
                        "init_module",
                        "finit_module",
                        "delete_module",
                        "bpf",
                        "perf_event_open",
                        "userfaultfd",
                        "io_uring_setup",
                        "io_uring_enter",
                        "io_uring_register",
                        "keyctl",
                        "add_key",
                        "request_key",
                        "setns",
                        "unshare",
                        "clone",
                        "clone3",
                        "open_by_handle_at",
                        "name_to_handle_at",
                        "fsopen",
                        "fsconfig",
                        "fsmount",
                        "fspick",
                        "move_mount",
                        "open_tree",
                        "mount_setattr",
                        "lookup_dcookie",
                        "quotactl",
                        "quotactl_fd",
                        "acct",
                        "syslog",
                        "settimeofday",
                        "clock_settime",
                        "clock_adjtime",
                        "adjtimex",
                        "iopl",
                        "ioperm",
                        "vhangup",
                        "nfsservctl",
                        "uselib",
                        "mbind",
                        "migrate_pages",
                        "move_pages",
                        "set_mempolicy_home_node",
                        "personality",
                        "ioctl",
                        "socket"}) {
    EXPECT_TRUE(names.count(s)) << s << " is missing from the policy";
  }
  auto table = policy_table();
  EXPECT_EQ(table.size(), sandbox_policy().size() + 1);
  EXPECT_EQ(table.back()["action"], "kill process");
}

TEST(SeccompPolicy, Compiles) {
  auto prog = compile_policy(sandbox_policy());
  ASSERT_TRUE(prog) << prog.error().message();
  EXPECT_GT(prog->instructions.size(), 50u);
  EXPECT_TRUE(prog->unresolved.empty()) << "x86_64 knows every row";
}

// Runs `body` in a forked child under the compiled policy; returns its exit status (the body
// returns the number of mismatches, written to stderr).
int run_filtered(const std::function<int()>& body,
                 const std::vector<PolicyRule>& policy = sandbox_policy()) {
  auto prog = compile_policy(policy);
  if (!prog) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(100);
    if (install_seccomp(*prog) != 0) ::_exit(101);
    ::_exit(std::min(body(), 99));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

long errno_of(long rc) { return rc < 0 ? errno : 0; }

// The gateway process's role: what an exploited parser inside space-egress would try next.
TEST(SeccompPolicy, EgressRoleRefusesProgramsPeersAndRawSockets) {
  auto prog = compile_policy(egress_policy(::getpid()));
  ASSERT_TRUE(prog) << prog.error().message();
  EXPECT_TRUE(prog->unresolved.empty());
  int rc = run_filtered(
      [] {
        int bad = 0;
        char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
        if (!(::execve("/bin/true", argv, nullptr) < 0 && errno == EPERM)) ++bad;
        if (!(::syscall(SYS_execveat, AT_FDCWD, "/bin/true", argv, nullptr, 0) < 0 &&
              errno == EPERM))
          ++bad;
        if (!(::syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, ::getppid(), 0, 0) < 0 &&
              errno == EPERM))
          ++bad;
        if (!(::syscall(SYS_process_vm_readv, ::getppid(), nullptr, 0, nullptr, 0, 0) < 0 &&
              errno == EPERM))
          ++bad;
        if (!(::socket(AF_PACKET, SOCK_RAW, 0) < 0 && errno == EAFNOSUPPORT)) ++bad;
        if (!(::unshare(CLONE_NEWUSER) < 0 && errno == EPERM)) ++bad;
        // What it needs still works: IP and Unix sockets.
        int s4 = ::socket(AF_INET, SOCK_STREAM, 0), su = ::socket(AF_UNIX, SOCK_STREAM, 0);
        if (s4 < 0 || su < 0) ++bad;
        return bad;
      },
      egress_policy(0));  // (the forked child's pid is not known yet; no signal is tried here)
  EXPECT_EQ(rc, 0);
}

std::atomic<int> g_own_signals{0};

// The gateway processes of a spaced share a uid: one taken over tries to end another (here a
// sibling process) with every signalling call there is. Each is refused; signals to itself and
// its own threads (raise, pthread_kill) still arrive.
TEST(SeccompPolicy, EgressRoleSignalsOnlyItself) {
  pid_t victim = ::fork();
  if (victim == 0) {
    for (;;) ::pause();
  }
  ASSERT_GT(victim, 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    auto prog = compile_policy(egress_policy(::getpid()));
    if (!prog) ::_exit(102);
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(100);
    if (install_seccomp(*prog) != 0) ::_exit(101);
    int bad = 0;
    auto refused = [&](const char* what, long rc) {
      if (!(rc < 0 && errno == EPERM)) {
        std::fprintf(stderr, "%s: rc %ld errno %d, want EPERM\n", what, rc, errno);
        ++bad;
      }
    };
    siginfo_t info{};
    info.si_code = SI_QUEUE;
    info.si_pid = ::getpid();
    refused("kill(sibling, KILL)", ::kill(victim, SIGKILL));
    refused("kill(sibling, 0)", ::kill(victim, 0));
    refused("tkill", ::syscall(SYS_tkill, victim, SIGKILL));
    refused("tgkill", ::syscall(SYS_tgkill, victim, victim, SIGKILL));
    refused("rt_sigqueueinfo", ::syscall(SYS_rt_sigqueueinfo, victim, SIGKILL, &info));
    refused("rt_tgsigqueueinfo", ::syscall(SYS_rt_tgsigqueueinfo, victim, victim, SIGKILL, &info));
    refused("pidfd_open", ::syscall(434 /* pidfd_open */, victim, 0));
    refused("pidfd_send_signal", ::syscall(424 /* pidfd_send_signal */, 0, SIGKILL, nullptr, 0));
    // Its own signals still work: raise() is tgkill(self, self), pthread_kill a thread's.
    struct sigaction sa {};
    sa.sa_handler = [](int) { ++g_own_signals; };
    ::sigaction(SIGUSR1, &sa, nullptr);
    if (::raise(SIGUSR1) != 0) ++bad;
    std::atomic<bool> done{false};
    std::thread t([&] {
      while (!done) ::usleep(1000);
    });
    if (::pthread_kill(t.native_handle(), SIGUSR1) != 0) ++bad;
    ::usleep(20000);
    done = true;
    t.join();
    if (g_own_signals != 2) {
      std::fprintf(stderr, "own signals delivered: %d, want 2\n", g_own_signals.load());
      ++bad;
    }
    ::_exit(std::min(bad, 99));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(::kill(victim, 0), 0) << "the sibling is gone";
  ::kill(victim, SIGKILL);
  ::waitpid(victim, nullptr, 0);
}

TEST(SeccompPolicy, PersonalityAllowList) {
  int bad = run_filtered([] {
    int mismatches = 0;
    auto expect = [&](uint64_t v, long want) {
      long got = errno_of(::syscall(SYS_personality, v));
      if (got != want) {
        std::fprintf(stderr, "personality(%#llx): errno %ld, want %ld\n",
                     static_cast<unsigned long long>(v), got, want);
        ++mismatches;
      }
      ::syscall(SYS_personality, 0);  // back to PER_LINUX
    };
    const std::set<uint64_t> allowed = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};
    for (uint64_t v : allowed) expect(v, 0);
    for (uint64_t v : {0x1ull, 0x7ull, 0x9ull, 0x40000ull /* ADDR_NO_RANDOMIZE */,
                       0x400000ull /* READ_IMPLIES_EXEC */, 0x100000ull /* MMAP_PAGE_ZERO */,
                       0x20009ull, 0x28ull, 0xfffffff7ull, 0xfffdffffull, 0xfffdfff7ull,
                       0xfffffffeull, 0x80000000ull, 0x100000000ull}) {
      expect(v, EPERM);
    }
    std::mt19937_64 rng(42);
    for (int i = 0; i < 20000; ++i) {
      uint64_t v = rng() & 0xffffffff;
      if (i % 4 == 0) v |= 0xfffd0000;  // near the all-ones corner
      if (i % 4 == 1) v &= 0x3002f;     // near the allowed bits
      expect(v, allowed.count(v) ? 0 : EPERM);
    }
    return mismatches;
  });
  EXPECT_EQ(bad, 0);
}

TEST(SeccompPolicy, NamespaceFlagsOfClone) {
  int bad = run_filtered([] {
    int mismatches = 0;
    for (unsigned long flag : {CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                               CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET}) {
      long rc = ::syscall(SYS_clone, flag | SIGCHLD, 0, 0, 0, 0);
      if (rc == 0) ::_exit(0);
      if (rc > 0) ::waitpid(static_cast<pid_t>(rc), nullptr, 0);
      if (errno_of(rc) != EPERM) ++mismatches;
    }
    long rc = ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (rc == 0) ::_exit(0);
    if (rc < 0) ++mismatches;
    if (rc > 0) ::waitpid(static_cast<pid_t>(rc), nullptr, 0);
    if (errno_of(::syscall(SYS_clone3, nullptr, 0)) != ENOSYS) ++mismatches;
    if (errno_of(::syscall(SYS_unshare, CLONE_NEWUSER)) != EPERM) ++mismatches;
    if (errno_of(::syscall(SYS_getpid)) != 0) ++mismatches;
    return mismatches;
  });
  EXPECT_EQ(bad, 0);
}

TEST(SeccompPolicy, ForeignArchitecturesAreKilled) {
  // An x32 syscall number on x86_64: the filter must kill before the kernel looks it up.
  int status = run_filtered([] {
    ::syscall(0x40000000 | SYS_getpid);
    return 0;
  });
  EXPECT_EQ(status, 200 + SIGSYS);
}

}  // namespace
}  // namespace space::host
