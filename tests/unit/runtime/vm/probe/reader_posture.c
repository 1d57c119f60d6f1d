/* A stand-in for space-upper-reader in vm_diff_test.cc: started by read_upper() exactly as the
 * reader is, it reports its own posture as the `error` line of a listing, which read_upper hands
 * back as the error message (at most 300 characters, hence the short keys): u= and g= the
 * real, effective, saved and fs ids, gr= the groups, ce= the effective capabilities, nnp=
 * no_new_privs, net/pid/ipc/uts= its namespaces' inodes, fds= its open fds, as/fs/cpu= rlimits,
 * env= whether it has an environment, r/w= whether fd 3 reads and writes, p= its pid. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

extern char** environ;

static char out[4096];

static void add(const char* s) { strncat(out, s, sizeof out - strlen(out) - 1); }

static void status_field(const char* name, const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, name, strlen(name)) == 0 && line[strlen(name)] == ':') {
      char* v = line + strlen(name) + 1;
      while (*v == ' ' || *v == '\t') ++v;
      v[strcspn(v, "\n")] = 0;
      for (char* p = v; *p; ++p)
        if (*p == '\t' || *p == ' ') *p = ',';
      char buf[600];
      snprintf(buf, sizeof buf, " %s=%s", key, v);
      add(buf);
    }
  }
  if (f) fclose(f);
}

int main(void) {
  char buf[200];
  add("space-upper 1\nerror posture");
  status_field("Uid", "u");
  status_field("Gid", "g");
  status_field("Groups", "gr");
  status_field("CapEff", "ce");
  status_field("NoNewPrivs", "nnp");
  const char* ns[] = {"net", "pid", "ipc", "uts"};
  for (int i = 0; i < 4; ++i) {
    struct stat st;
    snprintf(buf, sizeof buf, "/proc/self/ns/%s", ns[i]);
    unsigned long long ino = stat(buf, &st) == 0 ? (unsigned long long)st.st_ino : 0;
    snprintf(buf, sizeof buf, " %s=%llu", ns[i], ino);
    add(buf);
  }
  add(" fds=");
  DIR* d = opendir("/proc/self/fd");
  int dfd = d ? dirfd(d) : -1;
  struct dirent* e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dfd) continue;
    add(e->d_name);
    add(",");
  }
  if (d) closedir(d);
  struct rlimit as, fsz, cpu;
  getrlimit(RLIMIT_AS, &as);
  getrlimit(RLIMIT_FSIZE, &fsz);
  getrlimit(RLIMIT_CPU, &cpu);
  char c;
  snprintf(buf, sizeof buf, " as=%llu fs=%llu cpu=%llu env=%d r=%d w=%d p=%d\n",
           (unsigned long long)as.rlim_max, (unsigned long long)fsz.rlim_max,
           (unsigned long long)cpu.rlim_max, environ && environ[0] ? 1 : 0,
           pread(3, &c, 1, 1024) == 1 ? 1 : 0, pwrite(3, "x", 1, 0) == 1 ? 1 : 0, (int)getpid());
  add(buf);
  fputs(out, stdout);
  return 1;
}
