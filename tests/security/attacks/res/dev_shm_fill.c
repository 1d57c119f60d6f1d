// Fills /dev/shm (a tmpfs of its own, which naive setups leave uncapped) with 256 MiB.
// Blocked by: /dev/shm is capped at min(64 MiB, the memory limit) and charged to the
// sandbox's memory cgroup.
// space-attack: sandbox=fresh opts=--memory=128M timeout=60
#include <signal.h>

#include "../attack.h"

int main(void) {
  int pipefd[2];
  if (pipe(pipefd) != 0) broken("pipe");
  pid_t p = fork();
  if (p == 0) {
    close(pipefd[0]);
    static char block[1 << 20];
    memset(block, 0x44, sizeof block);
    int fd = open("/dev/shm/fill", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) _exit(2);
    for (int mib = 1; mib <= 256; ++mib) {
      if (write(fd, block, sizeof block) != (ssize_t)sizeof block) _exit(3);
      (void)!write(pipefd[1], &mib, sizeof mib);
    }
    _exit(0);
  }
  close(pipefd[1]);
  int reached = 0, mib;
  while (read(pipefd[0], &mib, sizeof mib) == sizeof mib) reached = mib;
  waitpid(p, NULL, 0);
  unlink("/dev/shm/fill");
  if (reached > 64)
    escaped("%d MiB in /dev/shm (cap 64 MiB)", reached);
  else
    note("/dev/shm stopped at %d MiB", reached);
  finish();
}
