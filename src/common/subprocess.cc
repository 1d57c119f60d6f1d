// run_program (subprocess.h): posix_spawn of an explicitly found program, one poll loop over its
// output pipes and a pidfd, the deadline, and a kill of its process group before the reap. And
// spawn_with_channel: a long-lived helper with a socket on fd 3.
#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>
#include <utility>

extern char** environ;

namespace space {
namespace {

using SpawnClock = std::chrono::steady_clock;

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The started child. Until reap() it is killed with its process group and reaped on
// destruction, so an early return (or an exception) never leaves it running or a zombie.
class SpawnedChild {
 public:
  explicit SpawnedChild(pid_t pid) : pid_(pid) {}
  SpawnedChild(const SpawnedChild&) = delete;
  SpawnedChild& operator=(const SpawnedChild&) = delete;
  ~SpawnedChild() {
    if (pid_ <= 0) return;
    kill_group();
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }

  pid_t pid() const { return pid_; }

  // SIGKILL to the child's process group (its id is the child's pid: POSIX_SPAWN_SETPGROUP 0).
  // Safe until the reap: the unreaped child, even as a zombie, keeps that id from being reused.
  void kill_group() const {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);  // should it have left its group
  }

  // Whether the child has exited, without reaping it.
  bool exited() const {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == pid_;
  }

  Result<int> reap() {
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0)
      if (errno != EINTR) return fail_sys("waitpid", std::to_string(pid_));
    pid_ = -1;
    return st;
  }

 private:
  pid_t pid_;
};

// One captured stream: the read end of its pipe and what is kept of it.
struct Capture {
  UniqueFd fd;
  std::string* text = nullptr;
  bool* truncated = nullptr;

  // Reads what is there; at end of file the fd is closed.
  void read_some(const RunOptions& o) {
    char buf[64 * 1024];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      fd.reset();
      return;
    }
    auto len = static_cast<size_t>(n);
    if (!o.keep_tail) {
      size_t room = o.max_output - std::min(o.max_output, text->size());
      if (len > room) *truncated = true;
      text->append(buf, std::min(len, room));
      return;
    }
    text->append(buf, len);
    if (text->size() > o.max_output) {
      text->erase(0, text->size() - o.max_output);
      *truncated = true;
    }
  }
};

// RAII for the spawn attribute objects.
struct SpawnSetup {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

Result<std::pair<UniqueFd, UniqueFd>> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail_sys("pipe2");
  return std::pair{UniqueFd(p[0]), UniqueFd(p[1])};
}

}  // namespace

std::string RunResult::describe_status(const RunOptions& opts) const {
  if (timed_out) return "timed out after " + std::to_string(opts.timeout.count()) + " ms (killed)";
  if (signal != 0) {
    const char* abbrev = ::sigabbrev_np(signal);
    return "killed by signal " + std::to_string(signal) +
           (abbrev ? " (SIG" + std::string(abbrev) + ")" : "");
  }
  return "exited with " + std::to_string(exit_code);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* abbrev = ::sigabbrev_np(WTERMSIG(status));
    return "was killed by signal " +
           (abbrev ? std::string(abbrev) : std::to_string(WTERMSIG(status))) +
           (WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return "ended";
}

Result<std::string> find_program(std::string_view program, std::string_view search_path) {
  if (program.empty()) return fail(Code::kInvalidArgument, "no program to run (empty name)");
  std::string name(program);
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name))
      return fail(Code::kUnavailable, "program \"" + name + "\" not found or not executable");
    return name;
  }
  size_t start = 0;
  while (start <= search_path.size()) {
    size_t colon = std::min(search_path.find(':', start), search_path.size());
    std::string_view dir = search_path.substr(start, colon - start);
    start = colon + 1;
    if (dir.empty() || dir.front() != '/') continue;  // "" or relative: never the cwd
    std::string cand = std::string(dir) + "/" + name;
    if (is_executable_file(cand)) return cand;
  }
  return fail(Code::kUnavailable,
              "program \"" + name + "\" not found in " + std::string(search_path));
}

