// Runs space-upper-reader confined on a microVM's writable disk and parses what it prints
// (vm_diff.h). The recipe: open the reader (O_PATH) and the pipes -> clone3 into new pid,
// network, ipc and uts namespaces -> the child sets up fds 0-3 and rlimits, drops to the
// sandbox's uid, asks for SIGKILL when the daemon's thread dies, sets no_new_privs and
// execveat's the reader, reporting a failed step as {step, errno} on a pipe -> read the listing
// with a size cap and a deadline -> reap -> parse.
#include "runtime/vm_diff.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/fd.h"
#include "common/guard.h"
#include "host/process.h"
#include "host/syscalls.h"

namespace space::runtime::vm {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kReaderDiskFd = 3;  // the reader's --fd

// What the child needs, all prepared by the parent: between clone3 and exec the child of a
// multithreaded daemon uses raw system calls and this memory only.
struct ReaderPlan {
  int exe_fd, disk_fd, out_fd, null_fd, err_fd;
  uint32_t uid;
  rlimit as, cpu;
  char* const* argv;
};

constexpr const char* kReaderSteps[] = {
    "set up fds", "parent death signal", "set rlimits",        "set groups", "set gid",
    "set uid",    "no_new_privs",        "execveat the reader"};

struct ReaderChildError {
  int step, err;
};

[[noreturn]] void reader_child_fail(const ReaderPlan& p, int step) {
  ReaderChildError e{step, errno};
  (void)!::write(p.err_fd, &e, sizeof e);
  ::_exit(127);
}

[[noreturn]] void reader_child_main(const ReaderPlan& p) {
  // The sources are all >= 10 (reader_high_fd), so these never overwrite one another.
  if (::dup2(p.null_fd, 0) < 0 || ::dup2(p.out_fd, 1) < 0 || ::dup2(p.null_fd, 2) < 0 ||
      ::dup2(p.disk_fd, kReaderDiskFd) < 0)
    reader_child_fail(p, 0);
  // Everything else closes at exec (err_fd must stay open until then).
  if (::syscall(SYS_close_range, kReaderDiskFd + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    reader_child_fail(p, 0);
  const rlimit zero{0, 0}, nofile{8, 8};
  if (::setrlimit(RLIMIT_AS, &p.as) != 0 || ::setrlimit(RLIMIT_CPU, &p.cpu) != 0 ||
      ::setrlimit(RLIMIT_FSIZE, &zero) != 0 || ::setrlimit(RLIMIT_CORE, &zero) != 0 ||
      ::setrlimit(RLIMIT_MEMLOCK, &zero) != 0 || ::setrlimit(RLIMIT_NOFILE, &nofile) != 0)
    reader_child_fail(p, 2);
  // Raw set*id calls: glibc's wrappers signal every thread it knows of, which are the
  // daemon's, not this copy's.
  if (::syscall(SYS_setgroups, 0, nullptr) != 0) reader_child_fail(p, 3);
  if (::syscall(SYS_setresgid, p.uid, p.uid, p.uid) != 0) reader_child_fail(p, 4);
  if (::syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) reader_child_fail(p, 5);  // caps go
  // After the uid change, which clears it: the reader dies with the daemon's thread.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) reader_child_fail(p, 1);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) reader_child_fail(p, 6);
  static char* const kNoEnv[] = {nullptr};
  ::syscall(SYS_execveat, p.exe_fd, "", p.argv, kNoEnv, AT_EMPTY_PATH);
  reader_child_fail(p, 7);
}

// `fd` moved to a number >= 10 (close-on-exec), so that the child's dup2 to 0-3 cannot clobber
// a source it has yet to use.
Result<UniqueFd> reader_high_fd(UniqueFd fd) {
  int h = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 10);
  if (h < 0) return fail_sys("fcntl", "F_DUPFD_CLOEXEC");
  return UniqueFd(h);
}

std::string reader_signal_words(int sig) {
  if (sig == SIGSYS)
    return "it was killed for a system call outside its seccomp policy (an abort, such as on "
           "running out of memory, or a disk crafted to take the reader over)";
  if (sig == SIGKILL) return "it was killed (its CPU time limit, or its memory)";
  return std::string("it crashed (") +
         (sigabbrev_np(sig) ? "SIG" + std::string(sigabbrev_np(sig))
                            : "signal " + std::to_string(sig)) +
         ")";
}

}  // namespace

fs::path default_upper_reader() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path near = self.parent_path() / "space-upper-reader";
    if (::access(near.c_str(), X_OK) == 0) return near;
  }
  return "/usr/lib/space/space-upper-reader";
}

