// Exec auditing by seccomp user notification: the part that the linux runtime's supervisor
// (in spaced, outside the jail: runtime/linux/exec_supervisor.h) and a microVM's agent (inside
// the guest: agent/exec_audit.h) share. A seccomp filter returns SECCOMP_RET_USER_NOTIF for
// execve and execveat; whoever holds the filter's listener receives each call while the caller
// waits in it (receive_exec), reads the caller's path, argv, cwd, parent and uid from /proc
// (describe_exec: the data of a "proc.exec" audit event, docs/audit.md), and then lets the
// call go on (continue_exec, SECCOMP_USER_NOTIF_FLAG_CONTINUE). What to do in between, and how
// long the caller may wait, is the holder's business.
//
// Everything read from the caller is hostile: pointers may be wild, strings unterminated,
// /proc entries gone. Every read is bounded and a failure only marks a field unknown.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace space {

// Bounds on what one event records from the caller's memory.
inline constexpr size_t kMaxExecArgs = 256;       // arguments
inline constexpr size_t kMaxExecArgBytes = 4096;  // bytes of one argument, and of the path

// Where the reader stands, and how much it keeps.
struct ExecView {
  // true: outside the caller's pid namespace (spaced, for a linux-runtime sandbox). `pid` is
  // the caller's pid in its own namespace (the innermost NSpid), `host_pid` is added, and a
  // parent outside that namespace shows as 0. false: in the caller's pid namespace (a guest's
  // agent): `pid` and `ppid` as this process sees them.
  bool host = true;
  uint32_t uid_base = 0;  // subtracted from the caller's uid (the sandbox's host id range)
  // All arguments together; the argument that crosses it is cut, later ones are left out, and
  // argv_truncated is set. kMaxExecArgs and kMaxExecArgBytes apply in any case.
  size_t max_argv_bytes = SIZE_MAX;
};

// An exec call as the filter saw it (struct seccomp_notif's pid and data).
struct ExecCall {
  pid_t pid = 0;
  uint32_t arch = 0;  // AUDIT_ARCH_*
  int nr = -1;
  uint64_t args[6] = {};
};

// The system-call ABIs whose execve/execveat this build recognizes: the native one and, on
// x86_64, x32 and i386 (IA-32 emulation), on aarch64 32-bit arm.
struct ExecAbi {
  bool at = false;        // execveat (dirfd, path, argv, envp, flags) rather than execve
  unsigned ptr_size = 8;  // bytes of a pointer in the caller's argv array
  const char* name = "";  // "" for the native ABI, else "x32", "i386", "arm"
};
std::optional<ExecAbi> exec_abi(uint32_t arch, int nr);

// The "proc.exec" data for `call` (docs/audit.md): syscall, pid, ppid, uid, cwd, path,
// resolved, argv and the flags that say what could not be read. A call that is not an exec
// gives {"syscall": nr, "pid": null}.
nlohmann::json describe_exec(const ExecCall& call, const ExecView& view);

// A classic BPF program for seccomp: SECCOMP_RET_USER_NOTIF for execve and execveat of every
// ABI exec_abi() knows, SECCOMP_RET_ALLOW for everything else (other ABIs included). Built
// without libseccomp, so that the statically linked agent can install it.
std::vector<sock_filter> exec_notify_program();

// Installs exec_notify_program() on the calling thread with SECCOMP_FILTER_FLAG_NEW_LISTENER
// and returns the listener (close-on-exec). Every child forked afterwards inherits the filter;
// threads that exist already do not. Needs CAP_SYS_ADMIN or no_new_privs, and a kernel with
// SECCOMP_USER_NOTIF_FLAG_CONTINUE (5.5).
Result<UniqueFd> install_exec_notify_filter();

// Whether `fd` is a seccomp user-notification listener.
bool is_exec_listener(int fd);

// One received exec notification.
struct ExecNotice {
  uint64_t id = 0;       // the notification's cookie, for continue_exec()
  nlohmann::json event;  // describe_exec()
  // The caller died before its exec went on (it did not run); `event` then says
  // "caller_gone": true and there is nothing to answer.
  bool caller_gone = false;
};

// Receives one notification from `listener` and describes it. Blocks until one is pending, so
// poll the listener for POLLIN first. nullopt when there was nothing to receive after all (the
// caller died first, or a signal interrupted the wait). An error means the listener is
// unusable.
Result<std::optional<ExecNotice>> receive_exec(int listener, const ExecView& view);

// Lets the exec of notification `id` go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE). A caller that
// died meanwhile is not an error.
Result<void> continue_exec(int listener, uint64_t id);

}  // namespace space
