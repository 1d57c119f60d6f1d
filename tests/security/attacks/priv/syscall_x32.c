// Calls through the x32 ABI (syscall numbers with bit 30 set): a second syscall table a
// filter written for x86_64 numbers could miss — mount and unshare in x32 form.
// Blocked by: the filter kills any non-native-ABI call (SIGSYS), before the kernel looks at
// it. Each call runs in a child; the child must die by SIGSYS.
// space-attack: sandbox=shared
#include <signal.h>

#include "../attack.h"

static void x32_call(long nr, const char* name) {
  pid_t pid = fork();
  if (pid == 0) {
    long rc = syscall(0x40000000L | nr, 0, 0, 0, 0, 0, 0);
    _exit(rc == -1 && errno == ENOSYS ? 3 : 4);
  }
  int status;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
    note("x32 %s: killed by SIGSYS", name);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
    escaped("x32 %s reached the kernel (ENOSYS from the syscall table, not the filter)", name);
  } else {
    escaped("x32 %s ran (status %#x)", name, status);
  }
}

int main(void) {
  x32_call(165, "mount");
  x32_call(272, "unshare");
  x32_call(39, "getpid");
  finish();
}
