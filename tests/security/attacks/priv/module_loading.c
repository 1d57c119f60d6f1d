// Loads code into the host kernel: init_module with an (invalid) image, finit_module on a
// file, delete_module of a loaded module, and the request_module path via an unknown socket
// family. The runner compares /proc/modules before and after.
// Blocked by: seccomp refuses init_module, finit_module and delete_module (EPERM).
// space-attack: sandbox=shared
#include <sys/socket.h>

#include "../attack.h"

int main(void) {
  static const char image[] = "\177ELF not a module";
  refused("init_module(image)", syscall(SYS_init_module, image, sizeof image, ""), EPERM, 0);
  int fd = open("/usr/bin/true", O_RDONLY | O_CLOEXEC);
  refused("finit_module(/usr/bin/true)", syscall(SYS_finit_module, fd, "", 0), EPERM, 0);
  refused("delete_module(overlay)", syscall(SYS_delete_module, "overlay", O_NONBLOCK), EPERM, 0);
  // An unknown family would make the kernel ask modprobe (on the host) for net-pf-N.
  int s = socket(40 /* AF_VSOCK */, SOCK_STREAM, 0);
  refused("socket(AF_VSOCK)", s, EAFNOSUPPORT, 0);
  finish();
}
