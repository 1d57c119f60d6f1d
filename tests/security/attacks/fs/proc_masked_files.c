// Reads the /proc files Docker masks because they leak host state or act on the host:
// kcore (host memory), keys, timer_list, sched_debug, sysrq-trigger, latency_stats, and the
// acpi/scsi directories.
// Blocked by: each is either absent on this kernel or masked (bound to /dev/null, or an empty
// read-only tmpfs for directories). A masked file must read as empty and be a char device 1:3.
// space-attack: sandbox=shared
#include <dirent.h>
#include <sys/sysmacros.h>

#include "../attack.h"

int main(void) {
  const char* files[] = {"/proc/kcore",       "/proc/keys",          "/proc/timer_list",
                         "/proc/sched_debug", "/proc/sysrq-trigger", "/proc/latency_stats",
                         "/proc/timer_stats"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) {
    struct stat st;
    if (stat(files[i], &st) != 0) {
      note("%s: %s", files[i], errname(errno));
      continue;
    }
    if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != 1 || minor(st.st_rdev) != 3) {
      escaped("%s is not masked (mode %o)", files[i], st.st_mode);
      continue;
    }
    char buf[64];
    ssize_t n = read_small(files[i], buf, sizeof buf);
    if (n > 0)
      escaped("%s returned %zd bytes", files[i], n);
    else
      note("%s masked by /dev/null", files[i]);
  }
  const char* dirs[] = {"/proc/acpi", "/proc/scsi"};
  for (size_t i = 0; i < 2; ++i) {
    DIR* d = opendir(dirs[i]);
    if (!d) {
      note("%s: %s", dirs[i], errname(errno));
      continue;
    }
    int entries = 0;
    struct dirent* e;
    while ((e = readdir(d))) entries += e->d_name[0] != '.';
    closedir(d);
    if (entries)
      escaped("%s lists %d entries", dirs[i], entries);
    else
      note("%s empty", dirs[i]);
  }
  finish();
}