Result<RunResult> run_program(const std::vector<std::string>& argv, const RunOptions& opts) {
  if (argv.empty()) return fail(Code::kInvalidArgument, "no program to run (empty argv)");
  const std::string exe = TRY(find_program(argv[0], opts.search_path));

  // Everything the child needs is built here, before the spawn.
  std::vector<std::string> env =
      opts.env ? *opts.env : std::vector<std::string>{"PATH=" + opts.search_path, "LC_ALL=C"};
  std::vector<char*> argv_p, env_p;
  for (const auto& a : argv) argv_p.push_back(const_cast<char*>(a.c_str()));
  argv_p.push_back(nullptr);
  for (const auto& e : env) env_p.push_back(const_cast<char*>(e.c_str()));
  env_p.push_back(nullptr);

  // Both ends O_CLOEXEC: the dup2 onto 1 and 2 in the child is what it inherits.
  auto [out_r, out_w] = TRY(make_pipe());
  UniqueFd err_r, err_w;
  if (opts.stderr_mode == StderrMode::kCapture) std::tie(err_r, err_w) = TRY(make_pipe());

  SpawnSetup s;
  posix_spawn_file_actions_addopen(&s.fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&s.fa, out_w.get(), 1);
  switch (opts.stderr_mode) {
    case StderrMode::kCapture:
      posix_spawn_file_actions_adddup2(&s.fa, err_w.get(), 2);
      break;
    case StderrMode::kNull:
      posix_spawn_file_actions_addopen(&s.fa, 2, "/dev/null", O_WRONLY, 0);
      break;
    case StderrMode::kMerge:
      posix_spawn_file_actions_adddup2(&s.fa, out_w.get(), 2);
      break;
  }
  // Whatever else is open in this process (sandbox netns fds, listeners, an fd another thread
  // opened without O_CLOEXEC) stays here.
  posix_spawn_file_actions_addclosefrom_np(&s.fa, 3);
  if (!opts.cwd.empty()) posix_spawn_file_actions_addchdir_np(&s.fa, opts.cwd.c_str());
  // A process group of its own (so the deadline kills what it started too), no blocked
  // signals, and default dispositions for all (spaced ignores SIGPIPE; its children must not).
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setflags(&s.attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&s.attr, 0);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &all);

  const auto deadline = SpawnClock::now() + opts.timeout;
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, exe.c_str(), &s.fa, &s.attr, argv_p.data(), env_p.data());
  if (rc != 0) return fail_sys("posix_spawn", "\"" + exe + "\"", rc);
  SpawnedChild child(pid);
  out_w.reset();
  err_w.reset();

  RunResult r;
  Capture out{std::move(out_r), &r.out, &r.out_truncated};
  Capture err{std::move(err_r), &r.err, &r.err_truncated};
  // Readable once the child has exited. Without pidfds (Linux < 5.3) waitid is polled instead.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  bool exited = false;
  for (;;) {
    if (exited && !out.fd && !err.fd) break;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SpawnClock::now()).count();
    if (left <= 0) {
      // The program itself is still running: that is a timeout. If only something it left
      // holding the pipes is, the program's own status stands; either way the group goes.
      r.timed_out = !exited && !child.exited();
      break;
    }
    pollfd pfd[3];
    nfds_t n = 0;
    if (out.fd) pfd[n++] = {out.fd.get(), POLLIN, 0};
    if (err.fd) pfd[n++] = {err.fd.get(), POLLIN, 0};
    int wait_ms = static_cast<int>(std::min<int64_t>(left, 1'000'000));
    if (!exited) {
      if (pidfd)
        pfd[n++] = {pidfd.get(), POLLIN, 0};
      else
        wait_ms = std::min(wait_ms, 10);
    }
    int ready = ::poll(pfd, n, wait_ms);
    if (ready < 0 && errno != EINTR) return fail_sys("poll", "output of " + argv[0]);
    if (ready > 0)
      for (nfds_t i = 0; i < n; ++i) {
        if (pfd[i].revents == 0) continue;
        if (out.fd && pfd[i].fd == out.fd.get())
          out.read_some(opts);
        else if (err.fd && pfd[i].fd == err.fd.get())
          err.read_some(opts);
      }
    if (!exited && child.exited()) {
      exited = true;
      // Whatever it started and left in its group goes with it; the output already in the
      // pipes stays readable.
      child.kill_group();
    }
  }
  child.kill_group();
  int st = TRY(child.reap());
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  return r;
}

std::string first_output_line(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout, std::string_view search_path) {
  RunOptions o;
  o.timeout = timeout;
  o.max_output = 4096;
  o.stderr_mode = StderrMode::kNull;
  o.search_path = std::string(search_path);
  auto r = run_program(argv, o);
  if (!r) return "";
  std::string line = r->out.substr(0, r->out.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  return line;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0) (void)kill_and_wait(SIGKILL);
    pid_ = std::exchange(o.pid_, -1);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) (void)kill_and_wait(SIGKILL);
}

int ChildProcess::kill_and_wait(int sig) {
  if (pid_ <= 0) return 0;
  ::kill(pid_, sig);  // ours until reaped: the pid cannot have been reused
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return status;
}

Result<SpawnedHelper> spawn_with_channel(const std::string& program,
                                         const std::vector<std::string>& argv,
                                         const ChannelOptions& o) {
  if (argv.empty()) return fail(Code::kInvalidArgument, "no program to run (empty argv)");
  int sv[2];
  int type = o.type == ChannelType::kSeqPacket ? SOCK_SEQPACKET : SOCK_STREAM;
  if (::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) != 0)
    return fail_sys("socketpair", program);
  UniqueFd mine(sv[0]), theirs(sv[1]);
  // A plain dup2(3, 3) leaves close-on-exec set (glibc's spawn clears it only since 2.29), and
  // a source on 0 would be overwritten by the stdin action: the helper's end goes above 3.
  if (theirs.get() <= kChannelFd) {
    UniqueFd moved(::fcntl(theirs.get(), F_DUPFD_CLOEXEC, 10));
    if (!moved) return fail_sys("fcntl", "F_DUPFD_CLOEXEC");
    theirs = std::move(moved);
  }

  std::vector<std::string> env =
      o.env ? *o.env
            : std::vector<std::string>{"PATH=" + std::string(kDefaultSearchPath), "LC_ALL=C"};
  std::vector<char*> argv_p, env_p;
  for (const auto& a : argv) argv_p.push_back(const_cast<char*>(a.c_str()));
  argv_p.push_back(nullptr);
  for (const auto& e : env) env_p.push_back(const_cast<char*>(e.c_str()));
  env_p.push_back(nullptr);

  SpawnSetup s;
  posix_spawn_file_actions_adddup2(&s.fa, theirs.get(), kChannelFd);
  if (o.stdin_null) posix_spawn_file_actions_addopen(&s.fa, 0, "/dev/null", O_RDONLY, 0);
  // Whatever else is open here (a daemon's sandbox fds and listeners) stays here.
  posix_spawn_file_actions_addclosefrom_np(&s.fa, kChannelFd + 1);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (o.own_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&s.attr, 0);
  }
  posix_spawnattr_setflags(&s.attr, flags);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &all);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, program.c_str(), &s.fa, &s.attr, argv_p.data(),
                         o.inherit_env ? environ : env_p.data());
  if (rc != 0) return fail_sys("posix_spawn", program, rc);
  return SpawnedHelper{ChildProcess(pid), std::move(mine)};
}

}  // namespace space
