// Creates new namespaces with clone(2) flags instead of unshare: CLONE_NEWUSER and each other
// CLONE_NEW* flag, one at a time and combined, with the raw syscall.
// Blocked by: seccomp refuses clone(2) with any namespace flag (EPERM).
// space-attack: sandbox=shared
#include <sched.h>
#include <signal.h>

#include "../attack.h"

int main(void) {
  unsigned long flags[] = {
      CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWNET,    CLONE_NEWPID,
      CLONE_NEWUTS,  CLONE_NEWIPC, CLONE_NEWCGROUP, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    long pid = syscall(SYS_clone, flags[i] | SIGCHLD, 0, NULL, NULL, 0);
    if (pid == 0) _exit(0);  // a child in new namespaces: leave at once
    char what[64];
    snprintf(what, sizeof what, "clone(%#lx)", flags[i]);
    if (pid > 0) waitpid((pid_t)pid, NULL, 0);
    refused(what, pid, EPERM, 0);
  }
  finish();
}
