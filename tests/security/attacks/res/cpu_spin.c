// Burns CPU on 4 threads for 2 seconds with a 0.2 CPU quota: the sandbox must get about 0.4
// CPU-seconds, not 8. (Measured from inside with getrusage; the quota is an upper bound, so
// a loaded host can only make the number smaller.)
// Blocked by: the cpu cgroup quota (cfs_quota_us or cpu.max).
// space-attack: sandbox=fresh opts=--cpus=0.2 timeout=60
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include "../attack.h"

static volatile int stop;

static void* spin(void* arg) {
  (void)arg;
  volatile unsigned long x = 0;
  while (!stop) ++x;
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
  pthread_t t[4];
  double t0 = now();
  for (int i = 0; i < 4; ++i) pthread_create(&t[i], NULL, spin, NULL);
  while (now() - t0 < 2.0) usleep(50000);
  stop = 1;
  for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
  double wall = now() - t0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
  // 0.2 CPU over `wall`, plus one CFS period of slack per thread.
  double allowed = 0.2 * wall * 1.5 + 0.1;
  if (cpu > allowed)
    escaped("%.2f CPU-seconds in %.2fs with a 0.2 CPU quota", cpu, wall);
  else
    note("%.2f CPU-seconds in %.2fs (quota 0.2 CPU)", cpu, wall);
  finish();
}
