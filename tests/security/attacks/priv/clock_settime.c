// Changes the host's clock, which every process and every certificate check shares:
// clock_settime, settimeofday, adjtimex and clock_adjtime (with invalid values, so nothing
// could change even if a call were let through).
// Blocked by: seccomp refuses all four (EPERM); CAP_SYS_TIME is not in the set.
// space-attack: sandbox=shared
#include <sys/time.h>
#include <sys/timex.h>
#include <time.h>

#include "../attack.h"

int main(void) {
  struct timespec bad = {.tv_sec = 0, .tv_nsec = 2000000000L};
  refused("clock_settime(REALTIME, invalid)", syscall(SYS_clock_settime, CLOCK_REALTIME, &bad),
          EPERM, 0);
  struct timeval tv = {.tv_sec = 0, .tv_usec = 5000000};
  refused("settimeofday(invalid)", syscall(SYS_settimeofday, &tv, NULL), EPERM, 0);
  struct timex tx = {.modes = ADJ_OFFSET | 0x8000 /* invalid mode bit */};
  refused("adjtimex(ADJ_OFFSET)", syscall(SYS_adjtimex, &tx), EPERM, 0);
  refused("clock_adjtime(REALTIME)", syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx), EPERM, 0);
  finish();
}
