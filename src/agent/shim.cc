// The exec shim and its worker; see shim.h.
//
// Process layout for one exec:
//   agent ── shim (setsid, subreaper, non-dumpable like the agent) ── worker (own pgid) ── ...
// The shim is a plain fork of the single-threaded agent, so it may allocate; the worker is
// created with vfork and runs only async-signal-safe calls until execve, reporting a failing
// {step, errno} through memory shared with the suspended shim.
#include "agent/shim.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "agent/proc_table.h"

namespace space::agent {
namespace {

struct WorkerFailure {
  int32_t step = 0;
  int32_t err = 0;
};

// Everything the worker touches, prepared before vfork so the worker allocates nothing.
struct WorkerPlan {
  std::vector<std::string> candidates;
  std::vector<const char*> candidate_ptrs;
  std::vector<char*> argv;
  std::vector<char*> envp;
  const char* cwd = "/";
  uint32_t uid = 0;
  uint32_t gid = 0;
  int stdin_fd = -1;  // -1: /dev/null
  int stdout_fd = -1;
  int stderr_fd = -1;
  int null_fd = -1;
  int status_fd = -1;
  bool tty = false;  // stdin_fd (= stdout_fd = stderr_fd) is a terminal to make controlling
};

// Signals the shim ignores, so that a sandbox process's `kill -TERM -1` does not orphan the
// tree from its shim (SIGPIPE is ignored by the agent already). Reset in the worker.
constexpr int kShimIgnored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM};

void write_record(int fd, ShimRecord r) {
  while (::write(fd, &r, sizeof(r)) < 0 && errno == EINTR) {
  }
}

// Runs in the vfork child: async-signal-safe calls only, then execve or _exit.
[[noreturn]] void worker_main(const WorkerPlan& p, volatile WorkerFailure* f) {
  auto die = [f](WorkerStep step, int err) {
    f->step = static_cast<int32_t>(step);
    f->err = err;
    _exit(127);
  };
  if (p.tty) {
    // Its own session (and process group), so the terminal can become its controlling tty.
    if (::setsid() < 0) die(WorkerStep::kTty, errno);
  } else if (::setpgid(0, 0) < 0) {
    die(WorkerStep::kSetpgid, errno);
  }
  const int src[3] = {p.stdin_fd >= 0 ? p.stdin_fd : p.null_fd,
                      p.stdout_fd >= 0 ? p.stdout_fd : p.null_fd,
                      p.stderr_fd >= 0 ? p.stderr_fd : p.null_fd};
  for (int i = 0; i < 3; ++i) {
    // All sources are > 2 (the agent keeps 0..2 open), so no dup2 clobbers a later source.
    if (::dup2(src[i], i) < 0) die(WorkerStep::kStdio, errno);
  }
  if (p.tty && ::ioctl(0, TIOCSCTTY, 0) < 0) die(WorkerStep::kTty, errno);
  // Raw syscalls: glibc's set*id wrappers coordinate threads, which is not for a vfork child.
  if (p.uid != 0 || p.gid != 0) {
    gid_t groups[1] = {p.gid};
    if (::syscall(SYS_setgroups, 1, groups) < 0) die(WorkerStep::kSetgroups, errno);
  }
  if (p.gid != 0 && ::syscall(SYS_setresgid, p.gid, p.gid, p.gid) < 0)
    die(WorkerStep::kSetgid, errno);
  if (p.uid != 0 && ::syscall(SYS_setresuid, p.uid, p.uid, p.uid) < 0)
    die(WorkerStep::kSetuid, errno);
  // After the id switch, so the user needs search permission on cwd like any login would.
  if (::chdir(p.cwd) < 0) die(WorkerStep::kChdir, errno);
  ::umask(022);
  // Every disposition back to default: SIG_IGN survives exec, and an ignored signal inherited
  // from whoever started us (glibc's internal 32/33 included, which signal() refuses to touch)
  // must not reach the user's program. The raw syscall takes every number.
  for (int sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct {
      void* handler;
      unsigned long flags;
      void* restorer;
      uint64_t mask;
    } dfl{reinterpret_cast<void*>(SIG_DFL), 0, nullptr, 0};
    (void)::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(uint64_t));
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ShimRecord forked{ShimRecord::kForked, static_cast<int32_t>(::getpid()), 0};
  (void)!::write(p.status_fd, &forked, sizeof(forked));  // CLOEXEC: gone once execve succeeds
  // execvp's search rules: keep going past ENOENT-like errors, remember EACCES.
  int err = ENOENT;
  bool saw_eacces = false;
  for (const char* c : p.candidate_ptrs) {
    // A PATH entry that does not hold the file is skipped without an execve: each execve is a
    // round trip to spaced's exec auditor (seccomp user notification), and `true` would
    // otherwise cost one per PATH directory before /usr/bin. Anything else (EACCES, a file
    // that vanishes in between) is left to execve, so the errors stay execvp's.
    if (p.candidate_ptrs.size() > 1 && ::access(c, F_OK) < 0 &&
        (errno == ENOENT || errno == ENOTDIR))
      continue;
    ::execve(c, p.argv.data(), p.envp.data());
    err = errno;
    if (err == EACCES) {
      saw_eacces = true;
      continue;
    }
    if (err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV || err == ETIMEDOUT)
      continue;
    break;
  }
  if (saw_eacces &&
      (err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV || err == ETIMEDOUT))
    err = EACCES;
  die(WorkerStep::kExec, err);
  _exit(127);  // not reached
}

class Shim {
 public:
  Shim(int status_fd, int control_fd) : status_(status_fd), control_(control_fd) {}

