// Opens AF_VSOCK (the path to a hypervisor or the host on VMs) and AF_ALG (kernel crypto API,
// a source of several local privilege escalations), then AF_KEY, AF_RDS, AF_TIPC and other
// rarely used families that autoload modules.
// Blocked by: seccomp answers AF_VSOCK and AF_ALG with EAFNOSUPPORT; the other families are
// either not built or need capabilities the sandbox lacks.
// space-attack: sandbox=shared
#include <sys/socket.h>

#include "../attack.h"

int main(void) {
  refused("socket(AF_VSOCK)", socket(AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT, 0);
  refused("socket(AF_ALG)", socket(AF_ALG, SOCK_SEQPACKET, 0), EAFNOSUPPORT, 0);
  refused("socket(AF_KEY)", socket(AF_KEY, SOCK_RAW, 2), EPERM, EAFNOSUPPORT, 0);
  int fams[] = {AF_RDS, AF_TIPC, AF_CAN, AF_BLUETOOTH, AF_X25, AF_AX25, AF_ATMPVC};
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; ++i) {
    int s = socket(fams[i], SOCK_SEQPACKET, 0);
    if (s >= 0) {
      note("socket(family %d) opened (harmless without capabilities)", fams[i]);
      close(s);
    } else {
      note("socket(family %d): %s", fams[i], errname(errno));
    }
  }
  finish();
}
