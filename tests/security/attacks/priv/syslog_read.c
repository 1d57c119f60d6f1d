// Reads the kernel log (host activity, kernel addresses for KASLR bypass) with syslog(2)
// actions READ_ALL and SIZE_BUFFER, /dev/kmsg and /proc/kmsg, and clears it to hide tracks.
// Blocked by: seccomp refuses syslog (EPERM); /dev/kmsg is not in /dev; /proc/kmsg needs
// CAP_SYSLOG in the host's user namespace.
// space-attack: sandbox=shared
#include <sys/klog.h>

#include "../attack.h"

int main(void) {
  char buf[4096];
  refused("syslog(READ_ALL)", klogctl(3, buf, sizeof buf), EPERM, 0);
  refused("syslog(SIZE_BUFFER)", klogctl(10, NULL, 0), EPERM, 0);
  refused("syslog(CLEAR)", klogctl(5, NULL, 0), EPERM, 0);
  refused("open(/dev/kmsg)", open("/dev/kmsg", O_RDONLY | O_CLOEXEC), ENOENT, 0);
  int fd = open("/proc/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0)
      escaped("/proc/kmsg readable (%zd bytes)", n);
    else
      note("/proc/kmsg opened but read: %s", errname(errno));
    close(fd);
  } else {
    refused("open(/proc/kmsg)", fd, EPERM, EACCES, 0);
  }
  finish();
}
