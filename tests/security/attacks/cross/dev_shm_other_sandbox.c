// Opens another sandbox's POSIX shared memory and semaphores (/dev/shm entries are how
// shm_open, sem_open and many IPC libraries meet): the victim created
// /dev/shm/victim-secret.
// Blocked by: /dev/shm is a tmpfs per sandbox.
// space-attack: sandbox=shared
#include <dirent.h>
#include <sys/mman.h>

#include "../attack.h"

int main(void) {
  refused("shm_open(victim-secret)", shm_open("/victim-secret", O_RDONLY, 0), ENOENT, 0);
  DIR* d = opendir("/dev/shm");
  struct dirent* e;
  int n = 0;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    ++n;
    if (strstr(e->d_name, "victim")) escaped("/dev/shm/%s is visible", e->d_name);
  }
  if (d) closedir(d);
  note("/dev/shm holds %d entries of our own", n);
  finish();
}
