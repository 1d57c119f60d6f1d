// Re-enables core dumps: raise RLIMIT_CORE's soft and hard limits, then crash a child. With a
// piped core_pattern on the host (systemd-coredump, apport) a crash makes the host run its
// crash handler as root on data the sandbox controls.
// Blocked by: the launcher sets RLIMIT_CORE to 0/0 and sandbox root lacks CAP_SYS_RESOURCE
// (EPERM); /proc/sys/kernel/core_pattern is read-only.
// space-attack: sandbox=shared
#include <signal.h>
#include <sys/resource.h>

#include "../attack.h"

int main(void) {
  struct rlimit lim;
  getrlimit(RLIMIT_CORE, &lim);
  note("RLIMIT_CORE %llu/%llu", (unsigned long long)lim.rlim_cur, (unsigned long long)lim.rlim_max);
  struct rlimit inf = {RLIM_INFINITY, RLIM_INFINITY};
  refused("setrlimit(RLIMIT_CORE, unlimited/unlimited)", setrlimit(RLIMIT_CORE, &inf), EPERM, 0);
  struct rlimit soft = {RLIM_INFINITY, lim.rlim_max};
  if (lim.rlim_max != 0) {
    if (setrlimit(RLIMIT_CORE, &soft) == 0)
      escaped("RLIMIT_CORE soft limit raised to %llu", (unsigned long long)lim.rlim_max);
  }
  mkdir("/tmp/coredir", 0777);
  if (chdir("/tmp/coredir") != 0) broken("chdir");
  pid_t p = fork();
  if (p == 0) {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    _exit(0);
  }
  int status;
  waitpid(p, &status, 0);
  if (WIFSIGNALED(status) && WCOREDUMP(status))
    escaped("the crashing child dumped core");
  else
    note("crash without a core dump");
  finish();
}
