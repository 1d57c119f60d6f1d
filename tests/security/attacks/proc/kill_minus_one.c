// kill(-1, SIGKILL) as sandbox root: signals every process the caller may signal. It must
// reach only the sandbox's own processes: never the host's (the runner's canary process, the
// daemon), never another sandbox's (the victim's listener and sleeper), never the agent.
// Blocked by: the pid namespace (-1 means "all processes in my namespace"); PID 1 of a
// namespace ignores signals from inside. The runner verifies all of them afterwards.
// space-attack: sandbox=fresh
#include <signal.h>

#include "../attack.h"

int main(void) {
  // Something of our own to kill, to prove the signal was delivered at all.
  pid_t mine = fork();
  if (mine == 0) {
    pause();
    _exit(0);
  }
  signal(SIGKILL, SIG_DFL);
  // kill(-1) skips the caller itself.
  long rc = kill(-1, SIGKILL);
  note("kill(-1, SIGKILL) = %ld (%s)", rc, rc ? errname(errno) : "ok");
  int status;
  waitpid(mine, &status, 0);
  if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) broken("own child not killed");
  note("own child killed; the runner checks the host, the victim and the agent");
  rc = kill(1, 0);
  note("agent still there: kill(1, 0) = %ld", rc);
  finish();
}
