// Opens perf events: CPU-wide hardware counters (side channels across the host), a kernel
// tracepoint, and a software event on this process.
// Blocked by: seccomp refuses perf_event_open (EPERM).
// space-attack: sandbox=shared
#include <linux/perf_event.h>

#include "../attack.h"

int main(void) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = PERF_COUNT_HW_CPU_CYCLES;
  refused("perf_event_open(cycles, all processes, cpu 0)",
          syscall(SYS_perf_event_open, &attr, -1, 0, -1, 0), EPERM, 0);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  refused("perf_event_open(cpu clock, self)", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0),
          EPERM, 0);
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = 1;
  refused("perf_event_open(tracepoint)", syscall(SYS_perf_event_open, &attr, -1, 0, -1, 0), EPERM,
          0);
  finish();
}
