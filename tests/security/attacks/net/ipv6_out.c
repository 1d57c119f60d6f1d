// Reaches out over IPv6, which setups that only think of IPv4 forget: public resolvers, ULA
// and link-local addresses, IPv4-mapped addresses (an IPv4 exit through an AF_INET6 socket),
// and the host's global and ULA addresses.
// Blocked by: the namespace's only interface is `lo` (ENETUNREACH / EADDRNOTAVAIL).
// space-attack: sandbox=shared
#include "net_common.h"

int main(void) {
  const char* targets[] = {
      "2001:4860:4860::8888", "2606:4700:4700::1111",   "fd00::1",         "fd00::2", "fe80::1",
      "::ffff:8.8.8.8",       "::ffff:169.254.169.254", "64:ff9b::808:808"};
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; ++i) {
    int err = try_connect(AF_INET6, SOCK_STREAM, targets[i], 443, 1500);
    if (err == 0)
      escaped("connected to [%s]:443", targets[i]);
    else
      note("[%s] %s", targets[i], errname(err));
  }
  finish();
}
