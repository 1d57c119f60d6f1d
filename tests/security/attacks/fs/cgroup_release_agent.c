// CVE-2022-0492: mount a cgroup v1 hierarchy, set release_agent to a program and
// notify_on_release, then empty the cgroup so the kernel runs the program as host root. Also
// tries cgroup2 and the new mount API's fsopen("cgroup").
// Blocked by: seccomp refuses mount and fsopen (EPERM); no CAP_SYS_ADMIN; no cgroupfs is
// mounted inside. The runner compares the host's release_agent files before and after.
// space-attack: sandbox=shared verify=release_agent
#include <sys/mount.h>

#include "../attack.h"

int main(void) {
  mkdir("/tmp/cg", 0755);
  const char* controllers[] = {"rdma", "memory", "pids", "freezer", "none,name=x"};
  for (size_t i = 0; i < sizeof controllers / sizeof controllers[0]; ++i) {
    char what[96];
    snprintf(what, sizeof what, "mount(cgroup, %s)", controllers[i]);
    refused(what, mount("cgroup", "/tmp/cg", "cgroup", 0, controllers[i]), EPERM, 0);
  }
  refused("mount(cgroup2)", mount("cgroup2", "/tmp/cg", "cgroup2", 0, NULL), EPERM, 0);
  refused("fsopen(cgroup)", syscall(SYS_fsopen, "cgroup", 0), EPERM, 0);
  // Any release_agent reachable from here at all?
  const char* agents[] = {"/tmp/cg/release_agent", "/sys/fs/cgroup/release_agent",
                          "/sys/fs/cgroup/memory/release_agent",
                          "/sys/fs/cgroup/rdma/release_agent"};
  for (size_t i = 0; i < sizeof agents / sizeof agents[0]; ++i) {
    int fd = open(agents[i], O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      escaped("%s is writable", agents[i]);
      close(fd);
    } else {
      note("%s: %s", agents[i], errname(errno));
    }
  }
  finish();
}
