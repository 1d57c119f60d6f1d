/* A stand-in agent for the linux runtime tests: started exactly like space-agent (PID 1 of a
 * sandbox, channel on fd 3, spare pair on fds 4/5, writable layer on fd 6), it answers line
 * commands on fd 3 or fd 4 (the spare, as after a reattach) with what it sees from inside:
 * "key=value" lines closed by "end". Statically linked, so it needs nothing from the image.
 *
 *   report          posture: ids, namespaces' view, mounts, fds, and what the seccomp policy and
 *                   capability set refuse (each syscall tried, its errno reported)
 *   fill <MiB>      writes /tmp/fill until <MiB> or an error
 *   x32             a child makes an x32 syscall; reports how it died
 *   personality <x> tries personality(x)
 *   stat <path>     lstat: errno, type, mode, uid, gid, size, nlink, ino
 *   cat <path>      errno, data (the first 4 KiB, newlines as '|')
 *   ls <path>       errno, entries (comma-separated, sorted)
 *   readlink <path> errno, target
 *   getxattr <path> <name>          errno, value
 *   append <path> <text>            open O_WRONLY|O_APPEND and write text: errno
 *   chown <path> <uid> <gid>        lchown: errno
 *   unlink <path>   errno
 *   exit            exits
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif

static char out[65536];
static size_t out_len;

static void put(const char* key, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(out + out_len, sizeof out - out_len, "%s=", key);
  if (n > 0) out_len += (size_t)n;
  n = vsnprintf(out + out_len, sizeof out - out_len, fmt, ap);
  if (n > 0) out_len += (size_t)n;
  if (out_len < sizeof out - 1) out[out_len++] = '\n';
  if (out_len >= sizeof out) out_len = sizeof out - 1;
  va_end(ap);
}

/* errno of a call that returned < 0, or 0. */
#define ERR(call) ((call) < 0 ? errno : 0)

static void read_file(const char* path, char* buf, size_t size) {
  buf[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n < 0) n = 0;
  buf[n] = 0;
  /* one line: newlines and runs of spaces become single spaces */
  char* w = buf;
  for (char* r = buf; *r; ++r) {
    char c = (*r == '\n' || *r == '\t') ? ' ' : *r;
    if (c == ' ' && (w == buf || w[-1] == ' ')) continue;
    *w++ = c;
  }
  while (w > buf && w[-1] == ' ') --w;
  *w = 0;
}

static void list_dir(const char* path, char* buf, size_t size) {
  buf[0] = 0;
  DIR* d = opendir(path);
  if (!d) return;
  struct dirent* e;
  size_t len = 0;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    int n = snprintf(buf + len, size - len, "%s%s", len ? "," : "", e->d_name);
    if (n < 0 || (size_t)n >= size - len) break;
    len += (size_t)n;
  }
  closedir(d);
}

static void status_line(const char* key, char* buf, size_t size) {
  char all[8192];
  buf[0] = 0;
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, all, sizeof all - 1);
  close(fd);
  if (n <= 0) return;
  all[n] = 0;
  size_t klen = strlen(key);
  for (char* line = all; line && *line;) {
    char* eol = strchr(line, '\n');
    if (eol) *eol = 0;
    if (!strncmp(line, key, klen) && line[klen] == ':') {
      char* v = line + klen + 1;
      while (*v == ' ' || *v == '\t') ++v;
      snprintf(buf, size, "%s", v);
      return;
    }
    line = eol ? eol + 1 : NULL;
  }
}

static void net_devices(char* buf, size_t size) {
  char all[8192];
  buf[0] = 0;
  int fd = open("/proc/net/dev", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, all, sizeof all - 1);
  close(fd);
  if (n <= 0) return;
  all[n] = 0;
  size_t len = 0;
  int lineno = 0;
  for (char* line = all; line && *line; ++lineno) {
    char* eol = strchr(line, '\n');
    if (eol) *eol = 0;
    char* colon = strchr(line, ':');
    if (lineno >= 2 && colon) {
      *colon = 0;
      while (*line == ' ') ++line;
      int k = snprintf(buf + len, size - len, "%s%s", len ? "," : "", line);
      if (k > 0 && (size_t)k < size - len) len += (size_t)k;
    }
    line = eol ? eol + 1 : NULL;
  }
}

