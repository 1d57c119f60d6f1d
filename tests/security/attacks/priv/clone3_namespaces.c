// clone3(2) keeps its flags in memory, where seccomp cannot look: the obvious way around a
// filter on clone's flags. Tries CLONE_NEWUSER, CLONE_NEWNS and CLONE_INTO_CGROUP via clone3.
// Blocked by: seccomp refuses clone3 entirely with ENOSYS (so libc falls back to clone, whose
// flags the filter does see).
// space-attack: sandbox=shared
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>

#include "../attack.h"

int main(void) {
  unsigned long long flags[] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, 0};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    struct clone_args args = {.flags = flags[i], .exit_signal = SIGCHLD};
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid((pid_t)pid, NULL, 0);
    char what[64];
    snprintf(what, sizeof what, "clone3(flags %#llx)", flags[i]);
    refused(what, pid, ENOSYS, 0);
  }
  finish();
}
