// Reads the logs that record every sandbox's activity: the daemon's log in its state
// directory (it names the other sandboxes and what ran in them), /var/log, the journal, and
// any file in the sandbox's reach that mentions the victim sandbox's id.
// Blocked by: logs live in the host's mount namespace, outside every sandbox's root. (Audit
// logs, a later issue, are in the README's placeholder list.)
// space-attack: sandbox=shared
#include <dirent.h>

#include "../attack.h"

static const char* victim;
static int files;

static void scan(const char* dir, int depth) {
  if (depth > 5) return;
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
      ++files;
      static char buf[1 << 16];
      if (read_small(p, buf, sizeof buf) > 0 && strstr(buf, victim))
        escaped("%s mentions the victim sandbox %s", p, victim);
    }
  }
  closedir(d);
}

int main(void) {
  victim = env_or("SPACE_VICTIM_ID", "sb_none");
  char p[512];
  snprintf(p, sizeof p, "%s/spaced.log", env_or("SPACE_STATE_DIR", "/var/lib/space"));
  refused("open(daemon log in the state dir)", open(p, O_RDONLY | O_CLOEXEC), ENOENT, 0);
  refused("open(/var/lib/space/spaced.log)", open("/var/lib/space/spaced.log", O_RDONLY), ENOENT,
          0);
  const char* dirs[] = {"/var/log", "/run", "/tmp", "/root", "/var/lib", "/dev/shm"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; ++i) scan(dirs[i], 0);
  note("%d files searched, none mentions %s", files, victim);
  finish();
}
