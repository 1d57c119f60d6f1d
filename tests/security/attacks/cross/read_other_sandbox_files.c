// Looks for another sandbox's files: the victim sandbox planted a secret (starting with
// VICTIMSECRET-) in its /tmp, /root and /dev/shm. This attempt searches every writable place
// of its own file system for that marker, tries the victim's paths directly, and walks
// /proc/*/root of every process it can see.
// Blocked by: each sandbox has its own mount namespace, writable layer, /dev/shm and pid
// namespace. The runner also checks that the victim's files are unchanged.
// space-attack: sandbox=shared
#include <dirent.h>

#include "../attack.h"

static const char* prefix;
static int files_seen;

static void scan(const char* dir, int depth) {
  if (depth > 6) return;
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (e->d_type == DT_DIR) {
      scan(p, depth + 1);
    } else if (e->d_type == DT_REG) {
      ++files_seen;
      char buf[256];
      if (read_small(p, buf, sizeof buf) > 0 && strstr(buf, prefix)) {
        escaped("found the victim's secret in %s", p);
      }
    }
  }
  closedir(d);
}

int main(void) {
  prefix = env_or("SPACE_VICTIM_MARKER_PREFIX", "VICTIMSECRET-");
  const char* dirs[] = {"/tmp",  "/root", "/dev/shm", "/var", "/run",
                        "/home", "/mnt",  "/opt",     "/srv", "/workspace"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; ++i) scan(dirs[i], 0);
  const char* direct[] = {"/tmp/victim-secret", "/root/victim-secret", "/dev/shm/victim-secret"};
  for (size_t i = 0; i < 3; ++i) {
    char buf[128];
    if (read_small(direct[i], buf, sizeof buf) > 0 && strstr(buf, prefix))
      escaped("%s holds the victim's secret", direct[i]);
  }
  DIR* proc = opendir("/proc");
  struct dirent* e;
  while (proc && (e = readdir(proc))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char p[128], buf[128];
    snprintf(p, sizeof p, "/proc/%s/root/tmp/victim-secret", e->d_name);
    if (read_small(p, buf, sizeof buf) > 0 && strstr(buf, prefix))
      escaped("%s holds the victim's secret", p);
  }
  if (proc) closedir(proc);
  note("%d files searched, no trace of the victim", files_seen);
  finish();
}
