// Escapes teardown: daemonize by double fork + setsid, ignore SIGTERM/SIGHUP, rename itself,
// and keep a marked command line (space-sec-marker) so the runner can look for survivors on
// the host after `space rm`. Also tries to leave the sandbox's cgroup (there is no cgroupfs
// to write to) and to re-parent itself (PR_SET_CHILD_SUBREAPER games).
// Blocked by: destroying the sandbox kills PID 1 of its pid namespace, which takes every
// process of the namespace with it; the cgroups are removed.
// space-attack: sandbox=fresh
#include <signal.h>
#include <sys/prctl.h>

#include "../attack.h"

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "space-sec-marker") == 0) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    for (;;) pause();
  }
  pid_t p = fork();
  if (p == 0) {
    setsid();
    if (fork() == 0) {
      prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
      int fd = open("/dev/null", O_RDWR);
      dup2(fd, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      execl("/proc/self/exe", "space-sec-marker", "space-sec-marker", (char*)NULL);
      _exit(1);
    }
    _exit(0);
  }
  waitpid(p, NULL, 0);
  int fd = open("/sys/fs/cgroup/cgroup.procs", O_WRONLY | O_CLOEXEC);
  refused("open(/sys/fs/cgroup/cgroup.procs)", fd, ENOENT, EROFS, 0);
  usleep(100000);
  note("daemonized a marked process; the runner destroys the sandbox and looks for it");
  finish();
}
