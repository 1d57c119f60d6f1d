// Looks for file descriptors leaked into the sandbox (a host directory, the daemon's socket,
// the agent's channel) in this process and in every process it can inspect, and tries to
// climb out of any directory fd with fchdir + "..".
// Blocked by: the launcher closes everything but the agent's fds 0-6, the agent gives execs
// only stdin/stdout/stderr, and /proc/1/fd is closed to sandbox processes (non-dumpable agent).
// space-attack: sandbox=shared
#include <dirent.h>

#include "../attack.h"

static int suspicious = 0;

static void inspect_fd(const char* dir, const char* name) {
  char link[512], target[512];
  snprintf(link, sizeof link, "%s/%s", dir, name);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n < 0) return;
  target[n] = '\0';
  if (strncmp(target, "pipe:", 5) == 0 || strcmp(target, "/dev/null") == 0 ||
      strncmp(target, "/proc/", 6) == 0 || strncmp(target, "/dev/pts/", 9) == 0 ||
      strncmp(target, "anon_inode:", 11) == 0) {
    return;
  }
  // Sockets held by sandbox processes must not be the daemon's: a sandbox-side socket is fine
  // only if we can tell it is local. A directory fd is the dangerous kind.
  int fd = open(link, O_RDONLY | O_CLOEXEC | O_DIRECTORY);
  if (fd >= 0) {
    note("%s -> %s is a directory", link, target);
    ++suspicious;
    if (fchdir(fd) == 0) {
      for (int i = 0; i < 64; ++i) (void)chdir("..");
      sees_host_canary(AT_FDCWD, link);
    }
    sees_host_canary(fd, link);
    close(fd);
  } else if (strncmp(target, "socket:", 7) == 0) {
    note("%s -> %s", link, target);
  }
}

int main(void) {
  int self_fds = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) broken("opendir /proc/self/fd: %s", strerror(errno));
  int own = dirfd(d);
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    int fd = atoi(e->d_name);
    if (fd == own) continue;
    ++self_fds;
    if (fd > 2) escaped("this exec holds fd %d beyond stdio", fd);
  }
  closedir(d);
  note("this exec holds %d fds (stdio only)", self_fds);
  refused("opendir(/proc/1/fd)", open("/proc/1/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC), EACCES,
          EPERM, 0);
  DIR* proc = opendir("/proc");
  while (proc && (e = readdir(proc))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%s/fd", e->d_name);
    DIR* fds = opendir(dir);
    if (!fds) continue;
    struct dirent* f;
    while ((f = readdir(fds))) {
      if (f->d_name[0] != '.') inspect_fd(dir, f->d_name);
    }
    closedir(fds);
  }
  if (proc) closedir(proc);
  if (suspicious) note("%d directory fds found, none leads to the host", suspicious);
  finish();
}
