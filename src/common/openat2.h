// openat2(2), which glibc (2.36) does not wrap: the one way the project opens a path inside a
// tree it does not trust (a sandbox's root, an image's rootfs, a snapshot being restored) with
// the kernel enforcing RESOLVE_IN_ROOT / RESOLVE_BENEATH / RESOLVE_NO_SYMLINKS.
#pragma once

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>

namespace space {

// The new fd, or -1 with errno: ENOSYS on a kernel before 5.6, EPERM or ENOSYS where a seccomp
// policy hides it (callers that have a fallback check for those). `flags` should include
// O_CLOEXEC; `mode` only matters with O_CREAT or O_TMPFILE.
inline int sys_openat2(int dirfd, const char* path, int flags, uint64_t resolve, mode_t mode = 0) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.mode = mode;
  how.resolve = resolve;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof how));
}

}  // namespace space
