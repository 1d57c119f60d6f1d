// The exec supervisor (see exec_supervisor.h). What the sandbox shows is read by
// common/exec_notify's describe_exec (every read bounded, a failure only marks a field
// unknown). The supervisor never answers with an error and never skips the sink: an exec
// either waits for its event to be recorded or does not happen.
#include "runtime/linux/exec_supervisor.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace space::runtime::linux {

Result<std::unique_ptr<ExecSupervisor>> ExecSupervisor::start(UniqueFd listener, uint32_t uid_base,
                                                              Sink sink) {
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return fail_sys("eventfd", "exec supervisor");
  std::unique_ptr<ExecSupervisor> s(
      new ExecSupervisor(std::move(listener), std::move(stop), uid_base, std::move(sink)));
  s->thread_ = std::thread([p = s.get()] { p->loop(); });
  return s;
}

ExecSupervisor::ExecSupervisor(UniqueFd listener, UniqueFd stop, uint32_t uid_base, Sink sink)
    : listener_(std::move(listener)),
      stop_(std::move(stop)),
      uid_base_(uid_base),
      sink_(std::move(sink)) {}

ExecSupervisor::~ExecSupervisor() {
  uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void ExecSupervisor::loop() {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("exec supervisor: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) return;  // no task uses the filter
    if (!(fds[0].revents & POLLIN)) continue;

    // The sandbox's pids are in its own namespace; its uids are shifted by uid_base.
    auto notice = receive_exec(listener_.get(), ExecView{.host = true, .uid_base = uid_base_});
    if (!notice) {
      spdlog::error("exec supervisor: {}", notice.error().message());
      return;
    }
    if (!*notice) continue;  // the caller died meanwhile
    ExecNotice& exec = **notice;
    if (exec.caller_gone) {  // died before its exec: recorded, nothing to answer
      sink_(std::move(exec.event));
      continue;
    }
    sink_(std::move(exec.event));  // may block while the audit log is behind: the exec waits
    if (auto r = continue_exec(listener_.get(), exec.id); !r)
      spdlog::warn("exec supervisor: {}", r.error().message());
  }
}

}  // namespace space::runtime::linux
