// Calls through the 32-bit (IA-32) entry point, int $0x80, whose syscall numbers differ
// (i386 mount is 21, unshare 310, keyctl 288): the classic seccomp bypass when a filter
// checks numbers without checking the architecture.
// Blocked by: the filter kills any non-native-architecture call (SIGSYS); on kernels without
// IA-32 entry the instruction itself faults (SIGSEGV). Each call runs in a child.
// space-attack: sandbox=shared
#include <signal.h>

#include "../attack.h"

static void int80(long nr, const char* name) {
  pid_t pid = fork();
  if (pid == 0) {
    long rc = nr;
    __asm__ volatile("int $0x80" : "+a"(rc) : "b"(0), "c"(0), "d"(0) : "memory");
    _exit(rc < 0 && rc > -4096 ? 3 : 4);
  }
  int status;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
    note("i386 %s: killed by SIGSYS", name);
  } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) {
    note("i386 %s: SIGSEGV (no IA-32 entry in this kernel)", name);
  } else {
    escaped("i386 %s ran (status %#x)", name, status);
  }
}

int main(void) {
  int80(21, "mount");
  int80(310, "unshare");
  int80(288, "keyctl");
  int80(20, "getpid");
  finish();
}
