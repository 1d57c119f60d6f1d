// syscall_probe: tells, for every row of the sandbox seccomp policy, whether the running
// process's seccomp filter refuses the call with the row's errno or lets it through — without
// ever running the syscall, so the probe has no side effects whatever the arguments.
//
// How: the probe installs a second filter of its own (an "oracle") that answers
// SECCOMP_RET_TRACE for any call whose 6th argument is a 64-bit cookie. With no tracer
// attached the kernel then skips the call and returns ENOSYS. seccomp runs every filter and
// keeps the action of highest precedence (KILL > TRAP > ERRNO > USER_NOTIF > TRACE > ALLOW),
// so for a probed call:
//   * the sandbox filter says ERRNO(e)  -> the probe sees errno e (the call did not run);
//   * the sandbox filter says ALLOW     -> the oracle's TRACE wins: ENOSYS (did not run either).
// A row whose errno is ENOSYS itself (clone3) is told apart with a second, real call whose
// arguments the kernel rejects before doing anything (clone3(NULL, 0): EINVAL if allowed).
//
// Input: the rows printed by space_seccomp_dump (tests/security/tools/seccomp_dump.cc). The
// probe evaluates the table itself for each call it makes (the same match semantics as
// src/host/seccomp.cc) and compares. Besides each row's matching arguments it makes
// calls that must NOT match (other ioctl requests, socket families, clone flags, personality
// values) and a few control syscalls that are not in the table, so an over-broad filter fails
// too. The non-native-architecture rule is checked in forked children (x32 and int 0x80).
//
// Usage: syscall_probe [--host-control] TABLE
//   --host-control: run outside any sandbox; every call must come back "allowed" (this shows
//   the oracle itself does not produce the policy's errnos).
// Prints one line per check and a summary; exits 0 when every check matched, 1 otherwise.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define COOKIE 0x5ec0c0de0dd5a11ULL
#define MAX_RULES 256
#define MAX_VALUES 16
#define ALLOWED (-1)  // expected outcome: the sandbox filter lets the call through

enum kind { K_ALL, K_EQ, K_ANYBIT, K_NOTIN };

struct rule {
  long nr;
  char name[64];
  enum kind kind;
  unsigned arg;
  int err;
  uint64_t values[MAX_VALUES];
  int nvalues;
};

static struct rule rules[MAX_RULES];
static int nrules;
static int host_control;
static int checks, failures;

static int parse_kind(const char* s, enum kind* k) {
  if (strcmp(s, "all") == 0)
    *k = K_ALL;
  else if (strcmp(s, "eq") == 0)
    *k = K_EQ;
  else if (strcmp(s, "anybit") == 0)
    *k = K_ANYBIT;
  else if (strcmp(s, "notin") == 0)
    *k = K_NOTIN;
  else
    return -1;
  return 0;
}

static int load_table(const char* path) {
  FILE* f = fopen(path, "re");
  if (!f) {
    perror(path);
    return -1;
  }
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "rule ", 5) != 0) continue;
    if (nrules == MAX_RULES) {
      fprintf(stderr, "too many rules\n");
      fclose(f);
      return -1;
    }
    struct rule* r = &rules[nrules];
    char kind[16], values[512];
    if (sscanf(line, "rule %ld %63s %15s %u %d %511s", &r->nr, r->name, kind, &r->arg, &r->err,
               values) != 6 ||
        parse_kind(kind, &r->kind) != 0 || r->arg > 4) {
      fprintf(stderr, "bad table line: %s", line);
      fclose(f);
      return -1;
    }
    r->nvalues = 0;
    if (strcmp(values, "-") != 0) {
      char* save = NULL;
      for (char* tok = strtok_r(values, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (r->nvalues == MAX_VALUES) {
          fprintf(stderr, "too many values for %s\n", r->name);
          fclose(f);
          return -1;
        }
        r->values[r->nvalues++] = strtoull(tok, NULL, 0);
      }
    }
    ++nrules;
  }
  fclose(f);
  return nrules > 0 ? 0 : -1;
}

