// The sandbox launcher (see launcher.h). The child's steps are one straight-line function,
// child_main(), that reads like the recipe it is; each step that fails reports its name.
#include "runtime/linux/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include "host/confine.h"
#include "host/syscalls.h"
#include "runtime/linux/namespaces.h"

namespace space::runtime::linux {

namespace {

// Fds the child holds until exec, besides kChannelFd..kSpareDaemonFd, kLowerFdSlot and
// kLayerMountSlot.
constexpr int kAgentImageSlot = 7;
constexpr int kReportSlot = 8;
constexpr int kReleaseSlot = 9;
constexpr int kFirstFreeSlot = 13;
constexpr size_t kPlacedFds = 7;

enum Step : int32_t {
  kArrangeFds,
  kResetSignals,
  kWaitRelease,
  kEnterStage,
  kAttachLower,
  kOpenLower,
  kAttachLayer,
  kSetGid,
  kDropGroups,
  kSetUid,
  kShmLimit,
  kUnshareCgroup,
  kMakePrivate,
  kFsBeforePivot,  // index = op
  kOpenLayer,
  kEnterRoot,
  kMakeOldRoot,
  kPivotRoot,
  kChdirRoot,
  kFsAfterPivot,  // index = op
  kDetachOldRoot,
  kRemoveOldRoot,
  kHostname,
  kStdio,
  kSetsid,
  kRlimitNofile,
  kRlimitCore,
  kCapBounding,
  kCapAmbient,
  kCapSet,
  kNoNewPrivs,
  kSeccomp,
  kSendListener,
  kExec,
  kStepCount,
};

constexpr const char* kStepNames[kStepCount] = {
    "arrange fds",
    "reset signals",
    "wait for release",
    "enter staging directory",
    "attach id-mapped image rootfs",
    "open image rootfs",
    "attach writable layer",
    "setresgid 0",
    "setgroups",
    "setresuid 0",
    "limit SysV shm (kernel.shmall)",
    "unshare cgroup namespace",
    "make mounts private",
    "",
    "open writable layer",
    "enter new root",
    "create old root mount point",
    "pivot_root",
    "chdir /",
    "",
    "detach old root",
    "remove old root mount point",
    "sethostname",
    "stdio to /dev/null",
    "setsid",
    "lower RLIMIT_NOFILE",
    "RLIMIT_CORE 0",
    "drop bounding capabilities",
    "clear ambient capabilities",
    "capset",
    "no_new_privs",
    "install seccomp filter",
    "hand the exec listener to the daemon",
    "execveat agent",
};

struct StepReport {
  int32_t step;
  int32_t index;
  int32_t err;
};

// Everything the child needs, prepared by the parent. The child sees a copy-on-write copy.
struct ChildPlan {
  // Fd to place -> slot.
  std::array<std::pair<int, int>, kPlacedFds> fds;
  int report_fd;  // before the fds are arranged
  const char* stage_dir;
  const char* lower_dir;
  const FsPlan* fs;
  const char* hostname;
  size_t hostname_len;
  const char* shmall;  // pages, as text; empty = leave the default
  size_t shmall_len;
  rlimit nofile;
  rlimit core;
  host::CapPlan caps;
  const host::SeccompProgram* seccomp;
  char* const* argv;
  char* const* envp;
};

// Sends one byte on `sock` and, if `fd` >= 0, `fd` with it as SCM_RIGHTS. Returns 0 or an
// errno. Async-signal-safe: used by the child between clone and exec and by the parent.
int send_byte_with_fd(int sock, char byte, int fd) {
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    ::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n == 1) return 0;
  return n < 0 ? errno : EPIPE;
}

// The launcher's step for a step of the confinement recipe (the sandbox takes no identity).
Step step_of(host::ConfineStep s) {
  switch (s) {
    case host::ConfineStep::kNofile:
      return kRlimitNofile;
    case host::ConfineStep::kCore:
      return kRlimitCore;
    case host::ConfineStep::kCapBounding:
      return kCapBounding;
    case host::ConfineStep::kCapAmbient:
      return kCapAmbient;
    case host::ConfineStep::kCapset:
      return kCapSet;
    case host::ConfineStep::kNoNewPrivs:
      return kNoNewPrivs;
    default:
      return kSeccomp;
  }
}

[[noreturn]] void child_fail(int report_fd, Step step, size_t index, int err) {
  StepReport r{step, static_cast<int32_t>(index), err};
  ssize_t n = ::write(report_fd, &r, sizeof r);
  (void)n;
  ::_exit(127);
}

// The child, from clone to exec. Raw syscalls only: glibc's set*id() wrappers would try to
// signal the parent's other threads, and malloc's locks may be held by them.
[[noreturn]] void child_main(const ChildPlan& p) {
  int report = p.report_fd;
  auto check = [&](Step step, long rc) {
    if (rc < 0) child_fail(report, step, 0, errno);
  };

  // Fds: copy every fd we keep above the slots first (F_DUPFD never clobbers), then place
  // them, then close everything else the daemon had open.
  int tmp[kPlacedFds];
  for (size_t i = 0; i < p.fds.size(); ++i) {
    tmp[i] = ::fcntl(p.fds[i].first, F_DUPFD_CLOEXEC, kFirstFreeSlot);
    if (tmp[i] < 0) child_fail(report, kArrangeFds, i, errno);
  }
  for (size_t i = 0; i < p.fds.size(); ++i) {
    int slot = p.fds[i].second;
    // The agent's fds survive exec; the launcher's own are close-on-exec.
    int flags = slot <= kSpareDaemonFd ? 0 : O_CLOEXEC;
    if (::dup3(tmp[i], slot, flags) < 0) child_fail(report, kArrangeFds, i, errno);
  }
  report = kReportSlot;
  for (int fd = kChannelFd; fd < kFirstFreeSlot; ++fd) {  // free slots the daemon had open
    bool placed = false;
    for (const auto& entry : p.fds) placed |= entry.second == fd;
    if (!placed) ::close(fd);
  }
  check(kArrangeFds, ::close_range(kFirstFreeSlot, ~0U, 0));

  // Signal dispositions and mask are inherited from the daemon; SIG_IGN even survives exec.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::signal(sig, SIG_DFL);  // glibc-internal signals refuse: fine
  }
  sigset_t none;
  sigemptyset(&none);
  check(kResetSignals, ::sigprocmask(SIG_SETMASK, &none, nullptr));

