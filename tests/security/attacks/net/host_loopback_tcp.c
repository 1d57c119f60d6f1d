// Connects to services listening on the host's loopback (127.0.0.1 and ::1): the runner
// listens on both and records any connection. "localhost" inside must not be the host's.
// Blocked by: the sandbox's `lo` is its own (own network namespace): ECONNREFUSED.
// space-attack: sandbox=shared
#include "net_common.h"

int main(void) {
  int port = atoi(env_or("SPACE_HOST_TCP_PORT", "0"));
  int port6 = atoi(env_or("SPACE_HOST_TCP6_PORT", "0"));
  if (!port) broken("SPACE_HOST_TCP_PORT not set");
  expect_no_connect(AF_INET, "127.0.0.1", port);
  expect_no_connect(AF_INET, "127.0.0.2", port);
  if (port6) expect_no_connect(AF_INET6, "::1", port6);
  expect_no_connect(AF_INET6, "::ffff:127.0.0.1", port);
  finish();
}
