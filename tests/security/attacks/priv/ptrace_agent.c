// Takes over the agent (PID 1, which holds the channel to the daemon) or this exec's shim:
// PTRACE_ATTACH / PTRACE_SEIZE, process_vm_readv/writev on their memory, /proc/PID/mem.
// Blocked by: both are non-dumpable and sandbox root lacks CAP_SYS_PTRACE (EPERM/EACCES).
// space-attack: sandbox=shared
#include <sys/ptrace.h>
#include <sys/uio.h>

#include "../attack.h"

static void attack_pid(pid_t pid, const char* who) {
  char what[96];
  snprintf(what, sizeof what, "ptrace(ATTACH, %s %d)", who, pid);
  long rc = ptrace(PTRACE_ATTACH, pid, 0, 0);
  if (rc == 0) {
    ptrace(PTRACE_DETACH, pid, 0, 0);
  }
  refused(what, rc, EPERM, 0);
  snprintf(what, sizeof what, "ptrace(SEIZE, %s)", who);
  rc = ptrace(PTRACE_SEIZE, pid, 0, 0);
  if (rc == 0) ptrace(PTRACE_DETACH, pid, 0, 0);
  refused(what, rc, EPERM, 0);
  char buf[64];
  struct iovec local = {buf, sizeof buf}, remote = {(void*)0x400000, sizeof buf};
  snprintf(what, sizeof what, "process_vm_readv(%s)", who);
  refused(what, process_vm_readv(pid, &local, 1, &remote, 1, 0), EPERM, EFAULT, 0);
  snprintf(what, sizeof what, "process_vm_writev(%s)", who);
  refused(what, process_vm_writev(pid, &local, 1, &remote, 1, 0), EPERM, EFAULT, 0);
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/mem", pid);
  snprintf(what, sizeof what, "open(%s, O_RDWR)", p);
  refused(what, open(p, O_RDWR | O_CLOEXEC), EACCES, EPERM, 0);
}

int main(void) {
  attack_pid(1, "agent");
  pid_t shim = getppid();
  char comm[64] = "";
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/comm", shim);
  read_small(p, comm, sizeof comm);
  comm[strcspn(comm, "\n")] = 0;
  if (shim > 1) attack_pid(shim, comm[0] ? comm : "parent");
  finish();
}
