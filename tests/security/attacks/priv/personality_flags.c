// Changes the execution domain to weaken the next exec: READ_IMPLIES_EXEC (every readable
// mapping executable), ADDR_NO_RANDOMIZE (no ASLR), ADDR_COMPAT_LAYOUT, MMAP_PAGE_ZERO (map
// page 0, for NULL-dereference exploits), and a value with high bits set.
// Blocked by: seccomp allows only PER_LINUX, PER_LINUX32 and UNAME26 variants and the query
// (EPERM for everything else).
// space-attack: sandbox=shared
#include <sys/personality.h>

#include "../attack.h"

int main(void) {
  struct {
    unsigned long v;
    const char* name;
  } tries[] = {{READ_IMPLIES_EXEC, "READ_IMPLIES_EXEC"},
               {ADDR_NO_RANDOMIZE, "ADDR_NO_RANDOMIZE"},
               {ADDR_COMPAT_LAYOUT, "ADDR_COMPAT_LAYOUT"},
               {MMAP_PAGE_ZERO, "MMAP_PAGE_ZERO"},
               {ADDR_NO_RANDOMIZE | 0x100000000UL, "ADDR_NO_RANDOMIZE | 1<<32"},
               {0x100000000UL, "1<<32 (truncates to PER_LINUX)"}};
  for (size_t i = 0; i < sizeof tries / sizeof tries[0]; ++i) {
    char what[96];
    snprintf(what, sizeof what, "personality(%s)", tries[i].name);
    long rc = syscall(SYS_personality, tries[i].v);
    if (rc >= 0) syscall(SYS_personality, 0);  // restore before anything else runs
    refused(what, rc, EPERM, 0);
  }
  long now = syscall(SYS_personality, 0xffffffffUL);
  if (now != 0) escaped("personality is %#lx after the attempts", now);
  finish();
}
