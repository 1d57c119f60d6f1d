// Signals host processes by their host pid numbers (the runner's canary process and the
// daemon, passed in): kill, pidfd_open + pidfd_send_signal, and tgkill.
// Blocked by: host pids do not exist in the sandbox's pid namespace (ESRCH) — or name an
// unrelated sandbox process. The runner verifies the canary process and the daemon live on.
// space-attack: sandbox=shared
#include <signal.h>

#include "../attack.h"

static void hit(int pid, const char* who) {
  if (pid <= 1) return;
  char p[64], comm[64] = "";
  snprintf(p, sizeof p, "/proc/%d/comm", pid);
  if (read_small(p, comm, sizeof comm) > 0) {
    note("pid %d exists here as %.*s: not %s, leaving it alone", pid, (int)strcspn(comm, "\n"),
         comm, who);
    return;
  }
  char what[96];
  snprintf(what, sizeof what, "kill(%s %d, 0)", who, pid);
  refused(what, kill(pid, 0), ESRCH, 0);
  snprintf(what, sizeof what, "pidfd_open(%s %d)", who, pid);
  refused(what, syscall(SYS_pidfd_open, pid, 0), ESRCH, 0);
  snprintf(what, sizeof what, "tgkill(%s %d, SIGKILL)", who, pid);
  refused(what, syscall(SYS_tgkill, pid, pid, SIGKILL), ESRCH, 0);
  snprintf(what, sizeof what, "kill(%s %d, SIGKILL)", who, pid);
  refused(what, kill(pid, SIGKILL), ESRCH, 0);
}

int main(void) {
  hit(atoi(env_or("SPACE_CANARY_PID", "0")), "host canary");
  hit(atoi(env_or("SPACE_DAEMON_PID", "0")), "daemon");
  finish();
}
