// Fills the writable layer: writes until the file system says no. With --disk 32M the sandbox
// must get ENOSPC at about 32 MiB, not fill the host's disk.
// Blocked by: the writable layer is a size-capped tmpfs.
// space-attack: sandbox=fresh opts=--disk=32M,--memory=256M timeout=60
#include "../attack.h"

int main(void) {
  static char block[1 << 20];
  memset(block, 0x33, sizeof block);
  int fd = open("/root/fill", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) broken("open: %s", strerror(errno));
  long total = 0;
  for (;;) {
    ssize_t n = write(fd, block, sizeof block);
    if (n <= 0) break;
    total += n;
    if (total > (256L << 20)) break;
  }
  int err = errno;
  close(fd);
  if (total > (40L << 20))
    escaped("%ld MiB written with a 32 MiB disk limit", total >> 20);
  else
    note("ENOSPC-style stop after %ld MiB (%s)", total >> 20, errname(err));
  unlink("/root/fill");
  finish();
}
