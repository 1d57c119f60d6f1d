// Reads PID 1's /proc entries for secrets or handles: environ, cmdline, maps, auxv, stack,
// syscall, fdinfo, cwd/root links, and the status of its channel fds.
// Blocked by: the agent is non-dumpable: every entry that needs ptrace-read access fails
// (EACCES/EPERM); the rest (cmdline, status) hold nothing secret.
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  const char* files[] = {"environ",  "maps", "auxv",        "stack", "syscall", "mem",
                         "fdinfo/3", "io",   "personality", "smaps", "pagemap", "timerslack_ns"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) {
    char p[64], what[96], buf[256];
    snprintf(p, sizeof p, "/proc/1/%s", files[i]);
    snprintf(what, sizeof what, "read(%s)", p);
    ssize_t n = read_small(p, buf, sizeof buf);
    if (n > 0) {
      escaped("%s readable (%zd bytes)", p, n);
    } else if (n == 0) {
      note("%s: empty", p);
    } else {
      refused(what, n, EACCES, EPERM, ENOENT, 0);
    }
  }
  char cmd[256];
  ssize_t n = read_small("/proc/1/cmdline", cmd, sizeof cmd);
  if (n > 0) note("/proc/1/cmdline readable (public by design): %zd bytes", n);
  finish();
}
