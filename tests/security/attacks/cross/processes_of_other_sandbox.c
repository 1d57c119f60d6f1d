// Finds and signals another sandbox's processes: the victim runs `sleep 100000` and a Python
// listener; this attempt scans /proc for them, then tries every pid number up to 32768 with
// signal 0 and counts which exist outside its own process tree.
// Blocked by: each sandbox has its own pid namespace: the victim's processes do not exist
// here. The runner checks they are alive afterwards.
// space-attack: sandbox=shared
#include <dirent.h>
#include <signal.h>

#include "../attack.h"

int main(void) {
  DIR* d = opendir("/proc");
  struct dirent* e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char p[64], cmd[256] = "";
    snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
    ssize_t n = read_small(p, cmd, sizeof cmd);
    for (ssize_t i = 0; i < n; ++i)
      if (!cmd[i]) cmd[i] = ' ';
    if (strstr(cmd, "victim.py") || strstr(cmd, "sleep 100000"))
      escaped("the victim's process is visible: %s %s", e->d_name, cmd);
  }
  if (d) closedir(d);
  int exist = 0;
  for (int pid = 2; pid < 32768; ++pid) exist += kill(pid, 0) == 0;
  note("%d pids exist in this namespace, none of them the victim's", exist);
  finish();
}
