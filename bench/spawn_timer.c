// spawn_timer: times N runs of a command, each a plain fork + execvp + waitpid, and prints one
// latency per line in microseconds. The benchmark uses it both for the process-creation floor
// (`spawn_timer 100 /bin/true`) and for end-to-end CLI runs (`spawn_timer 100 space run -- true`),
// so both are measured by the same clock with the same client overhead.
// Exits 1 (after printing what it measured) if any run exits non-zero.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s N CMD [ARGS...]\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[1]);
  int failed = 0;
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 2;
    }
    if (pid == 0) {
      execvp(argv[2], argv + 2);
      _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) {
      perror("waitpid");
      return 2;
    }
    double t1 = now_us();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    printf("%.1f\n", t1 - t0);
  }
  if (failed) fprintf(stderr, "spawn_timer: %d of %d runs failed\n", failed, n);
  return failed ? 1 : 0;
}