static void report(void) {
  char buf[4096];
  put("pid", "%d", (int)getpid());
  put("ppid", "%d", (int)getppid());
  put("uid", "%d", (int)getuid());
  put("gid", "%d", (int)getgid());
  gethostname(buf, sizeof buf);
  put("hostname", "%s", buf);
  read_file("/proc/self/uid_map", buf, sizeof buf);
  put("uid_map", "%s", buf);
  read_file("/proc/self/gid_map", buf, sizeof buf);
  put("gid_map", "%s", buf);
  gid_t groups[64];
  put("groups", "%d", getgroups(64, groups));
  net_devices(buf, sizeof buf);
  put("netdevs", "%s", buf);
  if (getcwd(buf, sizeof buf) == NULL) strcpy(buf, "?");
  put("cwd", "%s", buf);
  list_dir("/proc/self/fd", buf, sizeof buf);
  put("fds", "%s", buf);
  struct stat st;
  put("fd6_dir", "%d", fstat(6, &st) == 0 && S_ISDIR(st.st_mode));
  status_line("CapEff", buf, sizeof buf);
  put("cap_eff", "%s", buf);
  status_line("CapBnd", buf, sizeof buf);
  put("cap_bnd", "%s", buf);
  status_line("NoNewPrivs", buf, sizeof buf);
  put("no_new_privs", "%s", buf);
  status_line("Seccomp", buf, sizeof buf);
  put("seccomp", "%s", buf);
  put("dumpable", "%d", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  put("nofile", "%llu/%llu", (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
  getrlimit(RLIMIT_CORE, &rl);
  put("core", "%llu", (unsigned long long)rl.rlim_cur);
  put("umask", "%o", (unsigned)umask(022));

  /* File system. */
  int fd;
  put("usr_write", "%d", ERR(fd = open("/usr/.probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)));
  if (fd >= 0) close(fd);
  put("root_write", "%d", ERR(fd = open("/probe-file", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)));
  if (fd >= 0) {
    (void)!write(fd, "hello\n", 6);
    close(fd);
  }
  put("tmp_write", "%d", ERR(fd = open("/tmp/probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)));
  if (fd >= 0) close(fd);
  stat("/tmp", &st);
  put("tmp_mode", "%o", (unsigned)(st.st_mode & 07777));
  /* Masked /proc entries: what each is now (chr = /dev/null bound over it). */
  static const char* masked[] = {"kcore",       "keys",          "timer_list",
                                 "sched_debug", "sysrq-trigger", "latency_stats",
                                 "timer_stats", "acpi",          "scsi"};
  for (size_t i = 0; i < sizeof masked / sizeof masked[0]; ++i) {
    char key[64], path[64];
    snprintf(key, sizeof key, "proc_%s", masked[i]);
    snprintf(path, sizeof path, "/proc/%s", masked[i]);
    const char* kind = "missing";
    if (stat(path, &st) == 0) {
      if (S_ISCHR(st.st_mode)) {
        kind = "chr";
      } else if (S_ISDIR(st.st_mode)) {
        struct statvfs vfs;
        DIR* d = opendir(path);
        int entries = 0;
        struct dirent* e;
        while (d && (e = readdir(d)) != NULL) entries += e->d_name[0] != '.';
        if (d) closedir(d);
        kind = statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_RDONLY) && entries == 0 ? "empty-ro"
                                                                                    : "dir";
      } else {
        kind = "file";
      }
    }
    put(key, "%s", kind);
  }
  {
    struct statvfs vfs;
    put("proc_sys_ro", "%d", statvfs("/proc/sys", &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0);
    put("usr_ro", "%d", statvfs("/usr", &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0);
    put("usr_nosuid", "%d", statvfs("/usr", &vfs) == 0 && (vfs.f_flag & ST_NOSUID) != 0);
    put("root_ro", "%d", statvfs("/", &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0);
  }
  put("proc_sys_write", "%d", ERR(fd = open("/proc/sys/kernel/hostname", O_WRONLY | O_CLOEXEC)));
  if (fd >= 0) close(fd);
  list_dir("/sys", buf, sizeof buf);
  put("sys", "%s", buf);
  list_dir("/dev", buf, sizeof buf);
  put("dev", "%s", buf);
  fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  put("dev_null_write", "%d", fd >= 0 && write(fd, "x", 1) == 1);
  if (fd >= 0) close(fd);
  put("shm_write", "%d", ERR(fd = open("/dev/shm/probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0600)));
  if (fd >= 0) close(fd);
  put("ptmx_open", "%d", ERR(fd = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)));
  if (fd >= 0) close(fd);
  put("exe_read", "%d", ERR(fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC)));
  if (fd >= 0) close(fd);
  put("exe_write", "%d", ERR(fd = open("/proc/self/exe", O_WRONLY | O_CLOEXEC)));
  if (fd >= 0) close(fd);
  put("mknod", "%d", ERR(mknod("/tmp/probe-dev", S_IFCHR | 0600, makedev(1, 3))));
  put("sethostname", "%d", ERR(sethostname("x", 1)));

  /* The seccomp policy and the capability set. */
  put("mount", "%d", ERR(mount("tmpfs", "/tmp", "tmpfs", 0, NULL)));
  put("umount", "%d", ERR(umount2("/proc", MNT_DETACH)));
  put("chroot", "%d", ERR(chroot("/")));
  put("unshare_user", "%d", ERR(unshare(CLONE_NEWUSER)));
  put("unshare_ns", "%d", ERR(unshare(CLONE_NEWNS)));
  put("setns", "%d", ERR(setns(-1, 0)));
  long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  put("clone_newuser", "%d", pid < 0 ? errno : 0);
  pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  put("clone_plain", "%d", pid < 0 ? errno : 0);
  put("clone3", "%d", ERR(syscall(SYS_clone3, NULL, 0)));
  put("keyctl", "%d", ERR(syscall(SYS_keyctl, 0, -1, 0)));
  put("add_key", "%d", ERR(syscall(SYS_add_key, "user", "x", "y", 1, -1)));
  put("bpf", "%d", ERR(syscall(SYS_bpf, 0, NULL, 0)));
  put("perf_event_open", "%d", ERR(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0)));
  put("userfaultfd", "%d", ERR(syscall(SYS_userfaultfd, 0)));
  put("io_uring_setup", "%d", ERR(syscall(SYS_io_uring_setup, 1, NULL)));
  put("open_by_handle_at", "%d", ERR(syscall(SYS_open_by_handle_at, -1, NULL, 0)));
  put("fsopen", "%d", ERR(syscall(SYS_fsopen, "tmpfs", 0)));
  put("open_tree", "%d", ERR(syscall(SYS_open_tree, -1, "/", 0)));
  put("syslog", "%d", ERR(syscall(SYS_syslog, 3, buf, 16)));
  put("reboot", "%d", ERR(syscall(SYS_reboot, 0, 0, 0, NULL)));
  put("init_module", "%d", ERR(syscall(SYS_init_module, NULL, 0, "")));
  put("settimeofday", "%d", ERR(syscall(SYS_settimeofday, NULL, NULL)));
  put("iopl", "%d", ERR(syscall(SYS_iopl, 3)));
  put("vsock", "%d", ERR(fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0)));
  if (fd >= 0) close(fd);
  put("alg", "%d", ERR(fd = socket(AF_ALG, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)));
  if (fd >= 0) close(fd);
  put("raw_socket", "%d", ERR(fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, 1)));
  if (fd >= 0) close(fd);
  put("tcp_socket", "%d", ERR(fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)));
  if (fd >= 0) close(fd);
  char c = 'x';
  put("tiocsti", "%d", ERR(ioctl(0, TIOCSTI, &c)));
  put("tiocgwinsz", "%d", ERR(ioctl(0, TIOCGWINSZ, buf)));
  put("personality_query", "%d", ERR(personality(0xffffffff)));
  put("personality_norandom", "%d", ERR(personality(ADDR_NO_RANDOMIZE)));
  put("ptrace_pid1_read", "%d", ERR(fd = open("/proc/1/environ", O_RDONLY | O_CLOEXEC)));
  if (fd >= 0) close(fd);
}

static void fill(long mib) {
  static char chunk[1 << 20];
  memset(chunk, 'x', sizeof chunk);
  int fd = open("/tmp/fill", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  long long written = 0;
  int err = 0;
  if (fd < 0) err = errno;
  for (long i = 0; fd >= 0 && i < mib; ++i) {
    ssize_t n = write(fd, chunk, sizeof chunk);
    if (n < 0) {
      err = errno;
      break;
    }
    written += n;
    if ((size_t)n < sizeof chunk) {
      n = write(fd, chunk, sizeof chunk);
      err = n < 0 ? errno : 0;
      break;
    }
  }
  if (fd >= 0) close(fd);
  unlink("/tmp/fill");
  put("written", "%lld", written);
  put("errno", "%d", err);
}

static int compare_names(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* File commands: arguments are separated by single spaces; paths hold none. */
static void file_command(const char* cmd, char* args) {
  char* argv[3] = {args, NULL, NULL};
  for (int i = 1; i < 3 && argv[i - 1]; ++i) {
    char* sp = strchr(argv[i - 1], ' ');
    if (sp) {
      *sp = 0;
      argv[i] = sp + 1;
    }
  }
  const char* path = argv[0];
  if (!strcmp(cmd, "stat")) {
    struct stat st;
    if (lstat(path, &st) != 0) {
      put("errno", "%d", errno);
      return;
    }
    const char* type = S_ISREG(st.st_mode)   ? "reg"
                       : S_ISDIR(st.st_mode) ? "dir"
                       : S_ISLNK(st.st_mode) ? "lnk"
                       : S_ISCHR(st.st_mode) ? "chr"
                                             : "other";
    put("errno", "0");
    put("type", "%s", type);
    put("mode", "%o", (unsigned)(st.st_mode & 07777));
    put("uid", "%u", (unsigned)st.st_uid);
    put("gid", "%u", (unsigned)st.st_gid);
    put("size", "%lld", (long long)st.st_size);
    put("nlink", "%lu", (unsigned long)st.st_nlink);
    put("ino", "%llu", (unsigned long long)st.st_ino);
  } else if (!strcmp(cmd, "cat")) {
    char buf[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      put("errno", "%d", errno);
      return;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    put("errno", "%d", n < 0 ? errno : 0);
    close(fd);
    if (n < 0) n = 0;
    buf[n] = 0;
    for (char* c = buf; *c; ++c) {
      if (*c == '\n') *c = '|';
    }
    put("data", "%s", buf);
  } else if (!strcmp(cmd, "ls")) {
    static char names[256][256];
    static char* sorted[256];
    size_t count = 0;
    DIR* d = opendir(path);
    if (!d) {
      put("errno", "%d", errno);
      return;
    }
    struct dirent* e;
    while ((e = readdir(d)) != NULL && count < 256) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(names[count], sizeof names[count], "%s", e->d_name);
      sorted[count] = names[count];
      ++count;
    }
    closedir(d);
    qsort(sorted, count, sizeof sorted[0], compare_names);
    char buf[8192];
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < count; ++i) {
      int n = snprintf(buf + len, sizeof buf - len, "%s%s", i ? "," : "", sorted[i]);
      if (n < 0 || (size_t)n >= sizeof buf - len) break;
      len += (size_t)n;
    }
    put("errno", "0");
    put("entries", "%s", buf);
  } else if (!strcmp(cmd, "readlink")) {
    char buf[4096];
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    put("errno", "%d", n < 0 ? errno : 0);
    buf[n < 0 ? 0 : n] = 0;
    put("target", "%s", buf);
  } else if (!strcmp(cmd, "getxattr") && argv[1]) {
    char buf[4096];
    ssize_t n = lgetxattr(path, argv[1], buf, sizeof buf - 1);
    put("errno", "%d", n < 0 ? errno : 0);
    buf[n < 0 ? 0 : n] = 0;
    put("value", "%s", buf);
  } else if (!strcmp(cmd, "append") && argv[1]) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
      size_t len = strlen(argv[1]);
      if (write(fd, argv[1], len) != (ssize_t)len) err = errno ? errno : EIO;
      close(fd);
    }
    put("errno", "%d", err);
  } else if (!strcmp(cmd, "chown") && argv[1] && argv[2]) {
    put("errno", "%d", ERR(lchown(path, (uid_t)atol(argv[1]), (gid_t)atol(argv[2]))));
  } else if (!strcmp(cmd, "unlink")) {
    put("errno", "%d", ERR(unlink(path)));
  } else {
    put("error", "bad arguments");
  }
}

static void x32(void) {
  pid_t pid = fork();
  if (pid == 0) {
    syscall(0x40000000 | 39); /* x32 getpid */
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  put("exited", "%d", WIFEXITED(status));
  put("signal", "%d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void handle(int fd, char* line) {
  out_len = 0;
  if (!strcmp(line, "report")) {
    report();
  } else if (!strncmp(line, "fill ", 5)) {
    fill(atol(line + 5));
  } else if (!strcmp(line, "x32")) {
    x32();
  } else if (!strncmp(line, "personality ", 12)) {
    unsigned long v = strtoul(line + 12, NULL, 0);
    int r = personality(v);
    put("errno", "%d", r < 0 ? errno : 0);
  } else if (!strncmp(line, "stat ", 5) || !strncmp(line, "cat ", 4) || !strncmp(line, "ls ", 3) ||
             !strncmp(line, "readlink ", 9) || !strncmp(line, "getxattr ", 9) ||
             !strncmp(line, "append ", 7) || !strncmp(line, "chown ", 6) ||
             !strncmp(line, "unlink ", 7)) {
    char* sp = strchr(line, ' ');
    *sp = 0;
    file_command(line, sp + 1);
  } else if (!strcmp(line, "exit")) {
    _exit(0);
  } else {
    put("error", "unknown command");
  }
  put("end", "1");
  size_t off = 0;
  while (off < out_len) {
    ssize_t n = write(fd, out + off, out_len - off);
    if (n <= 0) return;
    off += (size_t)n;
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  char bufs[2][512];
  size_t lens[2] = {0, 0};
  struct pollfd pfds[2] = {{3, POLLIN, 0}, {4, POLLIN, 0}};
  for (;;) {
    if (pfds[0].fd < 0 && pfds[1].fd < 0) return 0;
    if (poll(pfds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (int i = 0; i < 2; ++i) {
      if (pfds[i].fd < 0 || !(pfds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(pfds[i].fd, bufs[i] + lens[i], sizeof bufs[i] - 1 - lens[i]);
      if (n <= 0) {
        pfds[i].fd = -1; /* the daemon side went away; keep running on the other */
        continue;
      }
      lens[i] += (size_t)n;
      char* nl;
      while ((nl = memchr(bufs[i], '\n', lens[i])) != NULL) {
        *nl = 0;
        handle(pfds[i].fd, bufs[i]);
        size_t used = (size_t)(nl - bufs[i]) + 1;
        memmove(bufs[i], bufs[i] + used, lens[i] - used);
        lens[i] -= used;
      }
      if (lens[i] == sizeof bufs[i] - 1) lens[i] = 0;
    }
  }
}
