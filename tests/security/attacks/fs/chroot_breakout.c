// The classic chroot escape: chroot into a subdirectory while keeping a handle on the old
// root, then chdir("..") past it and chroot(".") again, hoping to land in the host's root.
// Blocked by: seccomp refuses chroot(2) (EPERM) although CAP_SYS_CHROOT is in the set; and
// the sandbox's root is a pivot_root'ed mount namespace with no host root above it anyway.
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  mkdir("/tmp/chroot-jail", 0755);
  int old_root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (old_root < 0) broken("open /: %s", strerror(errno));
  refused("chroot(/tmp/chroot-jail)", chroot("/tmp/chroot-jail"), EPERM, 0);
  // Whether or not chroot worked, walk up from the old root's fd and try again.
  if (fchdir(old_root) != 0) broken("fchdir: %s", strerror(errno));
  for (int i = 0; i < 64; ++i) (void)chdir("..");
  refused("chroot(\".\") after 64 x chdir(..)", chroot("."), EPERM, 0);
  sees_host_canary(AT_FDCWD, "cwd after chdir(..) x64");
  sees_host_canary(old_root, "the old root fd");
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  sees_host_canary(fd, "/");
  finish();
}
