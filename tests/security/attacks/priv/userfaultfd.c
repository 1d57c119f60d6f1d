// Creates a userfaultfd, the classic way to freeze a kernel copy_from_user mid-way and win a
// race in an exploit; also through /dev/userfaultfd.
// Blocked by: seccomp refuses userfaultfd (EPERM); /dev/userfaultfd is not in /dev.
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  refused("userfaultfd(O_CLOEXEC)", syscall(SYS_userfaultfd, O_CLOEXEC), EPERM, 0);
  refused("userfaultfd(UFFD_USER_MODE_ONLY)", syscall(SYS_userfaultfd, O_CLOEXEC | 1), EPERM, 0);
  refused("open(/dev/userfaultfd)", open("/dev/userfaultfd", O_RDWR | O_CLOEXEC), ENOENT, 0);
  finish();
}
