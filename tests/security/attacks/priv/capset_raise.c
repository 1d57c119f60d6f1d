// Raises capabilities beyond the sandbox's set: capset with CAP_SYS_ADMIN/CAP_NET_ADMIN in
// permitted, an ambient raise, re-adding dropped bounding capabilities, and
// PR_SET_SECUREBITS games.
// Blocked by: capabilities outside the bounding set can never be (re)gained; capset refuses
// to grow the permitted set (EPERM).
// space-attack: sandbox=shared
#include <linux/capability.h>
#include <sys/prctl.h>

#include "../attack.h"

int main(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) broken("capget: %s", strerror(errno));
  struct __user_cap_data_struct more[2];
  memcpy(more, d, sizeof d);
  more[0].permitted |= 1u << CAP_SYS_ADMIN | 1u << CAP_NET_ADMIN | 1u << CAP_SYS_PTRACE;
  more[0].effective = more[0].permitted;
  refused("capset(+SYS_ADMIN,NET_ADMIN,SYS_PTRACE)", syscall(SYS_capset, &h, more), EPERM, 0);
  more[0] = d[0];
  more[0].inheritable |= 1u << CAP_SYS_ADMIN;
  refused("capset(inheritable +SYS_ADMIN)", syscall(SYS_capset, &h, more), EPERM, 0);
  refused("PR_CAP_AMBIENT_RAISE(SYS_ADMIN)",
          prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0), EPERM, 0);
  if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 1) escaped("SYS_ADMIN in the bounding set");
  if (prctl(PR_CAPBSET_READ, CAP_NET_RAW, 0, 0, 0) == 1) escaped("NET_RAW in the bounding set");
  if (prctl(PR_CAPBSET_READ, CAP_SYS_PTRACE, 0, 0, 0) == 1)
    escaped("SYS_PTRACE in the bounding set");
  if (prctl(PR_CAPBSET_READ, CAP_MKNOD, 0, 0, 0) == 1) escaped("MKNOD in the bounding set");
  note("SYS_ADMIN, NET_RAW, SYS_PTRACE, MKNOD are outside the bounding set");
  // Keep-caps across a uid change does not bring back anything outside the bound either.
  (void)prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
  if (syscall(SYS_capget, &h, d) == 0 &&
      (d[0].effective & (1u << CAP_SYS_ADMIN | 1u << CAP_NET_ADMIN))) {
    escaped("CapEff holds SYS_ADMIN or NET_ADMIN");
  }
  finish();
}
