// Exec auditing inside a microVM guest (docs/audit.md, "How execs are observed (microVMs)").
// As the guest's init the agent installs, on itself and before it starts anything, a seccomp
// filter that turns execve and execveat into user notifications (common/exec_notify.h, the same
// mechanism and code as the linux runtime's supervisor, which runs on the host). Every process
// the agent spawns, and all their descendants, inherit it: each exec stops until the agent has
// read the call from /proc. The agent lets it go on at once — an exec never waits for the daemon
// — and queues the record; the event loop sends queued records to the daemon in `proc_exec`
// frames (proto/exec_report.h) while the channel keeps up. The queue is bounded: a record that
// does not fit (the daemon is slow, or no daemon is attached) is counted, and the count goes out
// with the next frame as "dropped".
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace space::agent {

class ExecAudit {
 public:
  struct Limits {
    size_t queue_bytes = 1u << 20;  // serialized records waiting for the channel
    size_t queue_records = 4096;
    size_t frame_bytes = 256u << 10;  // one proc_exec payload, at most (records are smaller)
  };
  // The API exec (its stream) that a process runs under, from its parent's pid; nullopt for
  // processes outside any exec.
  using StreamOf = std::function<std::optional<uint32_t>(pid_t ppid)>;

  // Installs the filter on the calling thread: children forked afterwards are audited.
  static Result<std::unique_ptr<ExecAudit>> install(Limits limits);
  static Result<std::unique_ptr<ExecAudit>> install() { return install(Limits{}); }
  // Without a filter (tests of the queue): push() and take_report() only.
  explicit ExecAudit(Limits limits, UniqueFd listener = {})
      : limits_(limits), listener_(std::move(listener)) {}

  int fd() const { return listener_.get(); }

  // Serves the notifications pending on the listener, at most `max` of them (so that a storm
  // cannot starve the rest of the event loop): each exec is read, its record queued, and the
  // exec let go.
  void serve(const StreamOf& stream_of, int max = 64);

  // Queues one serialized record, or counts it as dropped when the queue is full.
  void push(std::string record);
  // The next `proc_exec` payload: as many queued records as fit in limits.frame_bytes and the
  // drops counted since the previous payload; nullopt when there is nothing to report.
  std::optional<std::string> take_report();
  bool pending() const { return !queue_.empty() || dropped_ > 0; }

  uint64_t seen() const { return seen_; }  // notifications served
  uint64_t dropped_total() const { return dropped_total_; }

 private:
  Limits limits_;
  UniqueFd listener_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  uint64_t dropped_ = 0;  // since the last report
  uint64_t dropped_total_ = 0;
  uint64_t seen_ = 0;
};

}  // namespace space::agent
