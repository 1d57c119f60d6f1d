// What spaced tells about itself: /v1/health, /metrics (Prometheus text) and `space doctor`.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/failpoint.h"
#include "common/openat2.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "daemon/daemon.h"
#include "runtime/kvm.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

Health Daemon::health() {
  return {.status = "ok",
          .version = SPACE_VERSION,
          .draining = draining_.load(),
          .sandboxes = registry_.size(),
          .uptime_s = now_s() - started_at_,
          .pid = ::getpid()};
}

std::string Daemon::metrics() {
  std::ostringstream o;
  size_t running = 0, paused = 0;
  for (auto& sb : registry_.all()) (sb->paused ? paused : running)++;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n"
      << name << ' ' << v << '\n';
  };
  o << "# HELP space_sandboxes Live sandboxes by state.\n# TYPE space_sandboxes gauge\n"
    << "space_sandboxes{state=\"running\"} " << running << '\n'
    << "space_sandboxes{state=\"paused\"} " << paused << '\n';
  if (gateway_) {
    auto g = gateway_->stats();
    counter("space_egress_connections_total", "Connections sandboxes opened to the gateway.",
            g.connections);
    counter("space_egress_requests_total", "HTTP requests the gateway forwarded.", g.requests);
    counter("space_egress_denied_total", "Egress attempts the gateway refused.", g.denied);
    counter("space_egress_bytes_up_total", "Bytes sent from sandboxes upstream.", g.bytes_up);
    counter("space_egress_bytes_down_total", "Bytes received by sandboxes.", g.bytes_down);
    counter("space_egress_credential_uses_total", "Requests a credential was injected into.",
            g.credential_uses);
    counter("space_egress_dns_queries_total", "Queries the DNS stubs answered.", g.dns_queries);
    counter("space_egress_process_restarts_total",
            "Times the gateway process died and was started again.", gateway_->restarts());
    counter("space_egress_control_refused_total",
            "Messages from a gateway process refused as malformed (egress/wire.h).",
            gateway_->refused_messages());
    o << "# HELP space_egress_active_connections Open gateway connections.\n"
      << "# TYPE space_egress_active_connections gauge\nspace_egress_active_connections "
      << g.active_connections << '\n';
    o << "# HELP space_egress_processes Gateway processes running (space-egress).\n"
      << "# TYPE space_egress_processes gauge\nspace_egress_processes " << gateway_->processes()
      << '\n';
  }
  o << "# HELP space_db_wal_frames Frames in space.db's write-ahead log at its last checkpoint "
       "(about once a second).\n# TYPE space_db_wal_frames gauge\nspace_db_wal_frames "
    << store_->wal_frames()
    << "\n# HELP space_db_wal_unchecked_frames Of those, frames not yet copied into space.db "
       "(an old reader holds them).\n# TYPE space_db_wal_unchecked_frames gauge\n"
       "space_db_wal_unchecked_frames "
    << store_->wal_unchecked()
    << "\n# HELP space_db_unsaved_records Sandbox records whose write failed (a full disk), "
       "kept to be written again.\n# TYPE space_db_unsaved_records gauge\nspace_db_unsaved_records "
    << store_->unsaved() << '\n';
  counter("space_sandbox_creates_total", "Sandboxes created.", metrics_.creates);
  counter("space_sandbox_create_failures_total", "Sandbox creations that failed.",
          metrics_.create_failures);
  counter("space_sandbox_destroys_total", "Sandboxes destroyed.", metrics_.destroys);
  counter("space_sandbox_teardown_failures_total",
          "Background teardowns that failed (left for the next start).",
          metrics_.teardown_failures);
  counter("space_state_errors_total",
          "Lifecycle moves the state machine does not allow (a bug: spaced's log names each).",
          metrics_.state_errors);
  o << "# HELP space_sandbox_teardowns_pending Destroyed sandboxes still being torn down.\n"
    << "# TYPE space_sandbox_teardowns_pending gauge\nspace_sandbox_teardowns_pending "
    << teardowns_pending_.load() << '\n';
  counter("space_sandbox_timeouts_total", "Sandboxes destroyed by their lifetime timeout.",
          metrics_.timeouts);
  counter("space_agents_lost_total", "Agent channels that broke.", metrics_.agents_lost);
  counter("space_sandboxes_reattached_total", "Sandboxes reattached after a restart.",
          metrics_.reattached);
  counter("space_sandboxes_cleaned_up_total", "Sandboxes cleaned up after a restart.",
          metrics_.cleaned_up);
  counter("space_snapshots_total", "Snapshots taken.", metrics_.snapshots);
  counter("space_snapshot_failures_total", "Snapshots that could not be taken.",
          metrics_.snapshot_failures);
  counter("space_snapshots_dropped_total", "Snapshots removed (API or retention).",
          metrics_.snapshots_dropped);
  counter("space_rollbacks_total", "Sandboxes rolled back to a snapshot.", metrics_.rollbacks);
  counter("space_restores_total", "Sandboxes made from a snapshot.", metrics_.restores);
  counter("space_snapshot_gc_bytes_freed_total", "Snapshot store bytes garbage-collected.",
          metrics_.gc_bytes_freed);
  {
    // 1 where a manifest that does not load kept the last gc from freeing anything (`space
    // doctor` says which, under snapshots.stores).
    o << "# HELP space_snapshot_gc_blocked 1 if the profile's last snapshot gc freed nothing "
         "because a manifest does not load.\n# TYPE space_snapshot_gc_blocked gauge\n";
    for (auto& [profile, blocked] : snap_stores_.gc_blocked())
      o << "space_snapshot_gc_blocked{profile=\"" << profile << "\"} " << (blocked ? 1 : 0) << '\n';
  }
  counter("space_execs_total", "Execs started.", metrics_.execs);
  counter("space_exec_failures_total", "Execs that could not be started.", metrics_.exec_failures);
  o << "# HELP space_sandbox_create_seconds_sum Total time spent creating sandboxes.\n"
    << "# TYPE space_sandbox_create_seconds_sum counter\n"
    << "space_sandbox_create_seconds_sum "
    << static_cast<double>(metrics_.create_ns_sum + metrics_.pooled_ns_sum) / 1e9 << '\n';
  o << "# HELP space_sandbox_create_path_seconds_count Sandboxes created, by path.\n"
    << "# TYPE space_sandbox_create_path_seconds_count counter\n"
    << "space_sandbox_create_path_seconds_count{path=\"cold\"} "
    << metrics_.creates - metrics_.creates_pooled << '\n'
    << "space_sandbox_create_path_seconds_count{path=\"pool\"} " << metrics_.creates_pooled << '\n'
    << "# HELP space_sandbox_create_path_seconds_sum Time spent creating sandboxes, by path.\n"
    << "# TYPE space_sandbox_create_path_seconds_sum counter\n"
    << "space_sandbox_create_path_seconds_sum{path=\"cold\"} "
    << static_cast<double>(metrics_.create_ns_sum) / 1e9 << '\n'
    << "space_sandbox_create_path_seconds_sum{path=\"pool\"} "
    << static_cast<double>(metrics_.pooled_ns_sum) / 1e9 << '\n';
  pool_metrics(o);
  {
    std::lock_guard lock(metrics_.steps_mu);
    o << "# HELP space_sandbox_create_step_seconds_sum Time spent in each step of sandbox "
         "creation (cold path).\n# TYPE space_sandbox_create_step_seconds_sum counter\n";
    for (auto& [step, v] : metrics_.create_steps)
      o << "space_sandbox_create_step_seconds_sum{step=\"" << step << "\"} "
        << static_cast<double>(v.second) / 1e9 << '\n';
    o << "# HELP space_sandbox_create_step_count Times each step of sandbox creation ran.\n"
         "# TYPE space_sandbox_create_step_count counter\n";
    for (auto& [step, v] : metrics_.create_steps)
      o << "space_sandbox_create_step_count{step=\"" << step << "\"} " << v.first << '\n';
  }
  return o.str();
}

