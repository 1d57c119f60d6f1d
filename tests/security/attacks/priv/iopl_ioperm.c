// Gains raw I/O port access (iopl(3), ioperm) to talk to host hardware directly: the PCI
// configuration space (0xcf8), the keyboard controller (0x64, reset), the CMOS (0x70).
// Blocked by: seccomp refuses iopl and ioperm (EPERM); CAP_SYS_RAWIO is not in the set.
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  refused("iopl(3)", syscall(SYS_iopl, 3), EPERM, 0);
  refused("ioperm(0xcf8, 8, 1)", syscall(SYS_ioperm, 0xcf8, 8, 1), EPERM, 0);
  refused("ioperm(0x64, 1, 1)", syscall(SYS_ioperm, 0x64, 1, 1), EPERM, 0);
  refused("open(/dev/port)", open("/dev/port", O_RDWR | O_CLOEXEC), ENOENT, 0);
  finish();
}
