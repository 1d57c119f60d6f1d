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
};

Result<SeccompProgram> compile_policy(const std::vector<PolicyRule>& policy);

// Child side, async-signal-safe: installs the program (requires no_new_privs). 0 or errno.
int install_seccomp(const SeccompProgram& program);

}  // namespace space::runtime::linux
