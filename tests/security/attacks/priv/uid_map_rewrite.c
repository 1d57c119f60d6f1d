// Rewrites the sandbox's uid/gid maps to map host root (uid 0) into the sandbox, or to widen
// the range; and switches to ids outside the mapped range (host root's 0 seen from outside
// would be an unmapped id here).
// Blocked by: the maps can be written once, by a process privileged over the parent user
// namespace (the daemon did); writes fail with EPERM. Unmapped ids: EINVAL.
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  const char* files[] = {"/proc/self/uid_map", "/proc/self/gid_map", "/proc/1/uid_map",
                         "/proc/self/setgroups"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) {
    int fd = open(files[i], O_WRONLY | O_CLOEXEC);
    char what[96];
    if (fd < 0) {
      snprintf(what, sizeof what, "open(%s)", files[i]);
      refused(what, fd, EPERM, EACCES, 0);
      continue;
    }
    const char* map = i == 3 ? "allow" : "0 0 4294967295\n";
    snprintf(what, sizeof what, "write(%s, \"%s\")", files[i], i == 3 ? "allow" : "0 0 max");
    refused(what, write(fd, map, strlen(map)), EPERM, EINVAL, 0);
    close(fd);
  }
  refused("setresuid(65536)", syscall(SYS_setresuid, 65536, 65536, 65536), EINVAL, 0);
  refused("setresgid(4294967294)", syscall(SYS_setresgid, -2, -2, -2), EINVAL, 0);
  char map[128];
  if (read_small("/proc/self/uid_map", map, sizeof map) > 0) {
    unsigned long inside, outside, count;
    if (sscanf(map, "%lu %lu %lu", &inside, &outside, &count) == 3 &&
        (outside == 0 || count != 65536)) {
      escaped("uid_map is %s", map);
    }
    note("uid_map unchanged: %lu %lu %lu", inside, outside, count);
  }
  finish();
}
