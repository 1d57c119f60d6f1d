// Pins memory so the host cannot reclaim it: mlockall(MCL_CURRENT|MCL_FUTURE), mlock of a
// 256 MiB mapping, and raising RLIMIT_MEMLOCK.
// Blocked by: no CAP_IPC_LOCK (RLIMIT_MEMLOCK applies, and cannot be raised: EPERM); what
// is locked is still charged to the sandbox's memory cgroup.
// space-attack: sandbox=fresh opts=--memory=64M timeout=60
#include <sys/mman.h>
#include <sys/resource.h>

#include "../attack.h"

int main(void) {
  struct rlimit lim;
  getrlimit(RLIMIT_MEMLOCK, &lim);
  note("RLIMIT_MEMLOCK %llu/%llu", (unsigned long long)lim.rlim_cur,
       (unsigned long long)lim.rlim_max);
  struct rlimit inf = {RLIM_INFINITY, RLIM_INFINITY};
  if (lim.rlim_max != RLIM_INFINITY) {
    refused("setrlimit(MEMLOCK, unlimited)", setrlimit(RLIMIT_MEMLOCK, &inf), EPERM, 0);
  }
  size_t len = 256u << 20;
  char* m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) broken("mmap");
  int rc = mlock(m, len);
  if (rc == 0)
    escaped("mlock of 256 MiB succeeded with a 64 MiB memory limit");
  else
    note("mlock(256 MiB): %s", errname(errno));
  finish();
}