  // The parent writes our id maps and joins us to the cgroups, then releases us. EOF means it
  // gave up.
  // The release message may carry one fd: the image rootfs as an id-mapped mount (see
  // make_idmapped_lower), which we attach in our own mount namespace below.
  char go = 0;
  int idmapped = -1;
  ssize_t n;
  {
    alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
    iovec iov{&go, 1};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    do {
      n = ::recvmsg(kReleaseSlot, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n == 1) {
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof(int))) {
        ::memcpy(&idmapped, CMSG_DATA(c), sizeof(int));
      }
    }
  }
  if (n != 1) child_fail(report, kWaitRelease, 0, n < 0 ? errno : ECANCELED);
  // kReleaseSlot stays open until the exec listener (if any) went back over it.

  // Host paths are looked up by name here, in our own mount namespace (fds opened by the parent
  // would point into the host's), and before setresuid: as long as we keep host root's fs
  // identity the state and image directories may stay closed to others (mode 0700).
  check(kEnterStage, ::chdir(p.stage_dir));
  const char* lower_path = p.lower_dir;
  if (idmapped >= 0) {
    check(kAttachLower,
          ::syscall(SYS_move_mount, idmapped, "", AT_FDCWD, "lower", MOVE_MOUNT_F_EMPTY_PATH));
    ::close(idmapped);
    lower_path = "lower";
  }
  int lower = ::open(lower_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  check(kOpenLower, lower);
  if (lower != kLowerFdSlot) {
    check(kOpenLower, ::dup3(lower, kLowerFdSlot, O_CLOEXEC));
    ::close(lower);
  }
  // The writable layer the daemon made (and maybe filled) as a detached tmpfs: attached here,
  // in our own mount namespace, it is where the overlay finds upper/ and work/.
  check(kAttachLayer,
        ::syscall(SYS_move_mount, kLayerMountSlot, "", AT_FDCWD, "layer", MOVE_MOUNT_F_EMPTY_PATH));
  ::close(kLayerMountSlot);

  // Become root of the new user namespace (host uid_base) and drop the daemon's supplementary
  // groups, which would otherwise still grant host group access.
  check(kSetGid, ::syscall(SYS_setresgid, 0, 0, 0));
  check(kDropGroups, ::syscall(SYS_setgroups, 0, nullptr));
  check(kSetUid, ::syscall(SYS_setresuid, 0, 0, 0));
  // The IPC namespace's SysV shm bound, written as its root through the host's /proc (still
  // mounted here; the sysctl is the writer's namespace's). Kernels before 6.1 do not let a
  // namespace's root write it: the kernel's default stays then.
  if (p.shmall_len > 0) {
    int fd = ::open("/proc/sys/kernel/shmall", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (::write(fd, p.shmall, p.shmall_len) < 0) child_fail(report, kShmLimit, 0, errno);
      ::close(fd);
    } else if (errno != EACCES && errno != EPERM && errno != EROFS) {
      child_fail(report, kShmLimit, 0, errno);
    }
  }
  // After the parent placed us in our cgroups: they become the root of our cgroup view.
  check(kUnshareCgroup, ::unshare(CLONE_NEWCGROUP));

  // File system. Mounts are private so nothing propagates back to the host.
  ::umask(0);
  check(kMakePrivate, ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr));
  size_t failed = 0;
  if (int err = run_fs_ops(p.fs->before_pivot, &failed)) {
    child_fail(report, kFsBeforePivot, failed, err);
  }
  int layer = ::open("layer", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  check(kOpenLayer, layer);
  if (layer == kLayerFd) {  // the lowest free fd may be the slot itself
    check(kOpenLayer, ::fcntl(layer, F_SETFD, 0));
  } else {
    check(kOpenLayer, ::dup3(layer, kLayerFd, 0));
    ::close(layer);
  }
  check(kEnterRoot, ::chdir("root"));
  check(kMakeOldRoot, ::mkdir(kOldRoot + 1, 0700));
  check(kPivotRoot, host::sys_pivot_root(".", kOldRoot + 1));
  check(kChdirRoot, ::chdir("/"));
  if (int err = run_fs_ops(p.fs->after_pivot, &failed)) {
    child_fail(report, kFsAfterPivot, failed, err);
  }
  check(kDetachOldRoot, ::umount2(kOldRoot, MNT_DETACH));
  check(kRemoveOldRoot, ::rmdir(kOldRoot));
  check(kHostname, ::sethostname(p.hostname, p.hostname_len));

  // stdio: the daemon's own must not reach the sandbox. A new session drops its terminal.
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  check(kStdio, null);
  for (int fd = 0; fd <= 2; ++fd) check(kStdio, ::dup3(null, fd, 0));
  if (null > 2) ::close(null);
  check(kSetsid, ::setsid());
  ::umask(022);

  // The host's confinement recipe (host/confine.h): rlimits, the sandbox's capabilities, then
  // no_new_privs and seccomp (which needs one of CAP_SYS_ADMIN or NNP). Sandbox root keeps its
  // uid (0 in the sandbox's user namespace).
  int listener = -1;
  const host::ConfinePlan lock{.nofile = p.nofile,
                               .core = p.core,
                               .caps = p.caps,
                               .seccomp = p.seccomp,
                               .listener = p.seccomp->notify_execs ? &listener : nullptr};
  if (host::ConfineFailure f = host::confine_steps(lock); f.err != 0) {
    child_fail(report, step_of(f.step), 0, f.err);
  }
  if (p.seccomp->notify_execs) {
    // Exec auditing: the filter's listener goes to the daemon (which must answer our own
    // execveat below) and stays at kExecListenerFd for the agent to hold across restarts.
    if (listener != kExecListenerFd) {
      check(kSendListener, ::dup3(listener, kExecListenerFd, 0));
      ::close(listener);
    } else {
      check(kSendListener, ::fcntl(listener, F_SETFD, 0));
    }
    if (int err = send_byte_with_fd(kReleaseSlot, 'L', kExecListenerFd)) {
      child_fail(report, kSendListener, 0, err);
    }
  }
  ::close(kReleaseSlot);

  ::execveat(kAgentImageSlot, "", p.argv, p.envp, AT_EMPTY_PATH);
  child_fail(report, kExec, 0, errno);
}

