// pivot_root and umount tricks to swap the sandbox's root for the host's or detach it: pivot
// into a tmp directory, lazily unmount "/" (which would reveal what lies under the overlay),
// and unmount the masks over /proc.
// Blocked by: seccomp (pivot_root, umount2: EPERM) and no CAP_SYS_ADMIN; the old root was
// detached at creation, so nothing of the host lies below "/".
// space-attack: sandbox=fresh
#include <sys/mount.h>

#include "../attack.h"

int main(void) {
  mkdir("/tmp/newroot", 0755);
  mkdir("/tmp/newroot/old", 0755);
  refused("pivot_root(/tmp/newroot, /tmp/newroot/old)",
          syscall(SYS_pivot_root, "/tmp/newroot", "/tmp/newroot/old"), EPERM, 0);
  refused("pivot_root(., .)", syscall(SYS_pivot_root, ".", "."), EPERM, 0);
  refused("umount2(/, MNT_DETACH)", umount2("/", MNT_DETACH), EPERM, 0);
  refused("umount2(/proc/keys)", umount2("/proc/keys", MNT_DETACH), EPERM, 0);
  refused("umount2(/usr)", umount2("/usr", MNT_DETACH), EPERM, 0);
  sees_host_canary(AT_FDCWD, "/ after the umount attempts");
  // The mount table must still hold the overlay root.
  char buf[4096];
  if (read_small("/proc/self/mounts", buf, sizeof buf) > 0 && strncmp(buf, "overlay / ", 10) != 0) {
    escaped("the root mount changed: %.60s", buf);
  }
  finish();
}
