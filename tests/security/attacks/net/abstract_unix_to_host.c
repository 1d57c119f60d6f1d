// Connects to host services over Unix sockets: an abstract socket the runner listens on in the
// host's network namespace (abstract names are per network namespace, and host tools such as
// X11, containerd shims and dbus have used them), and a path socket in the runner's temp dir.
// Blocked by: the sandbox's own network namespace (ECONNREFUSED for the abstract name) and
// mount namespace (the path does not exist: ENOENT). The runner records any connection.
// space-attack: sandbox=shared
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "../attack.h"

static void try_unix(const char* name, int abstract) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t len = strlen(name);
  if (len + 2 > sizeof a.sun_path) broken("name too long");
  memcpy(a.sun_path + (abstract ? 1 : 0), name, len);
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (abstract ? 1 : 1));
  char what[160];
  snprintf(what, sizeof what, "connect(%s%s)", abstract ? "@" : "", name);
  refused(what, connect(s, (struct sockaddr*)&a, alen), ECONNREFUSED, ENOENT, 0);
  close(s);
}

int main(void) {
  try_unix(env_or("SPACE_HOST_ABSTRACT", "space-sec-missing"), 1);
  try_unix(env_or("SPACE_HOST_UNIX", "/nonexistent"), 0);
  try_unix("/run/dbus/system_bus_socket", 0);
  try_unix("/run/containerd/containerd.sock", 0);
  try_unix("/var/run/docker.sock", 0);
  finish();
}