Result<std::vector<UpperEntry>> read_upper(int disk_fd, const UpperReader& reader) {
  UniqueFd exe(::open(reader.exe.c_str(), O_PATH | O_CLOEXEC));
  if (!exe)
    return fail(Code::kUnavailable, "the disk reader " + reader.exe.string() + " is missing (" +
                                        std::string(errno_name(errno)) +
                                        "): it is built and installed with spaced "
                                        "(ninja space-upper-reader)");
  int flags = ::fcntl(disk_fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDONLY)
    return fail(Code::kInternal, "the writable disk must be open read-only for its reader");
  UniqueFd disk(::fcntl(disk_fd, F_DUPFD_CLOEXEC, 10));
  if (!disk) return fail_sys("fcntl", "F_DUPFD_CLOEXEC");
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return fail_sys("pipe2");
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return fail_sys("pipe2");
  UniqueFd err_r(err[0]), err_w(err[1]);
  out_w = TRY(reader_high_fd(std::move(out_w)));
  err_w = TRY(reader_high_fd(std::move(err_w)));
  exe = TRY(reader_high_fd(std::move(exe)));
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null) return fail_sys("open", "/dev/null");
  null = TRY(reader_high_fd(std::move(null)));

  std::string fd_arg = std::to_string(kReaderDiskFd), max_arg = std::to_string(reader.max_entries);
  std::string name = "space-upper-reader";
  char* argv[] = {name.data(),    const_cast<char*>("--fd"),
                  fd_arg.data(),  const_cast<char*>("--max-entries"),
                  max_arg.data(), nullptr};
  ReaderPlan plan{.exe_fd = exe.get(),
                  .disk_fd = disk.get(),
                  .out_fd = out_w.get(),
                  .null_fd = null.get(),
                  .err_fd = err_w.get(),
                  .uid = reader.uid,
                  .as = {reader.max_memory, reader.max_memory},
                  .cpu = {reader.max_cpu_s, reader.max_cpu_s},
                  .argv = argv};
  if (plan.uid == 0) return fail(Code::kInternal, "the disk reader must not run as root");

  // Not spawn_with_channel (common/subprocess.h): between fork and exec this child enters new
  // namespaces, sets rlimits, drops to the sandbox's uid and sets PDEATHSIG and no_new_privs,
  // none of which posix_spawn can do. So clone3 and reader_child_main, here.
  // A pid namespace of its own (it is its init: killing it ends everything in it), an empty
  // network namespace (no network), its own ipc and uts.
  int pidfd_raw = -1;
  clone_args args{};
  args.flags = CLONE_PIDFD | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd_raw);
  args.exit_signal = SIGCHLD;
  long pid = host::sys_clone3(&args);
  if (pid < 0) return fail_sys("clone3", "the disk reader");
  if (pid == 0) reader_child_main(plan);
  UniqueFd pidfd(pidfd_raw);
  Guard reap([&] { (void)host::kill_and_reap(pidfd.get(), true, std::chrono::seconds(5)); });
  out_w.reset();
  err_w.reset();
  ReaderChildError ce{};
  ssize_t n;
  do n = ::read(err_r.get(), &ce, sizeof ce);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof ce)) {
    size_t step =
        std::min<size_t>(static_cast<size_t>(std::max(ce.step, 0)), std::size(kReaderSteps) - 1);
    return fail(
        Error::sys(std::string("starting the disk reader: ") + kReaderSteps[step], "", ce.err));
  }

  // The listing, capped and with a deadline.
  auto deadline = Clock::now() + reader.timeout;
  auto left_ms = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<int64_t>(ms.count(), 0));
  };
  auto timed_out = [&] {
    return Error(Code::kTimeout, "the disk reader did not finish within " +
                                     std::to_string(reader.timeout.count() / 1000) + " s (killed)");
  };
  std::string text;
  char buf[64 * 1024];
  for (;;) {
    pollfd p{out_r.get(), POLLIN, 0};
    int r = ::poll(&p, 1, left_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail_sys("poll", "the disk reader's output");
    if (r == 0) return fail(timed_out());
    ssize_t got = ::read(out_r.get(), buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return fail_sys("read", "the disk reader's output");
    if (got == 0) break;
    if (text.size() + static_cast<size_t>(got) > reader.max_output)
      return fail(Code::kResourceExhausted, "the disk reader's listing is larger than " +
                                                std::to_string(reader.max_output >> 20) +
                                                " MiB (killed)");
    text.append(buf, static_cast<size_t>(got));
  }
  for (;;) {
    pollfd p{pidfd.get(), POLLIN, 0};
    int r = ::poll(&p, 1, left_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail_sys("poll", "the disk reader's pidfd");
    if (r == 0) return fail(timed_out());
    break;
  }
  siginfo_t info{};
  if (::waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED) != 0)
    return fail_sys("waitid", "the disk reader");
  reap.dismiss();

  if (info.si_code != CLD_EXITED)
    return fail(Code::kProtocol, "the disk reader failed: " + reader_signal_words(info.si_status));
  if (info.si_status != 0 && info.si_status != 1)
    return fail(Code::kInternal,
                "the disk reader failed (exit status " + std::to_string(info.si_status) + ")");
  auto entries = parse_listing(text, reader.max_entries);
  if (entries && info.si_status != 0)
    return fail(Code::kProtocol, "the disk reader failed but its listing says it did not");
  return entries;
}

}  // namespace space::runtime::vm
