// Walks out through /proc magic links: /proc/1/root and /proc/1/cwd (the agent's view),
// /proc/self/root/.., /proc/<pid>/root of every visible process, and "..". Any of them
// leading to the host's root would expose the host canary.
// Blocked by: the agent's /proc entries are closed (non-dumpable), every process shares the
// sandbox's root, and ".." of the root is the root.
// space-attack: sandbox=shared
#include <dirent.h>

#include "../attack.h"

static void try_dir(const char* path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    note("%s: %s", path, errname(errno));
    return;
  }
  sees_host_canary(fd, path);
  close(fd);
}

int main(void) {
  try_dir("/proc/1/root");
  try_dir("/proc/1/cwd");
  try_dir("/proc/self/root/..");
  try_dir("/proc/self/root/../../../..");
  try_dir("/..");
  DIR* d = opendir("/proc");
  struct dirent* e;
  int seen = 0;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char p[64];
    snprintf(p, sizeof p, "/proc/%s/root", e->d_name);
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    ++seen;
    sees_host_canary(fd, p);
    close(fd);
  }
  if (d) closedir(d);
  note("%d /proc/*/root links inspected, none reaches the host", seen);
  finish();
}