// What the table says about nr(args): the errno of the first matching row, or ALLOWED.
static int expected(long nr, const uint64_t args[6]) {
  for (int i = 0; i < nrules; ++i) {
    const struct rule* r = &rules[i];
    if (r->nr != nr) continue;
    uint64_t a = args[r->arg];
    int match = 0;
    switch (r->kind) {
      case K_ALL:
        match = 1;
        break;
      case K_EQ:
        for (int v = 0; v < r->nvalues; ++v) match |= (a & 0xffffffffULL) == r->values[v];
        break;
      case K_ANYBIT:
        for (int v = 0; v < r->nvalues; ++v) match |= (a & r->values[v]) != 0;
        break;
      case K_NOTIN: {
        int in = 0;
        for (int v = 0; v < r->nvalues; ++v) in |= (a & 0xffffffffULL) == r->values[v];
        match = a > 0xffffffffULL || !in;
        break;
      }
    }
    if (match) return r->err;
  }
  return ALLOWED;
}

static const char* outcome_name(int e) {
  static char buf[64];
  if (e == ALLOWED) return "allowed";
  const char* n = strerrorname_np(e);
  if (n) return n;
  snprintf(buf, sizeof buf, "errno %d", e);
  return buf;
}

static int install_oracle(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[5])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)COOKIE, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[5]) + 4),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(COOKIE >> 32), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return -1;
  // The oracle must answer ENOSYS for a call nothing else filters.
  errno = 0;
  long rc = syscall(SYS_getppid, 0, 0, 0, 0, 0, COOKIE);
  if (rc != -1 || errno != ENOSYS) {
    fprintf(stderr, "oracle not effective: getppid -> %ld errno %d\n", rc, errno);
    return -1;
  }
  return 0;
}

// The call never runs: the sandbox filter or the oracle stops it. Returns the outcome.
static int probe(long nr, const uint64_t args[6]) {
  errno = 0;
  long rc = syscall(nr, args[0], args[1], args[2], args[3], args[4], COOKIE);
  if (rc != -1) return -1000;  // the call ran: impossible under the oracle
  return errno == ENOSYS ? ALLOWED : errno;
}

// Calls the kernel rejects before acting, to tell a seccomp ENOSYS from "allowed".
static int real_call_outcome(const char* name, int* out) {
  if (strcmp(name, "clone3") == 0) {
    errno = 0;
    long rc = syscall(SYS_clone3, NULL, 0);  // size < CLONE_ARGS_SIZE_VER0: EINVAL if allowed
    if (rc == 0) _exit(0);                   // cannot happen; never let a child run on
    *out = (rc == -1 && errno == ENOSYS) ? ENOSYS : ALLOWED;
    return 0;
  }
  return -1;
}

// Arguments 2..4 default to an unmapped address and -1; the 6th is always the cookie.
static void check_args(const char* label, long nr, const char* name, const uint64_t in[5]) {
  uint64_t args[6] = {in[0], in[1], in[2], in[3], in[4], COOKIE};
  int want = host_control ? ALLOWED : expected(nr, args);
  int got = probe(nr, args);
  const char* note = "";
  if (got == -1000) {
    ++checks;
    ++failures;
    printf("FAIL %-24s %-34s the call RAN under the oracle\n", name, label);
    return;
  }
  // ENOSYS rows: the oracle's ENOSYS and the row's look alike; ask the kernel for real.
  if (!host_control && want == ENOSYS && got == ALLOWED) {
    int real;
    if (real_call_outcome(name, &real) != 0) {
      ++checks;
      ++failures;
      printf("FAIL %-24s %-34s expects ENOSYS but the probe knows no harmless real call\n", name,
             label);
      return;
    }
    got = real;
    note = " (by a real call the kernel rejects)";
  }
  ++checks;
  int ok = got == want;
  if (!ok) ++failures;
  printf("%s %-24s %-34s want %-14s got %s%s\n", ok ? "ok  " : "FAIL", name, label,
         outcome_name(want), outcome_name(got), note);
}

