// Creates device nodes for host hardware — the host's disk (block 8:0, 253:0, 254:0),
// /dev/mem (1:1), /dev/kmsg (1:11) — to read or write them directly.
// Blocked by: no CAP_MKNOD, and a user namespace cannot create devices at all (EPERM); the
// writable layer is nodev besides.
// space-attack: sandbox=shared
#include <sys/sysmacros.h>

#include "../attack.h"

int main(void) {
  struct {
    const char* name;
    mode_t type;
    int major, minor;
  } nodes[] = {{"/tmp/sda", S_IFBLK, 8, 0},   {"/tmp/vda", S_IFBLK, 254, 0},
               {"/tmp/dm0", S_IFBLK, 253, 0}, {"/tmp/mem", S_IFCHR, 1, 1},
               {"/tmp/kmsg", S_IFCHR, 1, 11}, {"/dev/shm/mem", S_IFCHR, 1, 1},
               {"/dev/sda", S_IFBLK, 8, 0}};
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; ++i) {
    char what[96];
    snprintf(what, sizeof what, "mknod(%s, %d:%d)", nodes[i].name, nodes[i].major, nodes[i].minor);
    int rc = mknod(nodes[i].name, nodes[i].type | 0600, makedev(nodes[i].major, nodes[i].minor));
    if (rc == 0) {
      int fd = open(nodes[i].name, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        char b;
        escaped("%s created and opened (read %zd)", what, read(fd, &b, 1));
        close(fd);
      } else {
        note("%s created but unusable: %s", what, errname(errno));
      }
      unlink(nodes[i].name);
      continue;
    }
    refused(what, rc, EPERM, EROFS, 0);
  }
  finish();
}
