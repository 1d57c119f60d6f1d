// A thread bomb: threads count against the pids limit too (a limit on processes only would
// let one process create millions of tasks). Creates threads until pthread_create fails.
// Blocked by: the pids cgroup counts tasks (threads), limit 64 here.
// space-attack: sandbox=fresh opts=--pids=64 timeout=60 verify=pids_limit
#include <pthread.h>

#include "../attack.h"

static void* idle(void* arg) {
  (void)arg;
  pause();
  return NULL;
}

int main(void) {
  int made = 0, err = 0;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, 64 * 1024);
  for (int i = 0; i < 100000; ++i) {
    pthread_t t;
    err = pthread_create(&t, &a, idle, NULL);
    if (err) break;
    ++made;
  }
  if (made > 64)
    escaped("%d threads with a pids limit of 64", made);
  else
    note("pthread_create failed (%s) after %d threads", errname(err), made);
  finish();  // exit() ends the paused threads too
}