  [[noreturn]] void run(WorkerPlan& plan) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigfd_ = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    volatile WorkerFailure failure;
    if (plan.null_fd < 0 && (plan.stdin_fd < 0 || plan.stdout_fd < 0 || plan.stderr_fd < 0)) {
      plan.null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      if (plan.null_fd < 0) {
        write_record(status_,
                     {ShimRecord::kFailed, static_cast<int32_t>(WorkerStep::kDevNull), errno});
        _exit(0);
      }
    }
    pid_t pid = ::vfork();
    if (pid == 0) worker_main(plan, &failure);
    int fork_err = errno;
    for (int fd : {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd, plan.null_fd})
      if (fd >= 0) ::close(fd);  // a terminal's one fd: closed once, the others EBADF
    if (pid < 0) {
      write_record(status_,
                   {ShimRecord::kFailed, static_cast<int32_t>(WorkerStep::kNone), fork_err});
      _exit(0);
    }
    worker_ = pid;
    if (failure.step != 0)
      write_record(status_, {ShimRecord::kFailed, failure.step, failure.err});
    else
      write_record(status_, {ShimRecord::kStarted, pid, 0});
    loop();
  }

 private:
  [[noreturn]] void loop() {
    while (true) {
      reap();
      pollfd p[2] = {{control_, POLLIN, 0}, {sigfd_, POLLIN, 0}};
      int n = ::poll(p, sigfd_ >= 0 ? 2 : 1, sigfd_ >= 0 ? -1 : 50);
      if (n < 0 && errno != EINTR) _exit(1);
      if (sigfd_ >= 0 && (p[1].revents & POLLIN)) {
        signalfd_siginfo si[8];
        while (::read(sigfd_, si, sizeof(si)) > 0) {
        }
      }
      if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) read_control();
    }
  }

  void read_control() {
    int32_t sigs[16];
    ssize_t n = ::read(control_, sigs, sizeof(sigs));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) return;
      n = 0;
    }
    if (n == 0) {
      // The agent is gone: nobody can collect this tree's output or status any more.
      kill_tree(SIGKILL);
      _exit(0);
    }
    for (ssize_t i = 0; i + 4 <= n; i += 4) {
      int sig = sigs[i / 4];
      if (sig >= 0 && sig <= 64) kill_tree(sig);
    }
  }

  // Reaps every exited child; reports the worker's status; exits once no child is left.
  void reap() {
    while (true) {
      int st = 0;
      pid_t pid = ::waitpid(-1, &st, WNOHANG);
      if (pid > 0) {
        if (pid == worker_) {
          worker_reaped_ = true;
          write_record(status_, {ShimRecord::kExited, st, 0});
        }
        continue;
      }
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0 && errno == ECHILD) _exit(0);
      return;
    }
  }

  void kill_tree(int sig) {
    // The worker's pid is a valid group id while it is unreaped (our child, so not reused).
    if (!worker_reaped_) ::kill(-worker_, sig);
    for (pid_t p : descendants(scan_procs(), ::getpid())) ::kill(p, sig);
    if (sig != SIGKILL) return;
    // Killed processes may have forked meanwhile; their children come to us (subreaper).
    // Repeat until nothing is left; bounded so a process stuck in D state cannot hang us.
    for (int round = 0; round < 2000; ++round) {
      reap();  // exits when no child is left
      timespec ts{0, 1'000'000};
      ::nanosleep(&ts, nullptr);
      if (round % 5 == 4)
        for (pid_t p : descendants(scan_procs(), ::getpid())) ::kill(p, SIGKILL);
    }
  }

  int status_;
  int control_;
  int sigfd_ = -1;
  pid_t worker_ = -1;
  bool worker_reaped_ = false;
};

