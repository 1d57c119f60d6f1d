// Plants overlayfs's private xattrs (user.overlay.redirect / origin / opaque / metacopy) in
// the writable layer, hoping overlayfs will follow a redirect to a path outside the lower
// layer or trust a forged origin file handle.
// Blocked by: overlayfs refuses to set its own private xattrs through the overlay
// (EOPNOTSUPP/EPERM); the sandbox cannot reach the upper directory directly.
// space-attack: sandbox=shared
#include <sys/xattr.h>

#include "../attack.h"

int main(void) {
  mkdir("/tmp/redir", 0755);
  int fd = open("/tmp/redir-file", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
  const char* names[] = {"user.overlay.redirect", "user.overlay.origin", "user.overlay.opaque",
                         "user.overlay.metacopy", "trusted.overlay.redirect"};
  const char* targets[] = {"/tmp/redir", "/tmp/redir-file"};
  for (size_t t = 0; t < 2; ++t) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
      char what[128];
      snprintf(what, sizeof what, "setxattr(%s, %s)", targets[t], names[i]);
      refused(what, setxattr(targets[t], names[i], "/../../../etc", 13, 0), EOPNOTSUPP, EPERM,
              ENOTSUP, 0);
    }
  }
  finish();
}
