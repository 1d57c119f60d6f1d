// Opens raw IP sockets (spoofing, sniffing, ICMP tunnels): SOCK_RAW for ICMP, TCP, UDP and
// IPPROTO_RAW, over IPv4 and IPv6.
// Blocked by: CAP_NET_RAW is not in the sandbox's set (EPERM).
// space-attack: sandbox=shared
#include <netinet/in.h>
#include <sys/socket.h>

#include "../attack.h"

int main(void) {
  int protos[] = {IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_RAW};
  for (size_t i = 0; i < 4; ++i) {
    char what[64];
    snprintf(what, sizeof what, "socket(AF_INET, SOCK_RAW, %d)", protos[i]);
    refused(what, socket(AF_INET, SOCK_RAW, protos[i]), EPERM, 0);
  }
  refused("socket(AF_INET6, SOCK_RAW, ICMPV6)", socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6), EPERM,
          0);
  finish();
}
