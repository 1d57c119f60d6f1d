// Replaces the running host kernel: kexec_load and kexec_file_load (invalid arguments, so
// nothing could happen even if the call were let through).
// Blocked by: seccomp refuses both (EPERM).
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  refused("kexec_load(bad flags)", syscall(SYS_kexec_load, 0, 0, NULL, 0xdead0000UL), EPERM, 0);
  refused("kexec_file_load(-1, -1)", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0xdead0000UL),
          EPERM, 0);
  finish();
}
