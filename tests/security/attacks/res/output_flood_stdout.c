// Floods stdout and stderr with 192 MiB as fast as the pipes take it, to blow up the daemon's
// or the CLI's memory on the way out. The runner samples spaced's RSS during the attempt.
// Blocked by: end-to-end flow control (a 1 MiB window per exec stream): the writer blocks in
// write() while the client reads, and the daemon buffers at most a window.
// space-attack: sandbox=shared verify=daemon_rss timeout=120
#include "../attack.h"

int main(void) {
  static char block[1 << 16];
  memset(block, 'A', sizeof block);
  block[sizeof block - 1] = '\n';
  size_t total = 0;
  for (int i = 0; i < 3072; ++i) {
    int fd = (i & 1) ? 2 : 1;
    ssize_t n = write(fd, block, sizeof block);
    if (n <= 0) broken("write: %s", strerror(errno));
    total += (size_t)n;
  }
  fflush(stderr);
  note("wrote %zu MiB to stdout+stderr; the runner checks the daemon's memory", total >> 20);
  finish();
}
