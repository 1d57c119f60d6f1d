// Reaches spaced's own API from inside (and with it every sandbox and the host): its socket
// path as the runner started it, the default /run/space/space.sock, and any listening Unix
// socket with "space" in /proc/net/unix.
// Blocked by: the socket lives in the host's mount namespace, which the sandbox cannot see
// (ENOENT); /proc/net/unix lists only the sandbox's network namespace.
// space-attack: sandbox=shared
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "../attack.h"

static void try_path(const char* path) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  char what[160];
  snprintf(what, sizeof what, "connect(%s)", path);
  refused(what, connect(s, (struct sockaddr*)&a, sizeof a), ENOENT, 0);
  close(s);
}

int main(void) {
  try_path(env_or("SPACE_DAEMON_SOCKET", "/nonexistent"));
  try_path("/run/space/space.sock");
  FILE* f = fopen("/proc/net/unix", "re");
  if (f) {
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
      if (strstr(line, "space") && strstr(line, ".sock")) escaped("visible: %s", line);
      ++n;
    }
    fclose(f);
    note("/proc/net/unix lists %d lines, no daemon socket", n - 1);
  }
  finish();
}
