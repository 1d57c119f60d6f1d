// mount(2) in every form an escape uses: a tmpfs over /etc, a bind of / somewhere writable,
// remounting the read-only host binds (/usr) read-write, proc on a new directory (an unmasked
// view), and making mounts shared so they propagate to the host.
// Blocked by: seccomp refuses mount/umount2 (EPERM); no CAP_SYS_ADMIN.
// space-attack: sandbox=shared
#include <sys/mount.h>

#include "../attack.h"

int main(void) {
  mkdir("/tmp/m", 0755);
  refused("mount(tmpfs on /etc)", mount("tmpfs", "/etc", "tmpfs", 0, NULL), EPERM, 0);
  refused("mount(--bind / /tmp/m)", mount("/", "/tmp/m", NULL, MS_BIND | MS_REC, NULL), EPERM, 0);
  refused("mount(remount /usr rw)", mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL), EPERM,
          0);
  refused("mount(proc on /tmp/m)", mount("proc", "/tmp/m", "proc", 0, NULL), EPERM, 0);
  refused("mount(make / shared)", mount(NULL, "/", NULL, MS_SHARED | MS_REC, NULL), EPERM, 0);
  refused("mount(overlay)",
          mount("overlay", "/tmp/m", "overlay", 0, "lowerdir=/usr,upperdir=/tmp,workdir=/tmp"),
          EPERM, 0);
  int fd = open("/usr/space-sec-pwned", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  refused("create /usr/space-sec-pwned", fd, EROFS, EACCES, 0);
  finish();
}
