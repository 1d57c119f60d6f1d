// The per-exec shim: the agent forks one for every exec. The shim becomes a session leader and
// a child subreaper, forks the worker (vfork: it only execs), reports {started pid} or
// {failed step, errno} and later the worker's wait status to the agent over the status pipe,
// and keeps reaping re-parented orphans of the exec's tree until it has no children left.
// Signal numbers the agent writes to the control pipe are delivered to the whole tree:
// kill(-worker_pgid) plus every descendant of the shim found through /proc ppid links; for
// SIGKILL it repeats until the shim has no children. If the control pipe reaches EOF (the agent
// is gone) the shim kills the tree and exits.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "agent/exec_spec.h"
#include "common/error.h"
#include "common/fd.h"

namespace space::agent {

// One record on the status pipe (12 bytes, below PIPE_BUF, so writes are atomic).
struct ShimRecord {
  // kForked is written by the worker itself just before execve, so the agent knows its pid
  // even if a sandbox process kills the shim before the shim's own kStarted.
  enum Kind : uint32_t { kStarted = 1, kFailed = 2, kExited = 3, kForked = 4 };
  uint32_t kind;
  int32_t a;  // kStarted/kForked: worker pid; kFailed: WorkerStep; kExited: wait status
  int32_t b;  // kFailed: errno
};
static_assert(sizeof(ShimRecord) == 12);

// The agent's side of a running shim. The agent-side pipe ends are non-blocking.
struct ShimHandle {
  pid_t pid = -1;
  UniqueFd status;    // read ShimRecords
  UniqueFd control;   // write int32 signal numbers
  UniqueFd stdin_w;   // valid if spec.stdin_pipe
  UniqueFd stdout_r;  // valid unless spec.detach
  UniqueFd stderr_r;  // valid unless spec.detach or spec.tty
  UniqueFd tty;       // spec.tty: the terminal's master side (stdout_r and stdin_w are dups)
};

// Forks the shim for spec. Must be called from a single-threaded process with SIGCHLD blocked
// (the shim inherits the mask and takes SIGCHLD through its own signalfd).
Result<ShimHandle> spawn_shim(const ExecSpec& spec);

}  // namespace space::agent
