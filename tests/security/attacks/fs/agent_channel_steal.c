// Steals the agent's channel (fd 3) or the spare daemon end (fd 5) to impersonate the daemon,
// via /proc/1/fd, pidfd_getfd(2) and ptrace.
// Blocked by: the agent is non-dumpable and sandbox root lacks CAP_SYS_PTRACE, so every path
// that needs ptrace access to PID 1 fails with EACCES/EPERM.
// space-attack: sandbox=shared
#include <sys/ptrace.h>

#include "../attack.h"

int main(void) {
  for (int fd = 3; fd <= 6; ++fd) {
    char p[32], what[64];
    snprintf(p, sizeof p, "/proc/1/fd/%d", fd);
    snprintf(what, sizeof what, "open(%s)", p);
    refused(what, open(p, O_RDWR | O_CLOEXEC), EACCES, EPERM, ENOENT, 0);
  }
  int pidfd = (int)syscall(SYS_pidfd_open, 1, 0);
  if (pidfd < 0) {
    note("pidfd_open(1): %s", errname(errno));
  } else {
    for (int fd = 3; fd <= 6; ++fd) {
      char what[64];
      snprintf(what, sizeof what, "pidfd_getfd(agent, %d)", fd);
      refused(what, syscall(SYS_pidfd_getfd, pidfd, fd, 0), EPERM, EACCES, 0);
    }
    close(pidfd);
  }
  refused("ptrace(PTRACE_ATTACH, 1)", ptrace(PTRACE_ATTACH, 1, 0, 0), EPERM, 0);
  finish();
}