// Closes every fd of the (forked) shim except `keep`: the agent's channel, the other execs'
// pipes and the root fd must not stay open in a process that lives on inside the sandbox.
void close_all_except(std::vector<int> keep) {
  keep.push_back(0);
  keep.push_back(1);
  keep.push_back(2);
  std::sort(keep.begin(), keep.end());
  unsigned next = 0;
  for (int fd : keep) {
    if (fd < 0) continue;
    if (static_cast<unsigned>(fd) > next) ::close_range(next, static_cast<unsigned>(fd) - 1, 0);
    next = static_cast<unsigned>(fd) + 1;
  }
  ::close_range(next, ~0u, 0);
}

Result<void> make_pipe(UniqueFd& r, UniqueFd& w) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return fail_sys("pipe2");
  r.reset(p[0]);
  w.reset(p[1]);
  return {};
}

Result<void> set_nonblocking(const UniqueFd& fd) {
  int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl | O_NONBLOCK) < 0) return fail_sys("fcntl");
  return {};
}

}  // namespace

Result<ShimHandle> spawn_shim(const ExecSpec& spec) {
  ShimHandle h;
  UniqueFd status_w, control_r, stdin_r, stdout_w, stderr_w;
  TRY_VOID(make_pipe(h.status, status_w));
  TRY_VOID(make_pipe(control_r, h.control));
  if (spec.tty) {
    // A terminal of the sandbox's own devpts: the master stays with the agent (output, input,
    // resizes), the worker gets the slave as stdin, stdout and stderr.
    h.tty.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!h.tty) return fail_sys("posix_openpt", "/dev/ptmx (a terminal for the exec)");
    if (::unlockpt(h.tty.get()) < 0) return fail_sys("unlockpt", "the exec's terminal");
    winsize ws{spec.rows, spec.cols, 0, 0};
    (void)::ioctl(h.tty.get(), TIOCSWINSZ, &ws);
    int slave = ::ioctl(h.tty.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) return fail_sys("ioctl TIOCGPTPEER", "the exec's terminal");
    stdout_w.reset(slave);
    h.stdout_r.reset(::fcntl(h.tty.get(), F_DUPFD_CLOEXEC, 3));
    if (!h.stdout_r) return fail_sys("dup", "the exec's terminal");
    if (spec.stdin_pipe) {
      h.stdin_w.reset(::fcntl(h.tty.get(), F_DUPFD_CLOEXEC, 3));
      if (!h.stdin_w) return fail_sys("dup", "the exec's terminal");
    }
  } else {
    if (spec.stdin_pipe) TRY_VOID(make_pipe(stdin_r, h.stdin_w));
    if (!spec.detach) {
      TRY_VOID(make_pipe(h.stdout_r, stdout_w));
      TRY_VOID(make_pipe(h.stderr_r, stderr_w));
    }
  }
  for (const UniqueFd* fd : {&h.status, &h.control, &h.stdin_w, &h.stdout_r, &h.stderr_r})
    if (fd->valid()) TRY_VOID(set_nonblocking(*fd));

  WorkerPlan plan;
  plan.candidates = exec_candidates(spec);
  for (const std::string& c : plan.candidates) plan.candidate_ptrs.push_back(c.c_str());
  for (const std::string& a : spec.argv) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  for (const std::string& e : spec.env) plan.envp.push_back(const_cast<char*>(e.c_str()));
  plan.envp.push_back(nullptr);
  plan.cwd = spec.cwd.c_str();
  plan.uid = spec.uid;
  plan.gid = spec.gid;
  plan.stdin_fd = stdin_r.get();
  plan.stdout_fd = stdout_w.get();
  plan.stderr_fd = stderr_w.get();
  if (spec.tty) {
    plan.tty = true;
    plan.stdin_fd = plan.stderr_fd = stdout_w.get();
  }

  pid_t pid = ::fork();
  if (pid < 0) return fail_sys("fork", "exec shim");
  if (pid == 0) {
    close_all_except(
        {status_w.get(), control_r.get(), stdin_r.get(), stdout_w.get(), stderr_w.get()});
    ::setsid();
    // The exec's orphans (double forks, setsid) are re-parented here, not to the agent.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    ::prctl(PR_SET_NAME, "space-shim", 0, 0, 0);
    for (int sig : kShimIgnored) ::signal(sig, SIG_IGN);
    plan.status_fd = status_w.get();
    Shim shim(status_w.release(), control_r.release());
    stdin_r.release();
    stdout_w.release();
    stderr_w.release();
    shim.run(plan);
  }
  h.pid = pid;
  return h;
}

}  // namespace space::agent
