// Exec auditing in the event loop (microVM guests; exec_audit.h): the filter is installed at
// start-up, before the agent spawns anything; its listener is one more fd in the epoll set;
// records go to the daemon in `proc_exec` frames on stream 0 while the channel keeps up, and
// wait (bounded) while it does not or while no daemon is attached.
#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstdio>
#include <string_view>

#include "agent/agent.h"
#include "agent/proc_table.h"

namespace space::agent {
namespace {

// Records are sent while less than this is queued on the channel: the channel's memory for them
// stays bounded, and exec output (flow-controlled on its own) is not starved.
constexpr size_t kExecAuditChannelWater = 1u << 20;
// Ancestors looked at to find the exec a process belongs to.
constexpr int kMaxAncestorHops = 64;

// The parent of `pid` from /proc/PID/stat; -1 if it is gone or unreadable.
pid_t parent_of(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return -1;
  char buf[1024];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  ProcEntry e;
  if (n <= 0 || !parse_proc_stat(std::string_view(buf, static_cast<size_t>(n)), e)) return -1;
  return e.ppid;
}

}  // namespace

Result<void> Agent::start_exec_audit() {
  auto audit = ExecAudit::install();
  if (!audit) {
    // Asked for: a failed start. As the guest's init (a kernel without seccomp user
    // notification): the guest works on, its execs audited only as the API started them.
    if (opts_.audit_execs) return fail(std::move(audit.error()));
    log_line("exec auditing is off: " + audit.error().message());
    return {};
  }
  exec_audit_ = std::move(*audit);
  // The filter is in place now: unless its listener is served, every exec would hang.
  return epoll_add(exec_audit_->fd(), EPOLLIN, key(kExecAudit, 0));
}

void Agent::on_exec_audit_readable() {
  exec_audit_->serve([this](pid_t ppid) { return exec_stream_of(ppid); });
}

// The exec a process runs under: the nearest shim among its ancestors, as for `ps`. Its
// parent (read while it waited in its exec) is usually that shim (the worker) or the worker.
std::optional<uint32_t> Agent::exec_stream_of(pid_t ppid) const {
  pid_t cur = ppid;
  for (int hops = 0; hops < kMaxAncestorHops && cur > 1; ++hops) {
    if (auto s = shims_.find(cur); s != shims_.end()) return s->second.stream;
    cur = parent_of(cur);
  }
  return std::nullopt;
}

void Agent::flush_exec_audit() {
  if (!exec_audit_ || !channel_) return;
  while (exec_audit_->pending() && channel_->queued() < kExecAuditChannelWater) {
    auto payload = exec_audit_->take_report();
    if (!payload) return;
    send(proto::FrameType::kProcExec, 0, *payload);
  }
}

}  // namespace space::agent
