// Looks for host processes: /proc must list only the sandbox's own, the runner's canary
// process (a host pid number) must not exist here, and /proc/<n>/cmdline of every visible
// pid must belong to the sandbox (no daemon, no host init).
// Blocked by: the sandbox's own pid namespace and a /proc mounted for it.
// space-attack: sandbox=shared
#include <dirent.h>

#include "../attack.h"

int main(void) {
  int canary = atoi(env_or("SPACE_CANARY_PID", "0"));
  int daemon = atoi(env_or("SPACE_DAEMON_PID", "0"));
  DIR* d = opendir("/proc");
  if (!d) broken("opendir /proc");
  struct dirent* e;
  int count = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    ++count;
    char p[64], cmd[512] = "";
    snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
    ssize_t n = read_small(p, cmd, sizeof cmd);
    for (ssize_t i = 0; i < n; ++i)
      if (cmd[i] == 0) cmd[i] = ' ';
    if (strstr(cmd, "spaced") || strstr(cmd, "systemd") || strstr(cmd, "sshd") ||
        strstr(cmd, "sleep 100000")) {
      escaped("host-looking process %s: %s", e->d_name, cmd);
    }
  }
  closedir(d);
  note("%d processes visible", count);
  if (count > 200) escaped("%d processes visible: looks like the host's /proc", count);
  char p[64], comm[64];
  if (canary > 1) {
    snprintf(p, sizeof p, "/proc/%d/cmdline", canary);
    if (read_small(p, comm, sizeof comm) > 0 && strstr(comm, "sleep")) {
      escaped("the host canary process %d is visible", canary);
    } else {
      note("host pid %d: not visible", canary);
    }
  }
  if (daemon > 1) {
    snprintf(p, sizeof p, "/proc/%d/comm", daemon);
    if (read_small(p, comm, sizeof comm) > 0 && strstr(comm, "spaced")) {
      escaped("the daemon (host pid %d) is visible", daemon);
    }
  }
  if (read_small("/proc/1/comm", comm, sizeof comm) > 0 && !strstr(comm, "space-agent") &&
      !strstr(comm, "memfd")) {
    escaped("pid 1 is %s, not the agent", comm);
  }
  finish();
}
