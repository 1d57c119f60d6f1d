// Allocates and touches far more memory than the sandbox's limit (64M): 512 MiB in 8 MiB
// steps, in a child. The memory cgroup must OOM-kill it (or make allocation fail) near the
// limit, without touching host memory; the runner checks the host afterwards.
// Blocked by: the memory cgroup (no swap).
// space-attack: sandbox=fresh opts=--memory=64M timeout=60
#include <signal.h>
#include <sys/mman.h>

#include "../attack.h"

int main(void) {
  int pipefd[2];
  if (pipe(pipefd) != 0) broken("pipe");
  pid_t p = fork();
  if (p == 0) {
    close(pipefd[0]);
    for (int mib = 8; mib <= 512; mib += 8) {
      char* m = mmap(NULL, 8 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) _exit(3);
      memset(m, 0x5a, 8 << 20);
      (void)!write(pipefd[1], &mib, sizeof mib);
    }
    _exit(0);
  }
  close(pipefd[1]);
  int reached = 0, mib;
  while (read(pipefd[0], &mib, sizeof mib) == sizeof mib) reached = mib;
  int status;
  waitpid(p, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    escaped("a child held 512 MiB with a 64 MiB limit");
  } else if (reached > 64) {
    escaped("a child touched %d MiB with a 64 MiB limit", reached);
  } else {
    note("child stopped at %d MiB (%s %d)", reached, WIFSIGNALED(status) ? "signal" : "exit",
         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  finish();
}
