// Kills the agent (PID 1) to break the sandbox's control channel or orphan its processes:
// SIGKILL, SIGTERM, SIGSEGV, SIGSTOP, via kill, pidfd and a process-group kill.
// Blocked by: PID 1 of a pid namespace ignores signals from inside it (without a handler;
// SIGKILL/SIGSTOP always). The runner's next exec in this sandbox proves the agent is alive.
// space-attack: sandbox=shared
#include <signal.h>

#include "../attack.h"

int main(void) {
  int sigs[] = {SIGKILL, SIGTERM, SIGSEGV, SIGSTOP, SIGINT, SIGHUP, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; ++i) kill(1, sigs[i]);
  int pidfd = (int)syscall(SYS_pidfd_open, 1, 0);
  if (pidfd >= 0) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
  usleep(200000);
  if (kill(1, 0) != 0) escaped("the agent is gone: %s", errname(errno));
  char state[512] = "";
  if (read_small("/proc/1/stat", state, sizeof state) > 0) {
    char* p = strrchr(state, ')');
    if (p && (p[2] == 'T' || p[2] == 't' || p[2] == 'Z'))
      escaped("the agent is in state %c", p[2]);
    else
      note("agent alive in state %c after 8 fatal signals", p ? p[2] : '?');
  }
  finish();
}
