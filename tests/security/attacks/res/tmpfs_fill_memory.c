// Uses the writable layer (a tmpfs) as memory the cgroup does not see: writes 512 MiB to /tmp
// with a memory limit of 64M and a larger disk limit. tmpfs pages are charged to the
// sandbox's memory cgroup, so the writer must be stopped near 64 MiB: a tmpfs page that cannot
// be charged makes the cgroup's OOM killer act (the writer volunteers with oom_score_adj 1000,
// and the file is removed at once so the sandbox survives).
// Blocked by: memory cgroup accounting of tmpfs pages.
// space-attack: sandbox=fresh opts=--memory=64M,--disk=1G timeout=60
#include <signal.h>

#include "../attack.h"

static void set_oom_score_adj(const char* v) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!write(fd, v, strlen(v));
    close(fd);
  }
}

int main(void) {
  set_oom_score_adj("900");  // before the agent, after the writer
  int pipefd[2];
  if (pipe(pipefd) != 0) broken("pipe");
  pid_t p = fork();
  if (p == 0) {
    set_oom_score_adj("1000");
    close(pipefd[0]);
    static char block[1 << 20];
    memset(block, 0x5a, sizeof block);
    int fd = open("/tmp/fill", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) _exit(2);
    for (int mib = 1; mib <= 512; ++mib) {
      if (write(fd, block, sizeof block) != (ssize_t)sizeof block) _exit(3);
      (void)!write(pipefd[1], &mib, sizeof mib);
    }
    _exit(0);
  }
  close(pipefd[1]);
  int reached = 0, mib;
  while (read(pipefd[0], &mib, sizeof mib) == sizeof mib) reached = mib;
  unlink("/tmp/fill");
  int status;
  waitpid(p, &status, 0);
  if (reached > 80)
    escaped("%d MiB written to tmpfs with a 64 MiB memory limit", reached);
  else
    note("writer stopped at %d MiB (%s)", reached,
         WIFSIGNALED(status) ? "OOM-killed" : "write failed");
  finish();
}
