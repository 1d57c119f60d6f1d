// Exec auditing for the linux runtime: the sandbox's seccomp filter returns SCMP_ACT_NOTIFY for
// execve and execveat, and this supervisor, outside the sandbox, receives each notification on
// the filter's listener fd, reads the caller's path, argv, cwd, parent and uid from /proc,
// hands the event to a sink (the daemon's audit log, which may block: the exec then waits),
// and only then lets the call continue (SECCOMP_USER_NOTIF_FLAG_CONTINUE). If the supervisor
// is gone and every listener copy is closed, the kernel fails the sandbox's execs with ENOSYS:
// it fails closed. The agent holds a copy of the listener (fd kExecListenerFd, see
// docs/agent-protocol.md) so a restarted daemon can take it back with pidfd_getfd. Receiving
// and describing a notification is common/exec_notify.h, shared with the microVM agent.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/error.h"
#include "common/exec_notify.h"
#include "common/fd.h"

namespace space::runtime::linux {

class ExecSupervisor {
 public:
  // Called on the supervisor's thread with one "proc.exec" event's data (docs/audit.md).
  using Sink = std::function<void(nlohmann::json)>;

  // Takes the listener; `uid_base` maps host uids back to sandbox uids.
  static Result<std::unique_ptr<ExecSupervisor>> start(UniqueFd listener, uint32_t uid_base,
                                                       Sink sink);
  ~ExecSupervisor();  // stops the thread and closes our listener copy
  ExecSupervisor(const ExecSupervisor&) = delete;
  ExecSupervisor& operator=(const ExecSupervisor&) = delete;

  // Whether `fd` is a seccomp user-notification listener (checked on fds taken from agents).
  static bool is_listener(int fd) { return is_exec_listener(fd); }

 private:
  ExecSupervisor(UniqueFd listener, UniqueFd stop, uint32_t uid_base, Sink sink);
  void loop();

  UniqueFd listener_;
  UniqueFd stop_;  // eventfd
  uint32_t uid_base_;
  Sink sink_;
  std::thread thread_;
};

}  // namespace space::runtime::linux
