// SysV shared memory outlives its processes: creates segments up to the IPC namespace's
// limits and touches them, hoping the pages escape the memory cgroup or outlive the sandbox.
// Blocked by: the sandbox's private IPC namespace (destroyed with it), memory cgroup
// charging of shm pages (64M limit), and kernel.shmall there at half the memory limit, so that
// pinned segments can never leave the agent the OOM killer's only choice.
// space-attack: sandbox=fresh opts=--memory=64M timeout=60
#include <signal.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#include "../attack.h"

int main(void) {
  int pipefd[2];
  if (pipe(pipefd) != 0) broken("pipe");
  pid_t p = fork();
  if (p == 0) {
    close(pipefd[0]);
    for (int mib = 16; mib <= 512; mib += 16) {
      int id = shmget(IPC_PRIVATE, 16u << 20, IPC_CREAT | 0600);
      if (id < 0) _exit(2);
      char* m = shmat(id, NULL, 0);
      if (m == (void*)-1) _exit(3);
      memset(m, 0x66, 16u << 20);
      (void)!write(pipefd[1], &mib, sizeof mib);
    }
    _exit(0);
  }
  close(pipefd[1]);
  int reached = 0, mib;
  while (read(pipefd[0], &mib, sizeof mib) == sizeof mib) reached = mib;
  waitpid(p, NULL, 0);
  if (reached > 80)
    escaped("%d MiB of SysV shm touched with a 64 MiB limit", reached);
  else
    note("SysV shm stopped at %d MiB", reached);
  finish();
}
