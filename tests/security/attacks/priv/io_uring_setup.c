// Sets up an io_uring (a second system-call interface that bypasses seccomp for the
// operations it carries, and a rich source of kernel CVEs).
// Blocked by: seccomp refuses io_uring_setup, io_uring_enter and io_uring_register (EPERM).
// space-attack: sandbox=shared
#include <linux/io_uring.h>

#include "../attack.h"

int main(void) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  refused("io_uring_setup(8)", syscall(SYS_io_uring_setup, 8, &p), EPERM, 0);
  refused("io_uring_enter(-1)", syscall(SYS_io_uring_enter, -1, 1, 0, 0, NULL, 0), EPERM, 0);
  refused("io_uring_register(-1)", syscall(SYS_io_uring_register, -1, 0, NULL, 0), EPERM, 0);
  finish();
}
