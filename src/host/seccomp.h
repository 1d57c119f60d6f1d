// Compiles a seccomp role (seccomp_policy.h) into a classic BPF program with libseccomp, before
// the process that installs it is confined: in the daemon for the sandbox (whose child then
// installs it with a single seccomp(2) call and needs no allocation or library code between
// clone and exec), in space-egress and space-upper-reader before their confinement
// (confine.h). The program leaves libseccomp through a pipe, not a file: space-upper-reader
// compiles its own under RLIMIT_FSIZE 0.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "common/error.h"
#include "host/seccomp_policy.h"

namespace space::host {

struct SeccompProgram {
  std::vector<sock_filter> instructions;
  std::vector<std::string> unresolved;  // rows whose syscall does not exist on this arch
  bool notify_execs = false;            // execve/execveat return SCMP_ACT_NOTIFY (exec auditing)
};

// With `notify_execs`, execve and execveat also become user notifications for the exec
// supervisor (exec_supervisor.h): reason "every exec is recorded in the audit log before it
// runs; without a supervisor the kernel fails it with ENOSYS".
Result<SeccompProgram> compile_policy(const std::vector<PolicyRule>& policy,
                                      bool notify_execs = false);
// A role with its own answer for unmatched calls (upper_reader_role's allowlist).
Result<SeccompProgram> compile_policy(const SeccompRole& role);

// Child side, async-signal-safe: installs the program (requires no_new_privs). 0 or errno.
int install_seccomp(const SeccompProgram& program);
// Same, for a notify_execs program: installs it with SECCOMP_FILTER_FLAG_NEW_LISTENER and
// stores the listener fd (close-on-exec) in *listener. 0 or errno.
int install_seccomp_listener(const SeccompProgram& program, int* listener);

}  // namespace space::host
