// The reader's confinement (confine.h): no_new_privs and the upper-reader seccomp role, the
// only steps of the host's recipe it takes itself. The unit test
// tests/unit/upper_reader/ext4_upper_test.cc checks that a confined process is killed for open,
// socket and a read of another fd, and can still do the walk.
#include "upper_reader/confine.h"

#include "host/confine.h"
#include "host/seccomp_policy.h"

namespace space::upper_reader {

Result<void> confine(int disk_fd) {
  auto program = TRY(host::compile_policy(host::upper_reader_role(disk_fd)));
  return host::confine({.seccomp = &program});
}

}  // namespace space::upper_reader
