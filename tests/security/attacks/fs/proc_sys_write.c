// Writes host-wide kernel settings through /proc/sys: core_pattern (a pipe there runs a
// program as host root on the next crash), the hostname of the host, panic settings, and the
// namespaced ones too.
// Blocked by: /proc/sys is a read-only bind (EROFS) and sandbox root owns none of these
// files in the host's user namespace. The runner re-reads the host's values afterwards.
// space-attack: sandbox=shared verify=sysctl
#include "../attack.h"

int main(void) {
  const char* files[][2] = {
      {"/proc/sys/kernel/core_pattern", "|/tmp/pwn %p"},
      {"/proc/sys/kernel/hostname", "pwned"},
      {"/proc/sys/kernel/panic_on_oops", "1"},
      {"/proc/sys/vm/drop_caches", "3"},
      {"/proc/sys/kernel/modprobe", "/tmp/pwn"},
      {"/proc/sys/fs/suid_dumpable", "2"},
      {"/proc/sys/net/ipv4/ip_forward", "1"},
      {"/proc/sys/kernel/ns_last_pid", "30000"},
      {"/proc/sys/user/max_user_namespaces", "0"},
  };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) {
    char what[128];
    snprintf(what, sizeof what, "open(%s, O_WRONLY)", files[i][0]);
    int fd = open(files[i][0], O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      refused(what, fd, EROFS, EACCES, ENOENT, EPERM, 0);
      continue;
    }
    ssize_t n = write(fd, files[i][1], strlen(files[i][1]));
    close(fd);
    snprintf(what, sizeof what, "write(%s)", files[i][0]);
    refused(what, n, EROFS, EACCES, EPERM, EINVAL, 0);
  }
  finish();
}
