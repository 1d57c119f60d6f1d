// Looks for host devices reachable in the sandbox: the host's disks, /dev/mem, /dev/kmem,
// /dev/port, /dev/kmsg, /dev/fuse, /dev/net/tun, /dev/kvm, /dev/userfaultfd, and any device in
// /dev beyond the harmless set.
// Blocked by: /dev is a small tmpfs holding only null, zero, full, random, urandom, tty, a
// private devpts and /dev/shm.
// space-attack: sandbox=shared
#include <dirent.h>

#include "../attack.h"

int main(void) {
  const char* devs[] = {
      "/dev/sda",     "/dev/vda",         "/dev/nvme0n1",      "/dev/mem",
      "/dev/kmem",    "/dev/port",        "/dev/kmsg",         "/dev/fuse",
      "/dev/net/tun", "/dev/kvm",         "/dev/userfaultfd",  "/dev/console",
      "/dev/tty0",    "/dev/vhost-vsock", "/dev/loop-control", "/dev/mapper/control"};
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; ++i) {
    char what[96];
    snprintf(what, sizeof what, "open(%s)", devs[i]);
    int fd = open(devs[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
      escaped("%s opened", devs[i]);
      close(fd);
    } else {
      refused(what, fd, ENOENT, 0);
    }
  }
  const char* allowed[] = {"null", "zero", "full", "random", "urandom", "tty",   "pts",
                           "shm",  "ptmx", "fd",   "stdin",  "stdout",  "stderr"};
  DIR* d = opendir("/dev");
  if (!d) broken("opendir /dev: %s", strerror(errno));
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    int ok = 0;
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; ++i)
      ok |= !strcmp(e->d_name, allowed[i]);
    if (!ok) escaped("/dev/%s is present", e->d_name);
  }
  closedir(d);
  note("/dev holds only the harmless set");
  finish();
}
