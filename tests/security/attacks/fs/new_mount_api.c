// The new mount API (Linux 5.2+), a second door to every mount operation: fsopen + fsconfig +
// fsmount + move_mount of a tmpfs, open_tree(OPEN_TREE_CLONE) of "/" (a detached copy of the
// root that could be moved elsewhere), fspick to reconfigure an existing mount, and
// mount_setattr to clear MOUNT_ATTR_RDONLY on /usr.
// Blocked by: seccomp refuses fsopen, fsconfig, fsmount, fspick, move_mount, open_tree,
// open_tree_attr and mount_setattr (EPERM).
// space-attack: sandbox=shared
#include <linux/mount.h>

#include "../attack.h"

int main(void) {
  refused("fsopen(tmpfs)", syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC), EPERM, 0);
  refused("fsconfig(-1)", syscall(SYS_fsconfig, -1, FSCONFIG_CMD_CREATE, NULL, NULL, 0), EPERM, 0);
  refused("fsmount(-1)", syscall(SYS_fsmount, -1, FSMOUNT_CLOEXEC, 0), EPERM, 0);
  refused("open_tree(/, OPEN_TREE_CLONE)",
          syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC), EPERM, 0);
  refused("open_tree(/usr)", syscall(SYS_open_tree, AT_FDCWD, "/usr", OPEN_TREE_CLOEXEC), EPERM, 0);
  refused("fspick(/usr)", syscall(SYS_fspick, AT_FDCWD, "/usr", FSPICK_CLOEXEC), EPERM, 0);
  mkdir("/tmp/mnt", 0755);
  refused("move_mount(/usr -> /tmp/mnt)",
          syscall(SYS_move_mount, AT_FDCWD, "/usr", AT_FDCWD, "/tmp/mnt", 0), EPERM, 0);
  struct mount_attr attr = {.attr_clr = MOUNT_ATTR_RDONLY};
  refused("mount_setattr(/usr, clear RDONLY)",
          syscall(SYS_mount_setattr, AT_FDCWD, "/usr", 0, &attr, sizeof attr), EPERM, 0);
  refused("open_tree_attr(/)", syscall(467, AT_FDCWD, "/", OPEN_TREE_CLONE, NULL, 0), EPERM, 0);
  finish();
}