namespace {

// First line of a host tool's `--version` output, or "" if it cannot run. Looked for in
// spaced's own PATH, as the VM runtimes look for their binaries (vm::find_in_path).
std::string version_line(const char* program) {
  const char* path = std::getenv("PATH");
  return first_output_line({program, "--version"}, std::chrono::seconds(10),
                           path && *path ? path : kDefaultSearchPath);
}

// Facts about the host that the VM runtimes and memory snapshots depend on.
json host_facts() {
  std::string qemu = version_line("qemu-system-x86_64");
  std::string criu = version_line("criu");
  return {
      {"qemu", qemu.empty() ? json{{"found", false}, {"hint", "apt-get install qemu-system-x86"}}
                            : json{{"found", true}, {"version", qemu}}},
      {"criu", criu.empty()
                   ? json{{"found", false}, {"note", "process memory snapshots need CRIU >= 4"}}
                   : json{{"found", true}, {"version", criu}}}};
}

}  // namespace

json Daemon::pool_report() {
  json out = json::array();
  for (auto& p : pools_.status()) {
    json j = {{"runtime", p.t.runtime},
              {"image", p.t.image},
              {"profile", p.t.profile},
              {"memory", p.t.limits.memory_bytes},
              {"cpus", p.t.limits.cpus},
              {"pids", p.t.limits.pids},
              {"disk", p.t.limits.disk_bytes},
              {"size", p.size},
              {"ready", p.ready},
              {"hits", p.hits},
              {"misses", p.misses},
              {"refill_failures", p.refill_failures},
              {"default", p.is_default}};
    if (!p.last_error.empty()) j["last_error"] = p.last_error;
    out.push_back(std::move(j));
  }
  return out;
}

