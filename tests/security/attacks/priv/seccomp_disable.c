// Gets rid of the sandbox's confinement from inside: clear no_new_privs, replace or disable
// the seccomp filter (a permissive filter only adds; SECCOMP_MODE_DISABLED does not exist),
// read the filter out with PTRACE_SECCOMP_GET_FILTER, and check that exec keeps all of it.
// Blocked by: no_new_privs is one-way, filters stack (the strictest answer wins), and reading
// filters needs CAP_SYS_ADMIN.
// space-attack: sandbox=shared
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>

#include "../attack.h"

static void read_status(int* nnp, int* mode) {
  char buf[4096];
  *nnp = *mode = -1;
  if (read_small("/proc/self/status", buf, sizeof buf) < 0) return;
  char* p = strstr(buf, "NoNewPrivs:");
  if (p) *nnp = atoi(p + 11);
  p = strstr(buf, "Seccomp:");
  if (p) *mode = atoi(p + 8);
}

int main(void) {
  refused("prctl(PR_SET_NO_NEW_PRIVS, 0)", prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0), EINVAL, 0);
  refused("prctl(PR_SET_SECCOMP, SECCOMP_MODE_DISABLED)", prctl(PR_SET_SECCOMP, 0, 0, 0, 0), EINVAL,
          0);
  // A filter that allows everything: installing it is allowed, and must change nothing.
  struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  struct sock_fprog prog = {1, allow};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0) {
    note("an allow-all filter stacked");
  }
  refused("unshare(CLONE_NEWUSER) after stacking allow-all", syscall(SYS_unshare, 0x10000000),
          EPERM, 0);
  pid_t child = fork();
  if (child == 0) {
    raise(SIGSTOP);
    _exit(0);
  }
  if (ptrace(PTRACE_SEIZE, child, 0, 0) == 0) {
    refused("ptrace(PTRACE_SECCOMP_GET_FILTER, child)",
            ptrace(PTRACE_SECCOMP_GET_FILTER, child, 0, NULL), EACCES, EPERM, 0);
    ptrace(PTRACE_DETACH, child, 0, 0);
  } else {
    note("ptrace(SEIZE, own child): %s", errname(errno));
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  int nnp, mode;
  read_status(&nnp, &mode);
  if (nnp != 1) escaped("NoNewPrivs is %d", nnp);
  if (mode != 2) escaped("Seccomp mode is %d", mode);
  // After exec (a fresh image) the filter and no_new_privs must still be there.
  int status = system(
      "grep -q '^NoNewPrivs:.1' /proc/self/status && "
      "grep -q '^Seccomp:.2' /proc/self/status");
  if (status != 0) escaped("an exec'd shell lost NoNewPrivs or seccomp");
  note("NoNewPrivs 1 and Seccomp 2 before and after exec");
  finish();
}
