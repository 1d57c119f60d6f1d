// Grants a binary file capabilities (security.capability, as setcap does: CAP_SYS_ADMIN,
// CAP_NET_RAW, CAP_DAC_READ_SEARCH) as sandbox root, then runs it as an unprivileged user to
// pick them up at exec.
// Blocked by: no_new_privs (file capabilities are not granted on exec) and the bounding set
// (none of those capabilities is in it). The child reports its CapEff/CapPrm.
// space-attack: sandbox=shared
#include <linux/capability.h>
#include <sys/xattr.h>

#include "../attack.h"

static unsigned long long cap_field(const char* name) {
  char buf[4096];
  if (read_small("/proc/self/status", buf, sizeof buf) < 0) return ~0ULL;
  char* p = strstr(buf, name);
  return p ? strtoull(p + strlen(name) + 1, NULL, 16) : ~0ULL;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--report") == 0) {
    printf("%llx %llx %d\n", cap_field("CapEff:"), cap_field("CapPrm:"), geteuid());
    return 0;
  }
  char self[256];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n < 0) broken("readlink");
  self[n] = 0;
  int in = open(self, O_RDONLY | O_CLOEXEC);
  int out = open("/tmp/fcaps-copy", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  char buf[65536];
  ssize_t r;
  while ((r = read(in, buf, sizeof buf)) > 0) (void)!write(out, buf, (size_t)r);
  close(in);
  close(out);
  struct vfs_ns_cap_data caps = {0};
  caps.magic_etc = VFS_CAP_REVISION_3 | VFS_CAP_FLAGS_EFFECTIVE;
  unsigned long long want = (1ULL << CAP_SYS_ADMIN) | (1ULL << CAP_NET_RAW) |
                            (1ULL << CAP_DAC_READ_SEARCH) | (1ULL << CAP_SYS_PTRACE);
  caps.data[0].permitted = (uint32_t)want;
  caps.data[0].inheritable = (uint32_t)want;
  caps.rootid = 0;
  int rc = setxattr("/tmp/fcaps-copy", "security.capability", &caps, sizeof caps, 0);
  if (rc != 0) {
    note("setxattr(security.capability): %s", errname(errno));
  } else {
    note("file capabilities set on /tmp/fcaps-copy");
  }
  for (int uid = 0; uid <= 1000; uid += 1000) {
    int pipefd[2];
    if (pipe(pipefd) != 0) broken("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      dup2(pipefd[1], 1);
      if (uid && (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)) _exit(99);
      execl("/tmp/fcaps-copy", "fcaps-copy", "--report", (char*)NULL);
      _exit(98);
    }
    close(pipefd[1]);
    char line[128] = {0};
    (void)!read(pipefd[0], line, sizeof line - 1);
    close(pipefd[0]);
    waitpid(pid, NULL, 0);
    unsigned long long eff, prm;
    int euid;
    if (sscanf(line, "%llx %llx %d", &eff, &prm, &euid) != 3) broken("no report: %s", line);
    if ((eff | prm) & want)
      escaped("uid %d exec gained %llx", uid, (eff | prm) & want);
    else
      note("uid %d after exec: CapEff %llx", uid, eff);
  }
  finish();
}
