// Pushes keystrokes into a terminal someone else reads (TIOCSTI), and TIOCLINUX: on the
// controlling terminal, /dev/tty, and a fresh pty pair (both ends).
// Blocked by: seccomp refuses ioctl(TIOCSTI) and ioctl(TIOCLINUX) (EPERM); execs have no
// controlling terminal (ENXIO on /dev/tty), and the devpts instance is the sandbox's own.
// space-attack: sandbox=shared
#include <sys/ioctl.h>

#include "../attack.h"

int main(void) {
  char c = 'x';
  refused("ioctl(0, TIOCSTI)", ioctl(0, TIOCSTI, &c), EPERM, 0);
  int tty = open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (tty >= 0) {
    refused("ioctl(/dev/tty, TIOCSTI)", ioctl(tty, TIOCSTI, &c), EPERM, 0);
    close(tty);
  } else {
    note("open(/dev/tty): %s", errname(errno));
  }
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) broken("posix_openpt: %s", strerror(errno));
  grantpt(master);
  unlockpt(master);
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  refused("ioctl(pty master, TIOCSTI)", ioctl(master, TIOCSTI, &c), EPERM, 0);
  if (slave >= 0) refused("ioctl(pty slave, TIOCSTI)", ioctl(slave, TIOCSTI, &c), EPERM, 0);
  char sub = 0;  // TIOCL_ subcommand 0 is invalid: harmless even if let through
  refused("ioctl(pty, TIOCLINUX)", ioctl(master, TIOCLINUX, &sub), EPERM, 0);
  // High bits above the 32-bit request must not slip past the filter.
  refused("ioctl(pty, TIOCSTI | 1<<32)",
          syscall(SYS_ioctl, master, (unsigned long)TIOCSTI | (1UL << 32), &c), EPERM, 0);
  finish();
}
