// The service's results as the JSON of api/openapi.yaml. Times are written as RFC 3339
// (common/clock.h); an empty std::optional is null where the schema says nullable and is left
// out where it does not. Free-form parts that arrive as JSON text (a runtime's VM details, an
// audit event's data) are parsed back and passed on as they are.
#include "api/views.h"

#include "common/clock.h"

namespace space::api {
using nlohmann::json;

namespace {

template <typename T>
json value_or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json rfc3339_or_null(const std::optional<double>& t) {
  return t ? json(rfc3339(*t)) : json(nullptr);
}

// JSON text that the daemon wrote (so it parses); null if it somehow does not.
json parse_json_text(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json(nullptr) : j;
}

}  // namespace

json to_json(const daemon::SandboxInfo& s) {
  json j = {{"id", s.id},
            {"state", std::string(daemon::to_string(s.state))},
            {"runtime", s.runtime},
            {"image", s.image},
            {"profile", s.profile},
            {"created_at", rfc3339(s.created_at)},
            {"expires_at", rfc3339_or_null(s.expires_at)},
            {"limits",
             {{"memory", s.limits.memory},
              {"cpus", s.limits.cpus},
              {"pids", s.limits.pids},
              {"disk", s.limits.disk}}},
            {"workdir", s.workdir},
            {"uid_base", s.uid_base},
            {"env", s.env},
            {"egress", {{"allow", s.egress.allow}, {"secrets", s.egress.secrets}}}};
  if (s.destroyed_at) {
    j["destroyed_at"] = rfc3339(*s.destroyed_at);
    j["reason"] = s.reason;
  }
  if (s.host_pid) j["host_pid"] = *s.host_pid;
  if (s.vm_json) j["vm"] = parse_json_text(*s.vm_json);
  if (s.usage)
    j["usage"] = {{"memory_bytes", s.usage->memory_bytes},
                  {"memory_limit", s.usage->memory_limit},
                  {"oom_kills", s.usage->oom_kills},
                  {"pids", s.usage->pids},
                  {"cpu_usage_ns", s.usage->cpu_usage_ns}};
  if (s.rollback)
    j["rollback"] = {{"snapshot", s.rollback->snapshot},
                     {"saved_as", value_or_null(s.rollback->saved_as)},
                     {"processes", s.rollback->processes}};
  if (s.restored_from) j["restored_from"] = *s.restored_from;
  return j;
}

json to_json(const daemon::SnapshotInfo& s) {
  return {{"id", s.id},
          {"sandbox", s.sandbox},
          {"profile", s.profile},
          {"name", value_or_null(s.name)},
          {"kind", s.kind},
          {"created_at", rfc3339(s.created_at)},
          {"expires_at", rfc3339_or_null(s.expires_at)},
          {"parent", value_or_null(s.parent)},
          {"runtime", s.runtime},
          {"image", s.image},
          {"files", s.files},
          {"logical_bytes", s.logical_bytes},
          {"new_bytes", s.new_bytes},
          {"reused_files", s.reused_files},
          {"contents", s.contents},
          {"processes", s.processes},
          {"skipped", s.skipped}};
}

json to_json(const daemon::ProcessInfo& p) {
  return {{"pid", p.pid},
          {"ppid", value_or_null(p.ppid)},
          {"uid", value_or_null(p.uid)},
          {"state", p.state},
          {"argv", p.argv},
          {"stream", value_or_null(p.stream)}};
}

json to_json(const daemon::Diff& d) {
  return {{"added", d.added}, {"changed", d.changed}, {"deleted", d.deleted}};
}

json to_json(const daemon::ImageInfo& i) {
  json j = {{"name", i.name},
            {"kind", i.kind},
            {"created_at", rfc3339(i.created_at)},
            {"size_bytes", i.size_bytes},
            {"files", i.files}};
  if (!i.format.empty()) j["format"] = i.format;
  if (!i.digest.empty()) j["digest"] = i.digest;
  const auto& c = i.config;
  j["config"] = {{"env", c.env},   {"working_dir", c.working_dir},
                 {"user", c.user}, {"entrypoint", c.entrypoint},
                 {"cmd", c.cmd},   {"labels", c.labels}};
  return j;
}

json to_json(const daemon::VmDiskInfo& d) {
  return {{"name", d.name}, {"path", d.path}, {"size_bytes", d.size_bytes}, {"cached", d.cached}};
}

json audit_data(const daemon::AuditEvent& e) { return parse_json_text(e.data_json); }

json to_json(const daemon::AuditEvent& e) {
  return {{"sandbox_id", e.sandbox_id},
          {"seq", e.seq},
          {"ts", e.ts},
          {"time", rfc3339(e.ts)},
          {"kind", e.kind},
          {"data", audit_data(e)},
          {"hash", e.hash}};
}

json to_json(const daemon::AuditVerdict& v) {
  json j = {{"ok", v.ok}, {"events", v.events}, {"first_bad_seq", value_or_null(v.first_bad_seq)}};
  if (v.problem) j["problem"] = *v.problem;
  return j;
}

json to_json(const daemon::Health& h) {
  return {{"status", h.status},       {"version", h.version},   {"draining", h.draining},
          {"sandboxes", h.sandboxes}, {"uptime_s", h.uptime_s}, {"pid", h.pid}};
}

json to_json(const daemon::NodeInfo& n) {
  json warm = json::array();
  for (const auto& w : n.warm)
    warm.push_back({{"runtime", w.runtime},
                    {"image", w.image},
                    {"profile", w.profile},
                    {"memory", w.memory},
                    {"cpus", w.cpus},
                    {"ready", w.ready}});
  return {{"name", n.name},
          {"url", n.url},
          {"labels", n.labels},
          {"draining", n.draining},
          {"runtimes", n.runtimes},
          {"kvm", n.kvm},
          {"cpus", {{"total", n.cpus.total}, {"allocated", n.cpus.allocated}}},
          {"memory",
           {{"total_bytes", n.memory.total_bytes}, {"allocated_bytes", n.memory.allocated_bytes}}},
          {"sandboxes",
           {{"running", n.sandboxes.running},
            {"paused", n.sandboxes.paused},
            {"max", n.sandboxes.max}}},
          {"warm", std::move(warm)},
          {"snapshot_store", value_or_null(n.snapshot_store)},
          {"version", n.version}};
}

json to_json(const daemon::DrainResult& r) {
  json items = json::array();
  for (const auto& i : r.sandboxes) {
    json item = {{"id", i.id}, {"destroyed", i.destroyed}};
    if (i.snapshot) item["snapshot"] = *i.snapshot;
    if (i.pushed) item["pushed"] = *i.pushed;
    if (i.error) item["error"] = *i.error;
    items.push_back(std::move(item));
  }
  return {{"node", r.node}, {"sandboxes", std::move(items)}, {"left_running", r.left_running}};
}

}  // namespace space::api
