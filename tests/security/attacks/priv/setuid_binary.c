// Regains root after dropping to an unprivileged user: exec a setuid-root binary made by
// sandbox root in /tmp, and the host's own setuid binaries on the /usr bind (su, passwd,
// mount). Blocked by: no_new_privs (setuid bits are ignored on exec) and the /usr bind is
// nosuid. Even "root" regained would be sandbox root only.
// space-attack: sandbox=shared
#include <grp.h>
#include <sys/prctl.h>

#include "../attack.h"

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--report") == 0) {
    printf("%d %d\n", geteuid(), getegid());
    return 0;
  }
  // Sandbox root makes a copy of this binary setuid root.
  char self[256];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n < 0) broken("readlink: %s", strerror(errno));
  self[n] = 0;
  int in = open(self, O_RDONLY | O_CLOEXEC);
  int out = open("/tmp/suid-copy", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  char buf[65536];
  ssize_t r;
  while ((r = read(in, buf, sizeof buf)) > 0) (void)!write(out, buf, (size_t)r);
  close(in);
  close(out);
  if (chown("/tmp/suid-copy", 0, 0) != 0 || chmod("/tmp/suid-copy", 04755) != 0)
    broken("chmod 4755: %s", strerror(errno));
  note("NoNewPrivs=%d", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
  const char* targets[] = {"/tmp/suid-copy", "/usr/bin/su", "/usr/bin/passwd", "/usr/bin/mount",
                           "/usr/bin/newgrp"};
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; ++i) {
    if (access(targets[i], F_OK) != 0) continue;
    int pipefd[2];
    if (pipe(pipefd) != 0) broken("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      dup2(pipefd[1], 1);
      setgroups(0, NULL);
      if (setresgid(1000, 1000, 1000) != 0 || setresuid(1000, 1000, 1000) != 0) _exit(99);
      if (i == 0) {
        execl(targets[i], targets[i], "--report", (char*)NULL);
      } else {
        // su/passwd/mount print usage or fail; what matters is the euid they get.
        char* const args[] = {(char*)targets[i], (char*)"--version", NULL};
        execv(targets[i], args);
      }
      _exit(98);
    }
    close(pipefd[1]);
    char line[128] = {0};
    (void)!read(pipefd[0], line, sizeof line - 1);
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (i == 0) {
      int euid = -1;
      if (sscanf(line, "%d", &euid) != 1) broken("no report from the setuid copy: %s", line);
      if (euid == 0)
        escaped("setuid copy ran with euid 0 after dropping to uid 1000");
      else
        note("setuid copy ran as euid %d", euid);
    }
  }
  // The host binaries: inspect their mode and the mount flags instead of trusting output.
  struct stat st;
  if (stat("/usr/bin/su", &st) == 0 && (st.st_mode & S_ISUID)) {
    char mounts[8192];
    if (read_small("/proc/self/mountinfo", mounts, sizeof mounts) > 0) {
      char* usr = strstr(mounts, " /usr ");
      if (usr && !strstr(usr, "nosuid"))
        escaped("/usr is mounted without nosuid");
      else
        note("/usr/bin/su is setuid on a nosuid mount");
    }
  }
  finish();
}
