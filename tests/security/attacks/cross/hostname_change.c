// Renames the machine (the host's, or another sandbox's, if UTS namespaces were shared):
// sethostname, setdomainname, and writes to /proc/sys/kernel/{hostname,domainname}.
// Blocked by: no CAP_SYS_ADMIN (EPERM) even over the sandbox's own UTS namespace; /proc/sys
// is read-only. The runner compares the host's hostname afterwards.
// space-attack: sandbox=shared verify=sysctl
#include "../attack.h"

int main(void) {
  refused("sethostname(pwned)", sethostname("pwned", 5), EPERM, 0);
  refused("setdomainname(pwned)", setdomainname("pwned", 5), EPERM, 0);
  int fd = open("/proc/sys/kernel/hostname", O_WRONLY | O_CLOEXEC);
  refused("open(/proc/sys/kernel/hostname, O_WRONLY)", fd, EROFS, EACCES, 0);
  char name[128];
  gethostname(name, sizeof name);
  if (strcmp(name, env_or("SPACE_SANDBOX", name)) != 0) escaped("hostname is now %s", name);
  finish();
}
