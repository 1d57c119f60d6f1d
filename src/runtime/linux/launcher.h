// Starts a sandbox's agent: clone3 into fresh user/pid/mount/uts/ipc namespaces (joined to the
// prepared network namespace and cgroups), the parent's half of the handshake (id maps, v1
// cgroups, release), and the child's recipe of named steps up to execveat of the agent.
//
// Between clone and exec the child runs only async-signal-safe code: raw syscalls over data
// the parent prepared. On failure it reports {step, index, errno} over a CLOEXEC pipe and
// exits; a successful exec closes the pipe, which is how the parent knows the agent runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "common/step_times.h"
#include "host/caps.h"
#include "host/cgroup.h"
#include "host/process.h"
#include "host/seccomp.h"
#include "runtime/linux/mounts.h"

namespace space::runtime::linux {

// The agent's fds (docs/agent-protocol.md, "Reattach").
inline constexpr int kChannelFd = 3;      // the channel to the daemon
inline constexpr int kSpareAgentFd = 4;   // spare socketpair, the agent's end
inline constexpr int kSpareDaemonFd = 5;  // spare socketpair, the end a restarted daemon takes
inline constexpr int kLayerFd = 6;        // the writable layer's tmpfs root, O_PATH
// The seccomp exec listener (exec auditing only), held by the agent for a restarted daemon.
inline constexpr int kExecListenerFd = 10;
// Fds the child holds only until exec (all close-on-exec).
inline constexpr int kLowerFdSlot = 11;     // the image rootfs, for the overlay's lowerdir
inline constexpr int kLayerMountSlot = 12;  // the writable layer, a detached mount until attached

struct LaunchRequest {
  std::string id;         // hostname
  uint32_t uid_base = 0;  // host uid/gid of sandbox root
  // SysV shared memory its IPC namespace may hold (kernel.shmall there); 0 = the kernel's
  // default. Segments outlive their processes, so the OOM killer cannot free them: without a
  // bound below the memory limit, they can leave the agent the only thing left to kill.
  uint64_t shm_bytes = 0;
  int netns_fd = -1;  // joined, not owned, by the sandbox
  int agent_fd = -1;  // sealed memfd with the agent binary
  const host::SeccompProgram* seccomp = nullptr;
  // With a notify_execs program: receives the exec listener before the agent's exec, which
  // waits for it to be answered (start the exec supervisor here).
  std::function<Result<void>(UniqueFd listener)> on_exec_listener;
  host::CapPlan caps;
  host::Cgroup* cgroup = nullptr;
  std::filesystem::path stage_dir;  // holds the empty mount points `layer`, `root`, `lower`
  std::filesystem::path lower_dir;  // the image rootfs
  // The writable layer as a detached mount (make_writable_layer), already populated: the child
  // attaches it at `layer` in its own mount namespace. Not owned; the caller closes it.
  int layer_fd = -1;
  const FsPlan* fs = nullptr;
  uint64_t nofile = 4096;  // RLIMIT_NOFILE inside (only ever lowered)
  std::chrono::milliseconds timeout{10000};
  StepTimes* times = nullptr;  // marks clone, id maps, cgroup attach, ..., the agent's exec
};

struct Launched {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd channel;  // the daemon's end
};

Result<Launched> launch(const LaunchRequest& req);

}  // namespace space::runtime::linux
