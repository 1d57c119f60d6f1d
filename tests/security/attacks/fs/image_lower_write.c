// Changes the image's files in every way that might reach the shared, read-only image below
// the overlay (and so every other sandbox): writes and truncates, a hard link written through,
// chmod/chown, rename and unlink of image files, and a hard link to a host binary on /usr.
// Blocked by: overlayfs copies a lower file up before any change, the image rootfs is an
// id-mapped read-only mount, /usr is a different (read-only) mount (EXDEV). The runner checks
// the image's files on the host afterwards.
// space-attack: sandbox=fresh verify=image
#include "../attack.h"

int main(void) {
  int fd = open("/etc/passwd", O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) broken("open /etc/passwd: %s", strerror(errno));
  if (write(fd, "pwned:x:0:0::/:/bin/sh\n", 23) != 23) broken("write: %s", strerror(errno));
  close(fd);
  note("appended to /etc/passwd (copy-up)");
  if (truncate("/etc/hosts", 0) == 0) note("truncated /etc/hosts (copy-up)");
  if (link("/etc/group", "/tmp/group-link") == 0) {
    fd = open("/tmp/group-link", O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0) {
      (void)!write(fd, "pwned:x:0:\n", 11);
      close(fd);
    }
    note("hard link to /etc/group written through");
  }
  (void)chmod("/etc/hostname", 06777);
  (void)chown("/etc/hostname", 1234, 1234);
  (void)rename("/etc/shadow", "/tmp/shadow-moved");
  (void)unlink("/etc/nsswitch.conf");
  refused("link(/usr/bin/sleep)", link("/usr/bin/sleep", "/tmp/sleep-link"), EXDEV, EPERM, 0);
  refused("linkat(/usr/bin/env via /proc/self/fd)", ({
            int pfd = open("/usr/bin/env", O_RDONLY | O_CLOEXEC);
            char p[64];
            snprintf(p, sizeof p, "/proc/self/fd/%d", pfd);
            linkat(AT_FDCWD, p, AT_FDCWD, "/tmp/env-link", AT_SYMLINK_FOLLOW);
          }),
          EXDEV, EPERM, ENOENT, 0);
  finish();
}
