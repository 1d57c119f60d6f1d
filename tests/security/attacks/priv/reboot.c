// Reboots or halts the host with reboot(2) (with a wrong second magic, so that even a call let
// through could not act), and through /proc/sysrq-trigger.
// Blocked by: seccomp refuses reboot (EPERM); /proc/sysrq-trigger is absent or masked.
// space-attack: sandbox=shared
#include <linux/reboot.h>

#include "../attack.h"

int main(void) {
  refused("reboot(POWER_OFF, bad magic2)",
          syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, 0x12345678, LINUX_REBOOT_CMD_POWER_OFF, NULL),
          EPERM, 0);
  refused("reboot(CAD_OFF, bad magic2)",
          syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, 0x12345678, LINUX_REBOOT_CMD_CAD_OFF, NULL),
          EPERM, 0);
  struct stat st;
  if (stat("/proc/sysrq-trigger", &st) == 0 && !S_ISCHR(st.st_mode)) {
    escaped("/proc/sysrq-trigger is the real file");
  } else {
    note("/proc/sysrq-trigger absent or masked");
  }
  finish();
}
