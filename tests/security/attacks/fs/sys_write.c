// Writes to /sys: uevent_helper (runs a program as host root on the next uevent), the
// cgroup tree, kernel knobs, and creating files in /sys itself.
// Blocked by: /sys is an empty read-only tmpfs; a real sysfs cannot be mounted (seccomp and
// no CAP_SYS_ADMIN over the host-owned network namespace).
// space-attack: sandbox=shared
#include <sys/mount.h>

#include "../attack.h"

int main(void) {
  const char* paths[] = {"/sys/kernel/uevent_helper", "/sys/fs/cgroup/cgroup.procs",
                         "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/pwned"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; ++i) {
    char what[128];
    snprintf(what, sizeof what, "open(%s, O_WRONLY|O_CREAT)", paths[i]);
    int fd = open(paths[i], O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t n = write(fd, "x", 1);
      close(fd);
      escaped("%s opened for writing (write %zd)", paths[i], n);
      continue;
    }
    refused(what, fd, EROFS, ENOENT, EACCES, 0);
  }
  refused("mkdir(/sys/pwned)", mkdir("/sys/pwned", 0755), EROFS, EACCES, 0);
  mkdir("/tmp/sysfs", 0755);
  refused("mount(sysfs)", mount("sysfs", "/tmp/sysfs", "sysfs", 0, NULL), EPERM, 0);
  refused("mount(remount /sys rw)", mount(NULL, "/sys", NULL, MS_REMOUNT, NULL), EPERM, 0);
  finish();
}