static void check(const char* label, long nr, const char* name, uint64_t a0, uint64_t a1) {
  const uint64_t args[5] = {a0, a1, 0x1000 /* unmapped */, (uint64_t)-1, (uint64_t)-1};
  check_args(label, nr, name, args);
}

// Base arguments for a row's checks: `fill` everywhere, the row's argument set by the caller.
static void base_args(uint64_t a[5], uint64_t fill) {
  for (int i = 0; i < 5; ++i) a[i] = fill;
  a[2] = 0x1000;
}

static void check_rule(const struct rule* r) {
  char label[96];
  switch (r->kind) {
    case K_ALL:
      check("any arguments", r->nr, r->name, (uint64_t)-1, 0x1000);
      break;
    case K_EQ:
      for (int v = 0; v < r->nvalues; ++v) {
        uint64_t a[5];
        base_args(a, (uint64_t)-1);
        a[r->arg] = r->values[v];
        snprintf(label, sizeof label, "arg%u=%#llx", r->arg, (unsigned long long)r->values[v]);
        check_args(label, r->nr, r->name, a);
        // The kernel reads these arguments as 32-bit ints: high bits must not slip past.
        a[r->arg] = r->values[v] | 0x100000000ULL;
        snprintf(label, sizeof label, "arg%u=%#llx (high bit)", r->arg,
                 (unsigned long long)a[r->arg]);
        check_args(label, r->nr, r->name, a);
        a[r->arg] = r->values[v] ^ 1;
        snprintf(label, sizeof label, "arg%u=%#llx (neighbour)", r->arg,
                 (unsigned long long)a[r->arg]);
        check_args(label, r->nr, r->name, a);
      }
      break;
    case K_ANYBIT:
      for (int v = 0; v < r->nvalues; ++v) {
        uint64_t a[5];
        base_args(a, 0);
        a[r->arg] = SIGCHLD | r->values[v];
        snprintf(label, sizeof label, "arg%u has %#llx", r->arg, (unsigned long long)r->values[v]);
        check_args(label, r->nr, r->name, a);
      }
      {
        uint64_t a[5];
        base_args(a, 0);
        a[r->arg] = SIGCHLD;
        snprintf(label, sizeof label, "arg%u=SIGCHLD only", r->arg);
        check_args(label, r->nr, r->name, a);
      }
      break;
    case K_NOTIN: {
      for (int v = 0; v < r->nvalues; ++v) {
        uint64_t a[5];
        base_args(a, 0);
        a[r->arg] = r->values[v];
        snprintf(label, sizeof label, "arg%u=%#llx (listed)", r->arg,
                 (unsigned long long)r->values[v]);
        check_args(label, r->nr, r->name, a);
      }
      // Values outside the list: single bits, all-ones minus a bit, a high 64-bit bit.
      const uint64_t outside[] = {0x0040000, 0x0400000,  0x0100000,      0x1,
                                  0x4000000, 0xfffffffe, 0x100000000ULL, 0xffffffff00000008ULL};
      for (size_t i = 0; i < sizeof outside / sizeof outside[0]; ++i) {
        uint64_t a[5];
        base_args(a, 0);
        a[r->arg] = outside[i];
        snprintf(label, sizeof label, "arg%u=%#llx", r->arg, (unsigned long long)outside[i]);
        check_args(label, r->nr, r->name, a);
      }
      break;
    }
  }
}

