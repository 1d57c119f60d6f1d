// Compiles the seccomp policy (seccomp_policy.h) into a classic BPF program once, in the
// daemon, with libseccomp; the sandbox child then installs it with a single seccomp(2) call
// and needs no allocation or library code between clone and exec.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "common/error.h"
#include "runtime/linux/seccomp_policy.h"

namespace space::runtime::linux {

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

// Child side, async-signal-safe: installs the program (requires no_new_privs). 0 or errno.
int install_seccomp(const SeccompProgram& program);
// Same, for a notify_execs program: installs it with SECCOMP_FILTER_FLAG_NEW_LISTENER and
// stores the listener fd (close-on-exec) in *listener. 0 or errno.
int install_seccomp_listener(const SeccompProgram& program, int* listener);

}  // namespace space::runtime::linux
