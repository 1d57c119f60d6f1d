// Looks for the daemon's environment (where credentials live: API tokens, cloud keys) inside
// the sandbox. The runner starts spaced with a canary variable whose value begins with
// "SPCANARY"; this attempt searches its own environment, every readable /proc/*/environ and
// /proc/*/cmdline, and the agent's.
// Blocked by: the agent starts with an empty environment; execs get only the sandbox's
// configured variables.
// space-attack: sandbox=shared
#include <dirent.h>

#include "../attack.h"

extern char** environ;

static int search(const char* buf, size_t n) {
  for (size_t i = 0; i + 8 <= n; ++i)
    if (memcmp(buf + i, "SPCANARY", 8) == 0) return 1;
  return 0;
}

int main(void) {
  for (char** e = environ; *e; ++e) {
    if (search(*e, strlen(*e))) escaped("own environment holds %.40s", *e);
  }
  DIR* d = opendir("/proc");
  struct dirent* e;
  int read_ok = 0, denied = 0;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const char* files[] = {"environ", "cmdline"};
    for (int f = 0; f < 2; ++f) {
      char p[64];
      snprintf(p, sizeof p, "/proc/%s/%s", e->d_name, files[f]);
      static char buf[1 << 16];
      int fd = open(p, O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        ++denied;
        continue;
      }
      ssize_t n = read(fd, buf, sizeof buf);
      close(fd);
      if (n < 0) {
        ++denied;
        continue;
      }
      ++read_ok;
      if (search(buf, (size_t)n)) escaped("%s holds the daemon's canary", p);
    }
  }
  if (d) closedir(d);
  note("%d /proc environ/cmdline files searched, %d unreadable", read_ok, denied);
  finish();
}
