// Killing and reaping a process by its pidfd (see process.h).
#include "host/process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <string>

#include "host/syscalls.h"

namespace space::host {

Result<void> kill_and_reap(int pidfd, bool is_child, std::chrono::milliseconds timeout) {
  if (pidfd < 0) return {};
  if (sys_pidfd_send_signal(pidfd, SIGKILL) != 0 && errno != ESRCH) {
    return fail_sys("pidfd_send_signal", "SIGKILL");
  }
  // A pidfd polls readable once the process has exited (for a namespace init: once every
  // process of the namespace is gone).
  pollfd pfd{pidfd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    return fail(Code::kTimeout, "the agent did not exit within " + std::to_string(timeout.count()) +
                                    " ms of SIGKILL");
  }
  if (is_child) {
    siginfo_t info{};
    // ECHILD: somebody else reaped it (a daemon-wide SIGCHLD handler); it is gone either way.
    if (::waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG) != 0 &&
        errno != ECHILD) {
      return fail_sys("waitid", "P_PIDFD");
    }
  }
  return {};
}

}  // namespace space::host
