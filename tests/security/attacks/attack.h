// Shared helpers of the C escape attempts (tests/security/attacks/<class>/<name>.c). Each attempt
// is a static binary run inside a sandbox; it ends with exactly one verdict line and exit code:
//   BLOCKED: <how>   exit 0   the attempt failed, as it must
//   ESCAPED: <what>  exit 1   the attempt worked: a real finding
// Anything else (a crash, no verdict) is an error for the runner. The runner does not trust the
// verdict alone: attempts against the host or other sandboxes are also verified from outside.
//
// Helpers: verdicts, errno names, "this call must fail with one of these errnos" checks that
// count evidence, and reading the runner's context from the environment (SPACE_*).
#pragma once

// _GNU_SOURCE comes from the build (-D_GNU_SOURCE), before any system header.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

// Set by attempts that found a way through; checked by finish().
static int attack_escaped;
static char attack_escape_what[512];
// Evidence lines for the BLOCKED verdict ("mount: EPERM; fsopen: EPERM").
static char attack_how[1024];

static inline const char* errname(int e) {
  const char* n = strerrorname_np(e);
  return n ? n : "E?";
}

static inline void note(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  size_t len = strlen(attack_how);
  if (len + strlen(buf) + 3 < sizeof attack_how) {
    if (len) strcat(attack_how, "; ");
    strcat(attack_how, buf);
  }
  fprintf(stderr, "  %s\n", buf);
}

static inline void escaped(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "  ESCAPE: %s\n", buf);
  if (!attack_escaped) snprintf(attack_escape_what, sizeof attack_escape_what, "%s", buf);
  attack_escaped = 1;
}

// Prints the verdict and exits.
static inline __attribute__((noreturn)) void finish(void) {
  fflush(stderr);
  if (attack_escaped) {
    printf("ESCAPED: %s\n", attack_escape_what);
    fflush(stdout);
    exit(1);
  }
  printf("BLOCKED: %s\n", attack_how[0] ? attack_how : "every step failed");
  fflush(stdout);
  exit(0);
}

// The attempt could not run at all (a bug in the attempt, not a verdict): exit 2, no verdict.
static inline __attribute__((noreturn)) void broken(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "ERROR: ");
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  exit(2);
}

// rc is a syscall result: success means the step worked (escape), failure with one of the
// listed errnos (0-terminated) is the expected refusal, any other errno is noted but still
// counts as refused.
static inline int refused(const char* what, long rc, ...) {
  int e = errno;
  if (rc >= 0) {
    escaped("%s succeeded (rc %ld)", what, rc);
    return 0;
  }
  va_list ap;
  va_start(ap, rc);
  int expected = 0, matched = 0;
  for (int want = va_arg(ap, int); want != 0; want = va_arg(ap, int)) {
    expected = 1;
    if (want == e) matched = 1;
  }
  va_end(ap);
  if (expected && !matched) {
    note("%s: %s (unexpected errno, still refused)", what, errname(e));
  } else {
    note("%s: %s", what, errname(e));
  }
  return 1;
}

static inline const char* env_or(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v && *v ? v : fallback;
}

// Reads up to len-1 bytes of a small file; -1 and errno on failure.
static inline ssize_t read_small(const char* path, char* buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, len - 1);
  int e = errno;
  close(fd);
  if (n < 0) {
    errno = e;
    return -1;
  }
  buf[n] = '\0';
  return n;
}

// The host canary (a file in the runner's temp dir, outside every sandbox) is visible at `path`
// relative to `dirfd`: the sandbox's file-system view reaches the host. Returns 1 if so.
static inline int sees_host_canary(int dirfd, const char* label) {
  const char* canary = getenv("SPACE_HOST_CANARY");
  const char* value = getenv("SPACE_HOST_CANARY_VALUE");
  if (!canary || !value) return 0;
  const char* rel = canary[0] == '/' ? canary + 1 : canary;
  int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[256] = {0};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n > 0 && strstr(buf, value)) {
    escaped("host canary %s readable via %s", canary, label);
    return 1;
  }
  return 0;
}
