// The reader's seccomp policy (confine.h): a closed allowlist, default kill. Each entry says
// why the walk needs it; the unit test tests/unit/upper_reader/confine_test.cc checks that a
// confined process is killed for open, socket and a read of another fd, and can still do the
// walk.
#include "upper_reader/confine.h"

#include <fcntl.h>
#include <seccomp.h>
#include <sys/prctl.h>

#include <cerrno>
#include <memory>
#include <vector>

namespace space::upper_reader {

Result<void> confine(int disk_fd) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return fail_sys("prctl", "PR_SET_NO_NEW_PRIVS");
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_KILL_PROCESS),
                                                       seccomp_release);
  if (!ctx) return fail(Code::kInternal, "seccomp_init failed");
  const auto fd = static_cast<scmp_datum_t>(disk_fd);
  struct Rule {
    uint32_t action;
    int nr;
    std::vector<scmp_arg_cmp> args;
  };
  const Rule rules[] = {
      // The disk: libext2fs's unix I/O reads it with pread64 (read after lseek as a fallback),
      // fstat's it and asks fcntl for its flags (unixfd_io_manager).
      {SCMP_ACT_ALLOW, SCMP_SYS(pread64), {SCMP_A0(SCMP_CMP_EQ, fd)}},
      {SCMP_ACT_ALLOW, SCMP_SYS(read), {SCMP_A0(SCMP_CMP_EQ, fd)}},
      {SCMP_ACT_ALLOW, SCMP_SYS(lseek), {SCMP_A0(SCMP_CMP_EQ, fd)}},
      {SCMP_ACT_ALLOW, SCMP_SYS(fstat), {SCMP_A0(SCMP_CMP_EQ, fd)}},
      // glibc's fstat: fstatat(fd, "", AT_EMPTY_PATH). With AT_EMPTY_PATH an absolute path
      // would still be looked up; only metadata, and the reader has no path it could use.
      {SCMP_ACT_ALLOW,
       SCMP_SYS(newfstatat),
       {SCMP_A0(SCMP_CMP_EQ, fd), SCMP_A3(SCMP_CMP_EQ, AT_EMPTY_PATH)}},
      {SCMP_ACT_ALLOW, SCMP_SYS(fcntl), {SCMP_A0(SCMP_CMP_EQ, fd), SCMP_A1(SCMP_CMP_EQ, F_GETFD)}},
      {SCMP_ACT_ALLOW, SCMP_SYS(fcntl), {SCMP_A0(SCMP_CMP_EQ, fd), SCMP_A1(SCMP_CMP_EQ, F_GETFL)}},
      // unix I/O asks a block device's properties (BLKDISCARDZEROES); a file has none.
      {SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), {}},
      // ext2fs_safe_getenv (E2FSPROGS_* variables; the environment is empty) first checks
      // that the process is not set-id and dumpable.
      {SCMP_ACT_ALLOW, SCMP_SYS(getuid), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(geteuid), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(getgid), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(getegid), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(prctl), {SCMP_A0(SCMP_CMP_EQ, PR_GET_DUMPABLE)}},
      // unix I/O syncs the disk when it closes it: nothing was written, so it is answered as
      // done without being done (ERRNO(0) returns 0).
      {SCMP_ACT_ERRNO(0), SCMP_SYS(fsync), {SCMP_A0(SCMP_CMP_EQ, fd)}},
      {SCMP_ACT_ERRNO(0), SCMP_SYS(fdatasync), {SCMP_A0(SCMP_CMP_EQ, fd)}},
      // ext2fs_close_free closes the disk.
      {SCMP_ACT_ALLOW, SCMP_SYS(close), {}},
      // The listing on stdout; stderr for the C library's last words.
      {SCMP_ACT_ALLOW, SCMP_SYS(write), {SCMP_A0(SCMP_CMP_EQ, 1)}},
      {SCMP_ACT_ALLOW, SCMP_SYS(write), {SCMP_A0(SCMP_CMP_EQ, 2)}},
      {SCMP_ACT_ALLOW, SCMP_SYS(writev), {SCMP_A0(SCMP_CMP_EQ, 2)}},
      // Memory (malloc), bounded by RLIMIT_AS.
      {SCMP_ACT_ALLOW, SCMP_SYS(brk), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(mmap), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(munmap), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(mremap), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(madvise), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(mprotect), {}},
      // The C library: locks, the clock, signal returns, the end.
      {SCMP_ACT_ALLOW, SCMP_SYS(futex), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(clock_gettime), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(rt_sigreturn), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(exit), {}},
      {SCMP_ACT_ALLOW, SCMP_SYS(exit_group), {}},
  };
  for (const Rule& r : rules) {
    int rc = seccomp_rule_add_array(ctx.get(), r.action, r.nr, static_cast<unsigned>(r.args.size()),
                                    r.args.empty() ? nullptr : r.args.data());
    if (rc < 0) return fail(Code::kInternal, "seccomp_rule_add: " + std::to_string(r.nr), -rc);
  }
  if (int rc = seccomp_load(ctx.get()); rc < 0)
    return fail(Code::kInternal, "seccomp_load failed", -rc);
  return {};
}

}  // namespace space::upper_reader
