// Talks to another sandbox's services over the local network stack: the victim listens on an
// abstract Unix socket and on 127.0.0.1:PORT inside its own sandbox and logs every contact.
// Blocked by: abstract Unix names and loopback are per network namespace, and each sandbox
// has its own. The runner checks the victim's log stayed empty.
// space-attack: sandbox=shared
#include <stddef.h>
#include <sys/un.h>

#include "../net/net_common.h"

int main(void) {
  const char* name = env_or("SPACE_VICTIM_ABSTRACT", "space-sec-none");
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t len = strlen(name);
  memcpy(a.sun_path + 1, name, len);
  refused("connect(@victim)",
          connect(s, (struct sockaddr*)&a,
                  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)),
          ECONNREFUSED, 0);
  close(s);
  int port = atoi(env_or("SPACE_VICTIM_TCP_PORT", "0"));
  if (!port) broken("SPACE_VICTIM_TCP_PORT not set");
  expect_no_connect(AF_INET, "127.0.0.1", port);
  finish();
}
