// Opens AF_PACKET sockets (link-layer sniffing and injection; a frequent source of kernel
// CVEs): SOCK_RAW and SOCK_DGRAM, all protocols.
// Blocked by: CAP_NET_RAW is not in the sandbox's set (EPERM).
// space-attack: sandbox=shared
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <sys/socket.h>

#include "../attack.h"

int main(void) {
  refused("socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)", socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)),
          EPERM, 0);
  refused("socket(AF_PACKET, SOCK_DGRAM, ETH_P_IP)", socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP)),
          EPERM, 0);
  refused("socket(AF_PACKET, SOCK_PACKET)", socket(AF_PACKET, SOCK_PACKET, htons(ETH_P_ALL)), EPERM,
          EINVAL, 0);
  finish();
}