std::string describe_step(const StepReport& r, const FsPlan& fs) {
  auto op_name = [&](const std::vector<FsOp>& ops) -> std::string {
    if (r.index >= 0 && static_cast<size_t>(r.index) < ops.size()) return ops[r.index].what;
    return "mount step " + std::to_string(r.index);
  };
  if (r.step == kFsBeforePivot) return op_name(fs.before_pivot);
  if (r.step == kFsAfterPivot) return op_name(fs.after_pivot);
  if (r.step >= 0 && r.step < kStepCount) return kStepNames[r.step];
  return "step " + std::to_string(r.step);
}

struct Pipe {
  UniqueFd read, write;
};
Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail_sys("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}
Result<std::pair<UniqueFd, UniqueFd>> make_socketpair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return fail_sys("socketpair", "AF_UNIX");
  }
  return std::pair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Reads the child's report pipe: EOF = the agent was exec'd.
Result<void> wait_for_exec(int fd, const FsPlan& fs, std::chrono::milliseconds timeout) {
  StepReport r{};
  size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got < sizeof r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return fail_sys("poll", "report pipe");
    if (rc == 0) {
      return fail(Code::kTimeout,
                  "the sandbox did not start within " + std::to_string(timeout.count()) + " ms");
    }
    ssize_t n = ::read(fd, reinterpret_cast<char*>(&r) + got, sizeof r - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("read", "report pipe");
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return {};
  if (got != sizeof r) return fail(Code::kInternal, "truncated report from the sandbox child");
  return fail(Error::sys("step \"" + describe_step(r, fs) + "\"", "", r.err));
}

}  // namespace

