// space-upper-reader's confinement: once it has its arguments, before it reads a byte of the
// disk, the reader takes the host's confinement recipe (host/confine.h) with its seccomp role,
// host::upper_reader_role (host/seccomp_policy.h): a closed allowlist of what reading an open
// fd and printing to stdout take, and any other system call kills it. No open, no socket, no
// exec, no kill or ptrace: a parser that the disk took over can read the disk it was given and
// write its listing, and nothing else. The daemon has already made it an unprivileged uid with
// no_new_privs in namespaces of its own, with rlimits (runtime/vm_diff.cc).
#pragma once

#include "common/error.h"

namespace space::upper_reader {

// Installs the filter (with no_new_privs, which an unprivileged process needs for it).
// `disk_fd` is the only fd that may be read, sought or fstat'ed; writes go only to 1 and 2.
Result<void> confine(int disk_fd);

}  // namespace space::upper_reader
