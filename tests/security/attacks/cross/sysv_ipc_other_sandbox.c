// Attaches to SysV IPC objects of another sandbox and of the host: the victim sandbox and the
// runner each created a shared-memory segment with a known key; this attempt looks them up
// by key, lists /proc/sysvipc/*, and tries ids 0..4096 directly (shmat/msgctl/semctl).
// Blocked by: each sandbox has its own IPC namespace.
// space-attack: sandbox=shared
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>

#include "../attack.h"

int main(void) {
  key_t victim = (key_t)strtol(env_or("SPACE_VICTIM_SHM_KEY", "0"), NULL, 10);
  key_t host = (key_t)strtol(env_or("SPACE_HOST_SHM_KEY", "0"), NULL, 10);
  refused("shmget(victim's key)", shmget(victim, 0, 0), ENOENT, 0);
  refused("shmget(host's key)", shmget(host, 0, 0), ENOENT, 0);
  int found = 0;
  for (int id = 0; id < 4096; ++id) {
    struct shmid_ds ds;
    if (shmctl(id, IPC_STAT, &ds) == 0) {
      if (ds.shm_perm.__key == victim || ds.shm_perm.__key == host) {
        escaped("shm id %d has a foreign key %#x", id, ds.shm_perm.__key);
      }
      ++found;
    }
  }
  char buf[4096];
  if (read_small("/proc/sysvipc/shm", buf, sizeof buf) > 0) {
    char vk[32], hk[32];
    snprintf(vk, sizeof vk, " %d ", victim);
    snprintf(hk, sizeof hk, " %d ", host);
    if (strstr(buf, vk) || strstr(buf, hk)) escaped("/proc/sysvipc/shm lists a foreign segment");
  }
  note("%d segments of our own visible, none foreign", found);
  finish();
}
