// Ending a process the host started, by its pidfd: the sandbox's agent (linux runtime), a VMM
// and its jail (qemu, firecracker), space-upper-reader (runtime/vm_diff.cc).
#pragma once

#include <chrono>

#include "common/error.h"

namespace space::host {

// Kills the process behind `pidfd` (SIGKILL; for a pid-namespace init that is the whole
// namespace) and, if it is our child, reaps it. Waits at most `timeout` for it to exit.
Result<void> kill_and_reap(int pidfd, bool is_child, std::chrono::milliseconds timeout);

}  // namespace space::host
