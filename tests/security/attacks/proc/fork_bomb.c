// A fork bomb: every child forks again as fast as it can. The sandbox's pids cgroup (64 here)
// must stop it with EAGAIN long before the host's pid space or process table feels it. The
// bomb's processes do not exit, so a scan of /proc once it stalls counts them; the runner also
// reads the pids cgroup from the host (verify=pids_limit), then destroys the sandbox and checks
// that nothing of it is left.
// Blocked by: the pids controller of the sandbox's cgroup.
// space-attack: sandbox=fresh opts=--pids=64,--memory=256M timeout=60 verify=pids_limit
#include <signal.h>

#include "../attack.h"

int main(void) {
  int pipefd[2];
  if (pipe(pipefd) != 0) broken("pipe");
  pid_t leader = fork();
  if (leader == 0) {
    setpgid(0, 0);
    close(pipefd[0]);
    for (;;) {
      pid_t p = fork();
      if (p < 0) {
        if (errno == EAGAIN) (void)!write(pipefd[1], "E", 1);
        usleep(1000);
      } else if (p == 0) {
        continue;  // the child keeps forking too
      }
    }
  }
  close(pipefd[1]);
  char c;
  ssize_t n = read(pipefd[0], &c, 1);  // first EAGAIN seen by any bomb process
  usleep(300000);
  int procs = 0;
  char buf[64];
  for (int pid = 2; pid < 100000 && procs < 100000; ++pid) {
    char p[32];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    if (read_small(p, buf, sizeof buf) > 0) ++procs;
  }
  kill(-leader, SIGKILL);
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  if (n != 1)
    escaped("fork never failed");
  else if (procs > 70)
    escaped("%d processes: the pids limit (64) did not hold", procs);
  else
    note("fork hit EAGAIN; %d processes at the peak (limit 64)", procs);
  finish();
}
