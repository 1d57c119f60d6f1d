// Reads the agent's binary through /proc/1/exe and /proc/1/map_files to tamper with it or
// study it, and opens /proc/1/mem for writing (patching the running agent, which holds the
// channel to the daemon).
// Blocked by: the agent is non-dumpable (EACCES on every /proc/1 handle needing ptrace
// access) and its memfd is execute-only.
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  refused("open(/proc/1/exe, O_RDONLY)", open("/proc/1/exe", O_RDONLY | O_CLOEXEC), EACCES, EPERM,
          0);
  refused("open(/proc/1/mem, O_RDWR)", open("/proc/1/mem", O_RDWR | O_CLOEXEC), EACCES, EPERM, 0);
  refused("open(/proc/1/mem, O_RDONLY)", open("/proc/1/mem", O_RDONLY | O_CLOEXEC), EACCES, EPERM,
          0);
  refused("opendir(/proc/1/map_files)", open("/proc/1/map_files", O_RDONLY | O_DIRECTORY), EACCES,
          EPERM, 0);
  char buf[256];
  ssize_t n = readlink("/proc/1/exe", buf, sizeof buf - 1);
  refused("readlink(/proc/1/exe)", n, EACCES, EPERM, 0);
  finish();
}
