// The one confinement recipe: the ordered steps by which a process gives up what it will never
// need, for every process the host confines. space-egress (egressd/confine.h) and
// space-upper-reader (upper_reader/confine.h) run it on themselves; the linux runtime's sandbox
// child runs it between clone and exec (runtime/linux/launcher.cc). Each takes the steps its
// role needs, always in this order:
//
//   1. rlimits       RLIMIT_NOFILE and RLIMIT_CORE as planned (while still privileged)
//   2. groups, gid   no supplementary groups, then the new gid        (with an identity)
//   3. capabilities  the bounding set and the ambient set cut to the plan
//   4. uid           the new uid; leaving uid 0 without keep-caps clears the permitted set
//   5. capset        permitted = effective = the plan's, inheritable none
//   6. checks        nothing beyond the plan is left, root cannot come back   (with an identity)
//   7. not dumpable
//   8. no_new_privs  always
//   9. seccomp       the role's program (seccomp_policy.h), compiled beforehand: always last
//
// What is not common stays with the role: space-egress's private mount namespace hiding
// spaced's directories, the sandbox's namespaces and root, the reader's spawn (its uid,
// namespaces and rlimits are set by spaced, runtime/vm_diff.cc).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string_view>

#include "common/error.h"
#include "host/caps.h"
#include "host/seccomp.h"

namespace space::host {

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct ConfinePlan {
  std::optional<rlimit> nofile;    // 1
  std::optional<rlimit> core;      // 1
  std::optional<Identity> become;  // 2, 4, 6: never 0 (confine() refuses it)
  std::optional<CapPlan> caps;     // 3, 5: what stays; without it the capability sets are untouched
  bool not_dumpable = false;       // 7
  const SeccompProgram* seccomp = nullptr;  // 9: required
  // With a notify_execs program: receives the filter's listener fd (close-on-exec).
  int* listener = nullptr;
};

enum class ConfineStep {
  kNofile,
  kCore,
  kGroups,
  kGid,
  kCapBounding,
  kCapAmbient,
  kUid,
  kCapset,
  kCheckCaps,
  kCheckRoot,
  kNotDumpable,
  kNoNewPrivs,
  kSeccomp,
};
std::string_view confine_step_name(ConfineStep step);

struct ConfineFailure {
  ConfineStep step = ConfineStep::kSeccomp;
  int err = 0;  // 0: every step done
};

// The recipe, async-signal-safe (raw syscalls over the plan, no allocation): for a child
// between clone and exec. Stops at the first step that fails.
ConfineFailure confine_steps(const ConfinePlan& plan);

// The same for a process confining itself, failures as errors naming the step.
Result<void> confine(const ConfinePlan& plan);

}  // namespace space::host
