// Reaches the outside world over IPv4: public resolvers, the cloud metadata service
// (169.254.169.254), private ranges, the docker bridge, and the host's own addresses.
// Blocked by: the sandbox's network namespace holds only `lo` and has no route out: every
// connect fails at once with ENETUNREACH.
// space-attack: sandbox=shared
#include "net_common.h"

int main(void) {
  const char* targets[] = {"1.1.1.1",     "8.8.8.8",    "169.254.169.254", "10.0.0.1",
                           "192.168.1.1", "172.17.0.1", "192.0.2.1",       "100.64.0.1"};
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; ++i) {
    expect_no_connect(AF_INET, targets[i], 80);
  }
  char ips[512];
  snprintf(ips, sizeof ips, "%s", env_or("SPACE_HOST_IPS", ""));
  char* save = NULL;
  for (char* ip = strtok_r(ips, ",", &save); ip; ip = strtok_r(NULL, ",", &save)) {
    expect_no_connect(strchr(ip, ':') ? AF_INET6 : AF_INET, ip, 22);
  }
  finish();
}
