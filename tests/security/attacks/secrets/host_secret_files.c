// Reads the host's secrets at their usual paths: /etc/shadow, SSH host keys, root's SSH keys
// and shell history, the daemon's state directory (its database holds every sandbox's
// record). The runner passes a salted SHA-256 of each host file it can read (the salt keeps
// plain hashes of host secrets out of the sandbox); any match means the sandbox saw the file.
// Blocked by: the sandbox's /etc is the image's generated minimal /etc; /root and the state
// directory are the sandbox's own (or absent).
// space-attack: sandbox=shared
#include "../attack.h"
#include "sha256.h"

int main(void) {
  char list[8192];
  snprintf(list, sizeof list, "%s", env_or("SPACE_HOST_SECRET_HASHES", ""));
  int checked = 0;
  char* save = NULL;
  for (char* item = strtok_r(list, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
    char* eq = strchr(item, '=');
    if (!eq) continue;
    *eq = 0;
    const char* path = item;
    const char* want = eq + 1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      note("%s: %s", path, errname(errno));
      continue;
    }
    struct sha256 h;
    sha256_init(&h);
    const char* salt = env_or("SPACE_HOST_SECRET_SALT", "");
    sha256_update(&h, (const unsigned char*)salt, strlen(salt));
    static unsigned char buf[1 << 16];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) sha256_update(&h, buf, (size_t)n);
    close(fd);
    char hex[65];
    sha256_hex(&h, hex);
    ++checked;
    if (strcmp(hex, want) == 0)
      escaped("%s is the host's file", path);
    else
      note("%s: the sandbox's own", path);
  }
  const char* state = env_or("SPACE_STATE_DIR", "/var/lib/space");
  char db[512];
  snprintf(db, sizeof db, "%s/space.db", state);
  refused("open(state dir's space.db)", open(db, O_RDONLY | O_CLOEXEC), ENOENT, 0);
  refused("open(/var/lib/space/space.db)", open("/var/lib/space/space.db", O_RDONLY), ENOENT, 0);
  note("%d host secret files compared", checked);
  finish();
}
