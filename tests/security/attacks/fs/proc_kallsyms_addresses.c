// Reads kernel symbol addresses from /proc/kallsyms and /proc/modules to defeat KASLR (a
// first step of most kernel exploits).
// Blocked by: sandbox root has no CAP_SYSLOG in the host's user namespace, so the kernel
// prints every address as zero (kptr_restrict).
// space-attack: sandbox=shared
#include "../attack.h"

int main(void) {
  FILE* f = fopen("/proc/kallsyms", "re");
  if (!f) {
    note("/proc/kallsyms: %s", errname(errno));
  } else {
    char line[512];
    int lines = 0, nonzero = 0;
    while (fgets(line, sizeof line, f) && lines < 200000) {
      ++lines;
      if (strtoull(line, NULL, 16) != 0) ++nonzero;
    }
    fclose(f);
    if (nonzero)
      escaped("/proc/kallsyms shows %d non-zero addresses", nonzero);
    else
      note("/proc/kallsyms: %d symbols, all addresses zero", lines);
  }
  f = fopen("/proc/modules", "re");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char* addr = strstr(line, " 0x");
      if (addr && strtoull(addr + 1, NULL, 16) != 0) escaped("/proc/modules shows addresses");
    }
    fclose(f);
  }
  finish();
}