void Daemon::pool_metrics(std::ostream& o) {
  auto pools = pools_.status();
  if (pools.empty()) return;
  using Status = WarmPools::Status;
  auto label = [](const Status& p) {
    return "{profile=\"" + p.t.profile + "\",image=\"" + p.t.image + "\",runtime=\"" + p.t.runtime +
           "\",memory=\"" + std::to_string(p.t.limits.memory_bytes) + "\"}";
  };
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
    for (auto& p : pools) o << name << label(p) << ' ' << value(p) << '\n';
  };
  family("space_pool_size", "gauge", "Configured size of each warm pool.",
         [](const Status& p) { return p.size; });
  family("space_pool_ready", "gauge", "Sandboxes ready to claim in each warm pool.",
         [](const Status& p) { return p.ready; });
  family("space_pool_hits_total", "counter", "Creates served from a warm pool.",
         [](const Status& p) { return p.hits; });
  family("space_pool_misses_total", "counter",
         "Creates of a pooled template that found the pool empty (cold path).",
         [](const Status& p) { return p.misses; });
  family("space_pool_refills_total", "counter", "Sandboxes the pool filler started.",
         [](const Status& p) { return p.refills; });
  family("space_pool_refill_failures_total", "counter", "Refills that failed.",
         [](const Status& p) { return p.refill_failures; });
  family("space_pool_refill_seconds_sum", "counter", "Time spent starting pool sandboxes.",
         [](const Status& p) { return static_cast<double>(p.refill_ns) / 1e9; });
}

json Daemon::doctor() {
  json rts = json::object();
  for (auto& [name, rt] : runtimes_) rts[name] = rt->doctor();
  json host = host_facts();
  // KVM as the qemu runtime proved it; where that runtime could not decide (no QEMU, no guest
  // kernel), the device's facts alone.
  host["kvm"] = rts.contains("qemu") && rts["qemu"].contains("kvm")
                    ? rts["qemu"]["kvm"]
                    : runtime::vm::judge_kvm_facts(runtime::vm::gather_kvm_facts()).to_json();
  // What a snapshot holds (docs/snapshots.md): say it, and why, rather than let a user expect a
  // linux sandbox's process to survive a rollback.
  std::string criu = host["criu"].value("found", false)
                         ? "CRIU " + host["criu"].value("version", std::string()) + " is installed"
                         : "CRIU is not installed (Debian 12's criu 3.17 fails `criu check` on "
                           "recent kernels; 4.1 or later is needed)";
  // The top-level fields describe the linux runtime's snapshots; `by_runtime` every runtime's.
  json by_runtime = json::object();
  for (auto& [name, rt] : runtimes_)
    by_runtime[name] =
        rt->keeps_machine_state()
            ? json{{"contents", "machine"}, {"processes", "resumed"}, {"memory", true}}
            : json{{"contents", "filesystem"}, {"processes", "restarted"}, {"memory", false}};
  json snapshots = {
      {"contents", "filesystem"},
      {"processes", "restarted"},
      {"memory", false},
      {"reason",
       "a linux sandbox's snapshots hold its writable layer only: spaced does not drive "
       "CRIU, so its processes start afresh after a rollback or restore (qemu and "
       "firecracker sandboxes' snapshots are whole machines: their processes resume). " +
           criu + "."},
      {"by_runtime", by_runtime},
      {"store", (cfg_.state_dir / "snapshots").string()},
      // Per profile: chunks found corrupt (moved aside), and why gc last freed nothing.
      {"stores", store_report()}};
  return {{"version", SPACE_VERSION},
          {"state_dir", cfg_.state_dir.string()},
          {"socket", cfg_.socket.string()},
          {"host", host},
          {"runtimes", rts},
          {"snapshots", snapshots},
          {"pools", pool_report()},
          {"pools_note", cfg_.pools_configured
                             ? "the config's \"pools\" (docs/pools.md)"
                             : "the default pool: the config names none; \"pools\": [] in the "
                               "config turns it off (docs/pools.md)"}};
}

}  // namespace space::daemon
