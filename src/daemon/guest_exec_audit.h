// Guest-reported execs (microVM runtimes; docs/audit.md, "How execs are observed
// (microVMs)"): turns the `proc_exec` frames a sandbox's agent sends (proto/exec_report.h) into
// "proc.exec" audit events marked "guest_reported": true. Unlike the linux runtime's, these
// records come from inside the sandbox: a guest whose kernel or agent is compromised can forge
// or omit them, and the host cannot check them. What the host does guarantee is that they
// cannot flood it: every record is validated and bounded by the decoder, and a token bucket per
// sandbox (a record costs one token plus one per 4 KiB of argv and path) admits at most
// `burst` at once and `per_s` a second on average. Records beyond it, the agent's own drops
// (its queue was full) and records that were not valid are counted and written as one
// "proc.exec_dropped" event at most once a second, and once more when the channel closes.
// The daemon keeps nothing per record: a frame is handled on the channel's reader thread as it
// arrives.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/error.h"

namespace space::daemon {

class GuestExecAudit {
 public:
  struct Limits {
    double per_s = 200;   // tokens added per second
    double burst = 2000;  // the bucket's size (and what it holds at the start)
  };
  // Appends one audit event of the sandbox (Daemon::audit); may block while the log is behind.
  using Append = std::function<void(const std::string& kind, nlohmann::json data)>;
  // Seconds on a monotonic clock (tests pass their own).
  using Now = std::function<double()>;

  GuestExecAudit(Limits limits, Append append, Now now = {});

  // One `proc_exec` payload from the agent. kProtocol when it is malformed (the caller closes
  // the channel, as for every protocol violation).
  Result<void> on_report(std::string_view payload);
  // Writes the drops not yet recorded: the channel is closing. Later reports are still handled.
  void finish();

  struct Totals {
    uint64_t recorded = 0, rate_limited = 0, dropped_by_guest = 0, malformed = 0;
  };
  Totals totals() const;

 private:
  void report_drops(double now);  // mu_ held

  const Limits limits_;
  const Append append_;
  const Now now_;

  mutable std::mutex mu_;  // on_report runs on the reader thread, finish() on a closer's
  double tokens_;
  double refilled_at_ = -1;   // when tokens_ was last topped up; < 0: never
  double drops_at_ = -1e300;  // when the last proc.exec_dropped was written
  Totals totals_;
  Totals pending_;  // drops since the last proc.exec_dropped (recorded unused)
};

}  // namespace space::daemon
