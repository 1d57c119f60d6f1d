// Exhausts inodes with empty files (a disk-size limit alone does not stop that): creates up to
// 200000 files; the writable layer's inode limit (4096 for --disk 32M) must stop it early.
// Blocked by: nr_inodes on the writable layer's tmpfs.
// space-attack: sandbox=fresh opts=--disk=32M timeout=60
#include "../attack.h"

int main(void) {
  mkdir("/root/inodes", 0755);
  int dir = open("/root/inodes", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int made = 0, err = 0;
  for (int i = 0; i < 200000; ++i) {
    char name[32];
    snprintf(name, sizeof name, "f%d", i);
    int fd = openat(dir, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      err = errno;
      break;
    }
    close(fd);
    ++made;
  }
  if (made > 8192)
    escaped("%d inodes created with a 4096-inode limit", made);
  else
    note("stopped after %d files (%s)", made, errname(err));
  finish();
}