namespace {

// A detached, read-only, nosuid, nodev clone of `lower_dir` whose ownership is mapped through
// the child's user namespace (open_tree + mount_setattr MOUNT_ATTR_IDMAP). Needs the child's id
// maps written. Invalid on failure (old kernel, unsupported file system).
UniqueFd make_idmapped_lower(pid_t child, const std::filesystem::path& lower_dir) {
  std::string ns = "/proc/" + std::to_string(child) + "/ns/user";
  UniqueFd userns(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!userns) return {};
  UniqueFd tree(static_cast<int>(
      ::syscall(SYS_open_tree, AT_FDCWD, lower_dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
  if (!tree) return {};
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<uint64_t>(userns.get());
  if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    return {};
  return tree;
}

// The exec listener the child sends after installing its filter. kConflict if the child
// closed the socket first (it failed; the report pipe tells why).
Result<UniqueFd> receive_listener(int sock, std::chrono::milliseconds timeout) {
  pollfd pfd{sock, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return fail_sys("poll", "release channel");
  if (rc == 0) return fail(Code::kTimeout, "the sandbox did not send its exec listener");
  char one = 0;
  iovec iov{&one, 1};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return fail(Code::kConflict, "the sandbox's launcher exited");
  if (n < 0) return fail_sys("recvmsg", "release channel");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
      c->cmsg_len != CMSG_LEN(sizeof(int)))
    return fail(Code::kProtocol, "the sandbox's launcher sent no exec listener");
  int fd = -1;
  ::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return UniqueFd(fd);
}

// Releases the child: one byte, plus `fd` (if valid) as SCM_RIGHTS.
Result<void> send_release(int sock, int fd) {
  if (int err = send_byte_with_fd(sock, '1', fd))
    return fail_sys("sendmsg", "release channel", err);
  return {};
}

// Starts the sandbox's first process with clone(CLONE_VM) from a scratch thread that joined the
// sandbox's network namespace. Sharing spaced's memory until the agent's exec means spaced's page
// tables are neither copied nor marked copy-on-write: on a 2-CPU VM a plain fork of spaced cost
// ~2 ms, and the copy-on-write faults spaced took afterwards on every page it wrote cost more
// than the rest of sandbox creation together.
//
// The child runs on its own stack and only raw, async-signal-safe syscalls over the plan (which
// the caller keeps alive), so sharing memory is safe; what it does share is the scratch thread's
// TLS (errno). That thread therefore stays alive, with every signal blocked and touching
// nothing, until finish(): the caller calls it (or the destructor does) once the child has
// exec'd or is dead, and the stack is freed then.
class Spawner {
 public:
  Spawner() = default;
  Spawner(const Spawner&) = delete;
  ~Spawner() { finish(); }

  // pid and pidfd of the child, which starts in child_main(*plan).
  Result<std::pair<pid_t, int>> start(int netns_fd, const ChildPlan* plan) {
    done_.reset(::eventfd(0, EFD_CLOEXEC));
    if (!done_) return fail_sys("eventfd");
    void* stack = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return fail_sys("mmap", "child stack");
    stack_ = stack;
    ::mprotect(stack_, kGuard, PROT_NONE);  // overflow faults instead of writing below
    struct Outcome {
      pid_t pid = -1;
      int pidfd = -1;
      int err = 0;
      const char* call = nullptr;
      bool ready = false;
    } res;
    std::mutex mu;
    std::condition_variable cv;
    thread_ = std::thread([&, netns_fd, plan, done = done_.get(),
                           stack_top = static_cast<char*>(stack_) + kStackSize] {
      sigset_t all;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, nullptr);
      Outcome r;
      if (::setns(netns_fd, CLONE_NEWNET) != 0) {
        r.err = errno;
        r.call = "setns";
      } else {
        int flags = CLONE_VM | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS |
                    CLONE_NEWIPC | CLONE_PIDFD | SIGCHLD;
        r.pid = ::clone(&Spawner::child_entry, stack_top, flags, const_cast<ChildPlan*>(plan),
                        &r.pidfd);
        if (r.pid < 0) {
          r.err = errno;
          r.call = "clone";
        }
      }
      bool started = r.pid > 0;
      {
        std::lock_guard lock(mu);
        r.ready = true;
        res = r;
      }
      cv.notify_one();
      if (!started) return;
      uint64_t v;
      while (::read(done, &v, sizeof v) < 0) {
      }
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return res.ready; });
    if (res.pid < 0) return fail_sys(res.call, "", res.err);
    return std::pair{res.pid, res.pidfd};
  }

  // The child exec'd or died: let the scratch thread go and free the stack.
  void finish() {
    if (thread_.joinable()) {
      uint64_t one = 1;
      (void)::write(done_.get(), &one, sizeof one);
      thread_.join();
    }
    if (stack_) ::munmap(stack_, kStackSize);
    stack_ = nullptr;
  }

 private:
  static constexpr size_t kStackSize = 256 * 1024;
  static constexpr size_t kGuard = 4096;
  static int child_entry(void* plan) { child_main(*static_cast<const ChildPlan*>(plan)); }

  std::thread thread_;
  UniqueFd done_;
  void* stack_ = nullptr;
};

}  // namespace

Result<Launched> launch(const LaunchRequest& req) {
  StepTimes scratch;
  StepTimes& times = req.times ? *req.times : scratch;
  if (req.layer_fd < 0) return fail(Code::kInvalidArgument, "no writable layer to attach");
  // Socketpairs: the channel, and the spare pair a restarted daemon will use.
  auto [channel_daemon, channel_agent] = TRY_CTX(make_socketpair(), "creating the channel");
  auto [spare_agent, spare_daemon] = TRY_CTX(make_socketpair(), "creating the spare channel");
  Pipe report = TRY(make_pipe());
  auto [release_daemon, release_child] = TRY_CTX(make_socketpair(), "creating the release channel");
  struct stat st;
  if (::stat(req.lower_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(Code::kNotFound,
                "image rootfs \"" + req.lower_dir.string() + "\" is not a directory");
  }

  rlimit nofile{}, core{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) return fail_sys("getrlimit", "RLIMIT_NOFILE");
  if (::getrlimit(RLIMIT_CORE, &core) != 0) return fail_sys("getrlimit", "RLIMIT_CORE");
  nofile.rlim_cur = nofile.rlim_max = std::min<rlim_t>(nofile.rlim_max, req.nofile);
  core.rlim_cur = core.rlim_max = 0;  // the hard limit too: the sandbox cannot re-enable cores

  static char arg0[] = "space-agent", arg1[] = "--channel-fd", arg2[] = "3", arg3[] = "--spare-fds",
              arg4[] = "4,5", arg5[] = "--hold-fds", arg6[] = "6", arg6_listener[] = "6,10";
  static_assert(kExecListenerFd == 10);
  static char* const argv_plain[] = {arg0, arg1, arg2, arg3, arg4, arg5, arg6, nullptr};
  static char* const argv_listener[] = {arg0, arg1, arg2, arg3, arg4, arg5, arg6_listener, nullptr};
  char* const* argv = req.seccomp->notify_execs ? argv_listener : argv_plain;
  static char* const envp[] = {nullptr};

  // kernel.shmall counts pages (at least one, so that 0 never means "no limit" to a kernel).
  std::string shmall =
      req.shm_bytes ? std::to_string(std::max<uint64_t>(1, req.shm_bytes / ::getpagesize())) : "";
  ChildPlan plan{
      .fds = {{{channel_agent.get(), kChannelFd},
               {spare_agent.get(), kSpareAgentFd},
               {spare_daemon.get(), kSpareDaemonFd},
               {req.agent_fd, kAgentImageSlot},
               {report.write.get(), kReportSlot},
               {release_child.get(), kReleaseSlot},
               {req.layer_fd, kLayerMountSlot}}},
      .report_fd = report.write.get(),
      .stage_dir = req.stage_dir.c_str(),
      .lower_dir = req.lower_dir.c_str(),
      .fs = req.fs,
      .hostname = req.id.c_str(),
      .hostname_len = req.id.size(),
      .shmall = shmall.c_str(),
      .shmall_len = shmall.size(),
      .nofile = nofile,
      .core = core,
      .caps = req.caps,
      .seccomp = req.seccomp,
      .argv = argv,
      .envp = envp,
  };

  // The child is born inside the sandbox's network namespace without owning it, and shares
  // spaced's memory until it execs the agent (Spawner).
  Spawner spawner;
  auto spawned = spawner.start(req.netns_fd, &plan);
  if (!spawned) return fail(std::move(spawned.error()));
  auto [pid, pidfd] = *spawned;
  times.mark("clone");

  Launched out;
  out.pid = pid;
  out.pidfd.reset(pidfd);
  // From here on a failure kills and reaps the child.
  auto undo = [&](Error e) -> Result<Launched> {
    (void)host::kill_and_reap(out.pidfd.get(), true, std::chrono::milliseconds(5000));
    return fail(std::move(e));
  };

  // The child's copies are all it needs; ours would keep EOFs from arriving.
  channel_agent.reset();
  spare_agent.reset();
  spare_daemon.reset();
  report.write.reset();
  release_child.reset();

  if (auto r = write_id_maps(out.pid, req.uid_base, SandboxSpec::kIdRange); !r) {
    return undo(std::move(r.error()));
  }
  times.mark("id maps");
  if (auto r = req.cgroup->attach(out.pid); !r) {
    return undo(std::move(r.error()).wrap("joining cgroups"));
  }
  times.mark("cgroup attach");
  // The image rootfs, id-mapped so that its files (owned by host uids) appear with the same
  // uids inside the sandbox: root-owned files belong to sandbox root, and overlayfs can copy
  // them up. Kernels or file systems without id-mapped mounts fall back to the plain
  // directory, where host-owned files show up as nobody.
  UniqueFd idmapped = make_idmapped_lower(out.pid, req.lower_dir);
  times.mark("idmapped lower");
  if (auto r = send_release(release_daemon.get(), idmapped.get()); !r)
    return undo(std::move(r.error()));
  idmapped.reset();
  if (req.seccomp->notify_execs) {
    // The child sends its exec listener just before it execs the agent, and that exec waits
    // for an answer: start the supervisor first. EOF means the child failed earlier; the
    // report pipe says how.
    auto listener = receive_listener(release_daemon.get(), req.timeout);
    if (listener && req.on_exec_listener) {
      if (auto r = req.on_exec_listener(std::move(*listener)); !r)
        return undo(std::move(r.error()));
    } else if (!listener && listener.error().code() != Code::kConflict) {
      return undo(std::move(listener.error()));
    }
  }
  release_daemon.reset();
  if (auto r = wait_for_exec(report.read.get(), *req.fs, req.timeout); !r) {
    return undo(std::move(r.error()));
  }
  spawner.finish();  // the agent runs in its own memory now
  times.mark("child setup and exec");
  out.channel = std::move(channel_daemon);
  return out;
}

}  // namespace space::runtime::linux
