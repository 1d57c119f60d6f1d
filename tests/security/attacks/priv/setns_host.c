// Joins other namespaces: the agent's (PID 1) through /proc/1/ns/*, its own namespaces'
// parents via ioctl(NS_GET_PARENT / NS_GET_USERNS), and setns on every namespace fd it can
// open.
// Blocked by: seccomp refuses setns (EPERM); the agent's ns links are closed (non-dumpable);
// a namespace's owner (the host's user namespace) is out of reach.
// space-attack: sandbox=shared
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>

#include "../attack.h"

int main(void) {
  const char* types[] = {"user", "mnt", "net", "pid", "uts", "ipc", "cgroup", "time"};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) {
    char p[64], what[96];
    snprintf(p, sizeof p, "/proc/1/ns/%s", types[i]);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    snprintf(what, sizeof what, "open(%s)", p);
    if (fd >= 0) {
      snprintf(what, sizeof what, "setns(%s)", p);
      refused(what, setns(fd, 0), EPERM, 0);
      close(fd);
    } else {
      refused(what, fd, EACCES, EPERM, 0);
    }
    snprintf(p, sizeof p, "/proc/self/ns/%s", types[i]);
    fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    int parent = ioctl(fd, NS_GET_USERNS);
    if (parent >= 0) {
      snprintf(what, sizeof what, "setns(owner of own %s ns)", types[i]);
      refused(what, setns(parent, CLONE_NEWUSER), EPERM, 0);
      close(parent);
    } else {
      note("NS_GET_USERNS(%s): %s", types[i], errname(errno));
    }
    close(fd);
  }
  int userns = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
  int parent = ioctl(userns, NS_GET_PARENT);
  refused("NS_GET_PARENT(own user ns)", parent, EPERM, 0);
  finish();
}
