// Guest-reported execs: validation, the per-sandbox rate limit and the drop counts (see
// guest_exec_audit.h), and how the daemon attaches one to a microVM sandbox's channel.
#include "daemon/guest_exec_audit.h"

#include <algorithm>
#include <chrono>

#include "daemon/daemon.h"
#include "proto/exec_report.h"

namespace space::daemon {
using nlohmann::json;

namespace {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One token, plus one per 4 KiB of what the record holds from the guest.
double record_cost(const json& r) {
  size_t bytes = 0;
  for (const char* key : {"path", "resolved", "cwd"})
    if (auto it = r.find(key); it != r.end() && it->is_string())
      bytes += it->get_ref<const std::string&>().size();
  if (auto it = r.find("argv"); it != r.end() && it->is_array())
    for (const json& a : *it)
      if (a.is_string()) bytes += a.get_ref<const std::string&>().size();
  return 1.0 + static_cast<double>(bytes / 4096);
}

}  // namespace

GuestExecAudit::GuestExecAudit(Limits limits, Append append, Now now)
    : limits_(limits),
      append_(std::move(append)),
      now_(now ? std::move(now) : Now(monotonic_seconds)),
      tokens_(limits.burst) {}

Result<void> GuestExecAudit::on_report(std::string_view payload) {
  proto::ExecReport report = TRY(proto::decode_exec_report(payload));
  std::lock_guard lock(mu_);
  const double now = now_();
  if (refilled_at_ >= 0)
    tokens_ = std::min(limits_.burst, tokens_ + (now - refilled_at_) * limits_.per_s);
  refilled_at_ = now;
  for (json& ev : report.events) {
    // A record bigger than the whole bucket would never pass: it costs the bucket at most.
    const double cost = std::min(record_cost(ev), limits_.burst);
    if (tokens_ < cost) {
      ++totals_.rate_limited;
      ++pending_.rate_limited;
      continue;
    }
    tokens_ -= cost;
    ev["guest_reported"] = true;
    append_("proc.exec", std::move(ev));
    ++totals_.recorded;
  }
  totals_.dropped_by_guest += report.dropped;
  pending_.dropped_by_guest += report.dropped;
  totals_.malformed += report.malformed;
  pending_.malformed += report.malformed;
  if (now - drops_at_ >= 1.0) report_drops(now);
  return {};
}

void GuestExecAudit::finish() {
  std::lock_guard lock(mu_);
  report_drops(now_());
}

void GuestExecAudit::report_drops(double now) {
  const uint64_t count = pending_.rate_limited + pending_.dropped_by_guest + pending_.malformed;
  if (count == 0) return;
  append_("proc.exec_dropped", {{"count", count},
                                {"rate_limited", pending_.rate_limited},
                                {"dropped_by_guest", pending_.dropped_by_guest},
                                {"malformed", pending_.malformed}});
  pending_ = Totals{};
  drops_at_ = now;
}

GuestExecAudit::Totals GuestExecAudit::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

// The daemon's side: microVM sandboxes only (the linux runtime's execs are seen from the host,
// exec_supervisor.h; its agent never reports), and not when exec auditing is off. A fresh
// limiter per channel: a reattach starts with a full bucket.
void Daemon::start_guest_exec_audit(Sandbox& sb) {
  if (!cfg_.audit_execs || !sb.inst || !sb.conn || !sb.inst->egress_over_channel()) return;
  auto g = std::make_shared<GuestExecAudit>(
      GuestExecAudit::Limits{cfg_.audit_guest_execs_per_s, cfg_.audit_guest_execs_burst},
      [this, id = sb.rec.id](const std::string& kind, json data) {
        audit(id, kind, std::move(data));
      });
  sb.guest_exec_audit = g;
  sb.conn->set_on_exec_report([g](std::string_view payload) { return g->on_report(payload); });
}

}  // namespace space::daemon
