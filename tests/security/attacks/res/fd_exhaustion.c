// Opens file descriptors until the kernel refuses, and tries to lift RLIMIT_NOFILE's hard
// limit: the host's file table must not be the limit that stops it.
// Blocked by: RLIMIT_NOFILE set by the launcher (never above the daemon's) and no
// CAP_SYS_RESOURCE to raise the hard limit (EPERM).
// space-attack: sandbox=shared
#include <sys/resource.h>

#include "../attack.h"

int main(void) {
  struct rlimit lim;
  getrlimit(RLIMIT_NOFILE, &lim);
  note("RLIMIT_NOFILE %llu/%llu", (unsigned long long)lim.rlim_cur,
       (unsigned long long)lim.rlim_max);
  struct rlimit more = {lim.rlim_max + 1000000, lim.rlim_max + 1000000};
  refused("setrlimit(NOFILE, hard + 1e6)", setrlimit(RLIMIT_NOFILE, &more), EPERM, 0);
  struct rlimit max = {lim.rlim_max, lim.rlim_max};
  setrlimit(RLIMIT_NOFILE, &max);
  int n = 0, err = 0;
  for (;;) {
    int fd = open("/dev/null", O_RDONLY);
    if (fd < 0) {
      err = errno;
      break;
    }
    ++n;
    if (n > 2000000) break;
  }
  if (err != EMFILE)
    escaped("stopped by %s, not the per-process limit, after %d fds", errname(err), n);
  else if ((rlim_t)n + 3 > lim.rlim_max)
    escaped("%d fds with a hard limit of %llu", n, (unsigned long long)lim.rlim_max);
  else
    note("EMFILE after %d fds", n);
  finish();
}
