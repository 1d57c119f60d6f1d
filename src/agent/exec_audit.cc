// In-guest exec auditing: serving the filter's notifications and the bounded record queue
// (see exec_audit.h).
#include "agent/exec_audit.h"

#include <poll.h>

#include <vector>

#include "agent/agent.h"
#include "agent/response.h"
#include "common/exec_notify.h"
#include "proto/exec_report.h"
#include "proto/frame.h"

namespace space::agent {

Result<std::unique_ptr<ExecAudit>> ExecAudit::install(Limits limits) {
  UniqueFd listener = TRY_CTX(install_exec_notify_filter(), "installing the exec audit filter");
  return std::make_unique<ExecAudit>(limits, std::move(listener));
}

void ExecAudit::serve(const StreamOf& stream_of, int max) {
  // The agent stands in the guest's pid namespace and owns the guest's ids: pids and uids as
  // the guest sees them. The argv is bounded as the daemon will keep it.
  const ExecView view{.host = false, .uid_base = 0, .max_argv_bytes = proto::kMaxReportedArgvBytes};
  for (int i = 0; i < max; ++i) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)) return;  // nothing (more) pending
    auto notice = receive_exec(listener_.get(), view);
    if (!notice) {
      log_line("exec audit: " + notice.error().message());
      return;
    }
    if (!*notice) continue;  // the caller died before we got to it
    ExecNotice& n = **notice;
    ++seen_;
    if (n.event.contains("ppid") && n.event["ppid"].is_number_integer()) {
      auto stream = stream_of(n.event["ppid"].get<pid_t>());
      n.event["stream"] = stream ? nlohmann::json(*stream) : nlohmann::json(nullptr);
    } else {
      n.event["stream"] = nullptr;
    }
    // Go on first: the exec waits for our reads, never for the queue or the daemon.
    if (!n.caller_gone) {
      if (auto r = continue_exec(listener_.get(), n.id); !r)
        log_line("exec audit: " + r.error().message());
    }
    push(dump_json(n.event));
  }
}

void ExecAudit::push(std::string record) {
  const bool fits_frame = record.size() + proto::kExecReportOverhead <= proto::kMaxPayload;
  if (!fits_frame || queue_.size() >= limits_.queue_records ||
      queued_bytes_ + record.size() > limits_.queue_bytes) {
    ++dropped_;
    ++dropped_total_;
    return;
  }
  queued_bytes_ += record.size();
  queue_.push_back(std::move(record));
}

std::optional<std::string> ExecAudit::take_report() {
  if (!pending()) return std::nullopt;
  std::vector<std::string> batch;
  size_t bytes = proto::kExecReportOverhead;
  while (!queue_.empty() && batch.size() < proto::kMaxReportEvents) {
    const size_t next = queue_.front().size() + 1;
    // The first record always goes (push() made sure it fits a frame on its own).
    if (!batch.empty() && bytes + next > limits_.frame_bytes) break;
    bytes += next;
    queued_bytes_ -= queue_.front().size();
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  std::string payload = proto::encode_exec_report(batch, dropped_);
  dropped_ = 0;
  return payload;
}

}  // namespace space::agent
