// CVE-2019-5736-style: overwrite a host binary through /proc/PID/exe — the agent's (PID 1),
// a shim's (our parent), and a host binary run inside the sandbox (/usr/bin/sleep, bound
// read-only from the host). Also tries to reopen them writable through /proc/self/fd.
// Blocked by: the agent runs from a sealed execute-only memfd and is non-dumpable (EACCES on
// /proc/1/exe), host binaries are on read-only nosuid binds (EROFS/ETXTBSY). The runner
// also compares the hashes of spaced, space-agent and /usr/bin/sleep before and after.
// space-attack: sandbox=shared verify=binaries
#include <signal.h>

#include "../attack.h"

static void try_write(const char* path) {
  char what[128];
  snprintf(what, sizeof what, "open(%s, O_WRONLY)", path);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    // Opened: do not write garbage into a real binary if this really is one; a single
    // zero-length write proves write access without changing anything.
    escaped("%s succeeded", what);
    close(fd);
    return;
  }
  refused(what, fd, EACCES, ETXTBSY, EROFS, EPERM, 0);
  snprintf(what, sizeof what, "open(%s, O_RDWR)", path);
  fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    escaped("%s succeeded", what);
    close(fd);
    return;
  }
  refused(what, fd, EACCES, ETXTBSY, EROFS, EPERM, 0);
}

int main(void) {
  try_write("/proc/1/exe");
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/exe", getppid());
  try_write(p);
  pid_t child = fork();
  if (child == 0) {
    execl("/usr/bin/sleep", "sleep", "30", (char*)NULL);
    _exit(127);
  }
  usleep(200000);
  snprintf(p, sizeof p, "/proc/%d/exe", child);
  try_write(p);
  try_write("/usr/bin/sleep");
  // O_PATH handle then reopen through the magic link.
  int path_fd = open(p, O_PATH | O_CLOEXEC);
  if (path_fd >= 0) {
    char via[64];
    snprintf(via, sizeof via, "/proc/self/fd/%d", path_fd);
    try_write(via);
    close(path_fd);
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  finish();
}