// Syscalls a working sandbox needs, called through the oracle: the table must not catch them.
static void check_controls(void) {
  check("control", SYS_getppid, "getppid", 0, 0);
  check("control", SYS_read, "read", (uint64_t)-1, 0x1000);
  check("control", SYS_openat, "openat", (uint64_t)-1, 0x1000);
  // (No execve: with exec auditing the sandbox filter hands execve to the daemon's seccomp
  // supervisor, which lets it continue, so the oracle cannot keep it from running.)
  check("control", SYS_ptrace, "ptrace", (uint64_t)-1, 0);
  check("control", SYS_seccomp, "seccomp", (uint64_t)-1, 0);
  check("control", SYS_prctl, "prctl", (uint64_t)-1, 0);
  check("control AF_UNIX", SYS_socket, "socket", AF_UNIX, SOCK_STREAM);
  check("control AF_INET", SYS_socket, "socket", AF_INET, SOCK_STREAM);
  check("control AF_INET6", SYS_socket, "socket", AF_INET6, SOCK_DGRAM);
  check("control TCGETS", SYS_ioctl, "ioctl", (uint64_t)-1, TCGETS);
  check("control FIONREAD", SYS_ioctl, "ioctl", (uint64_t)-1, FIONREAD);
  check("control plain fork flags", SYS_clone, "clone", SIGCHLD, 0);
  check("control thread flags", SYS_clone, "clone",
        CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM, 0);
  check("control query", SYS_personality, "personality", 0xffffffff, 0);
}

// Runs fn in a child and describes how the child ended.
static int child_outcome(void (*fn)(void), char* how, size_t len) {
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(how, len, "fork failed: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    fn();
    _exit(0);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    snprintf(how, len, "killed by SIG%s", sigabbrev_np(WTERMSIG(status)));
    return WTERMSIG(status);
  }
  snprintf(how, len, "exited %d", WEXITSTATUS(status));
  return 0;
}

static void x32_getpid(void) {
  long rc = syscall(0x40000000 | 39);  // x32 getpid
  _exit(rc == -1 && errno == ENOSYS ? 3 : 4);
}

static void i386_getpid(void) {
  long rc = 20;  // __NR_getpid on i386
  __asm__ volatile("int $0x80" : "+a"(rc) : : "memory");
  _exit(rc == -ENOSYS ? 3 : 4);
}

static void check_badarch(void) {
  char how[128];
  // x32: the sandbox filter must kill the process (SIGSYS) before the kernel looks at it.
  int sig = child_outcome(x32_getpid, how, sizeof how);
  ++checks;
  int ok = host_control ? sig != SIGSYS : sig == SIGSYS;
  if (!ok) ++failures;
  printf("%s %-24s %-34s want %-14s got %s\n", ok ? "ok  " : "FAIL", "x32 getpid", "nr|0x40000000",
         host_control ? "not SIGSYS" : "SIGSYS", how);
  // i386 (int 0x80): killed by the filter, or refused by a kernel without IA-32 entry
  // (SIGSEGV); either way the call must not run.
  sig = child_outcome(i386_getpid, how, sizeof how);
  ++checks;
  ok = host_control ? 1 : (sig == SIGSYS || sig == SIGSEGV);
  if (!ok) ++failures;
  printf("%s %-24s %-34s want %-14s got %s%s\n", ok ? "ok  " : "FAIL", "i386 getpid", "int 0x80",
         host_control ? "anything" : "SIGSYS|SIGSEGV", how,
         sig == SIGSEGV ? " (IA-32 entry disabled in this kernel)" : "");
}

int main(int argc, char** argv) {
  int i = 1;
  if (i < argc && strcmp(argv[i], "--host-control") == 0) {
    host_control = 1;
    ++i;
  }
  if (i + 1 != argc) {
    fprintf(stderr, "usage: %s [--host-control] TABLE\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (load_table(argv[i]) != 0) {
    fprintf(stderr, "cannot load the policy table %s\n", argv[i]);
    return 2;
  }
  // Architecture children first: they must not inherit the oracle.
  check_badarch();
  if (install_oracle() != 0) {
    fprintf(stderr, "cannot install the oracle filter: %s\n", strerror(errno));
    return 2;
  }
  for (int r = 0; r < nrules; ++r) check_rule(&rules[r]);
  check_controls();
  printf("PROBE: %d rules, %d checks, %d failures%s\n", nrules, checks, failures,
         host_control ? " (host control)" : "");
  return failures == 0 ? 0 : 1;
}
