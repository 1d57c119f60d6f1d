// Reconciliation at start (docs/architecture.md, "Daemon restart and reconcile";
// docs/crash-safety.md): every live record of the store is reattached, or, where it records an
// intent (creating, pooled, rolling_back, destroying), the interrupted operation is finished or
// undone; nothing of a sandbox stays on the host unless the sandbox is listed and works.
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

Result<void> Daemon::reconcile() {
  auto recs = TRY(store_->live_sandboxes());
  std::set<std::string> keep;
  for (auto& rec : recs) {
    auto rt_it = runtimes_.find(rec.runtime);
    auto sb = std::make_shared<Sandbox>();
    sb->rec = rec;
    sb->idle_timeout_s = rec.spec.value("idle_timeout", 0.0);
    sb->touch();  // its clients get the idle timeout afresh after a restart
    auto mark_gone = [&](const std::string& why) {
      record_destroyed(rec, why);
      std::error_code ec;
      fs::remove_all(cfg_.state_dir / "sandboxes" / rec.id, ec);
      metrics_.cleaned_up++;
      spdlog::warn("sandbox {}: {}", rec.id, why);
    };
    if (rt_it == runtimes_.end()) {
      mark_gone("its runtime " + rec.runtime + " is not available in this spaced");
      continue;
    }
    sb->rt = rt_it->second.get();
    auto spec = spec_for(rec);
    if (!spec) {
      mark_gone("cannot rebuild its spec: " + spec.error().message());
      continue;
    }
    sb->spec = *spec;
    // Removes whatever of the sandbox is on the host (its runtime finds its processes and
    // cgroups by id even where nothing was persisted); false where that fails: the record stays
    // as it is and the next start tries again.
    auto cleaned = [&] {
      auto r = sb->rt->cleanup(*spec, rec.runtime_state);
      if (r) return true;
      spdlog::error(
          "sandbox {} ({}): removing what is left of it: {} (spaced's next start "
          "tries again)",
          rec.id, to_string(rec.state), r.error().message());
      keep.insert(rec.id);
      return false;
    };
    // The intents (daemon/sandbox_state.h, docs/crash-safety.md): each is finished or undone.
    switch (rec.state) {
      case SandboxState::kPooled:
        if (cleaned()) mark_gone("warm pool: never used; spaced stopped");
        continue;
      case SandboxState::kDestroying:
        // Removed by its owner (or its lifetime), and spaced stopped before the teardown ended.
        if (cleaned())
          mark_gone(rec.reason.empty() ? std::string("removed by the API") : rec.reason);
        continue;
      case SandboxState::kCreating:
        if (cleaned()) mark_gone("interrupted while being created (spaced stopped)");
        continue;
      case SandboxState::kRollingBack:
        // Whatever step it stopped at, the old instance (or a half-started new one) goes and
        // the sandbox starts again on its snapshot, or on the state it had.
        if (cleaned()) {
          if (resume_rollback(sb)) {
            keep.insert(rec.id);
          } else {
            std::error_code ec;
            fs::remove_all(cfg_.state_dir / "sandboxes" / rec.id, ec);
            metrics_.cleaned_up++;
          }
        }
        continue;
      case SandboxState::kRunning:
      case SandboxState::kPaused:
      case SandboxState::kDestroyed:
        break;
    }
    if (rec.runtime_state.is_null()) {
      if (cleaned()) mark_gone("interrupted while being created (spaced stopped)");
      continue;
    }
    auto inst = sb->rt->reattach(*spec, rec.runtime_state);
    if (!inst) {
      (void)sb->rt->cleanup(*spec, rec.runtime_state);
      mark_gone("lost while spaced was down: " + inst.error().message());
      continue;
    }
    sb->inst = std::move(*inst);
    bool was_paused = rec.state == SandboxState::kPaused;
    // A frozen agent cannot answer the handshake; and a spaced that died while taking a
    // snapshot left the sandbox frozen: thaw it in every case.
    (void)sb->inst->resume();
    auto conn = AgentConn::open(sb->inst->channel_fd(), rec.id, true, std::chrono::seconds(5));
    if (!conn) {
      (void)sb->inst->destroy();
      mark_gone("its agent did not answer after the restart: " + conn.error().message());
      continue;
    }
    sb->conn = std::move(*conn);
    sb->reattached = true;
    start_relay(*sb);
    start_guest_exec_audit(*sb);
    if (auto eg = egress_of(rec); !eg) {
      spdlog::warn("sandbox {}: egress not restored: {}", rec.id, eg.error().message());
    } else if (auto r = start_egress(*sb, std::move(*eg), CaMode::kSaved); !r) {
      // Its listeners could not be bound again (a process inside may hold the proxy port):
      // the sandbox keeps running without a way out.
      spdlog::warn("sandbox {}: egress not restored: {}", rec.id, r.error().message());
    }
    if (was_paused && sb->inst->pause()) sb->paused = true;
    move(sb->rec, sb->paused ? SandboxState::kPaused : SandboxState::kRunning);
    sb->rec.runtime_state = sb->inst->persist();
    (void)store_->put_sandbox(sb->rec);
    schedule_snapshots(*sb);
    registry_.add(sb);
    watch(sb);
    keep.insert(rec.id);
    metrics_.reattached++;
    audit(rec.id, "sandbox.reattach", {{"agent_pid", sb->inst->agent_pid()}});
    spdlog::info("reattached sandbox {} (agent pid {})", rec.id, sb->inst->agent_pid());
  }
  // Directories of sandboxes the database does not know as live.
  std::error_code ec;
  for (auto& e : fs::directory_iterator(cfg_.state_dir / "sandboxes", ec)) {
    if (!keep.count(e.path().filename().string())) {
      std::error_code e2;
      fs::remove_all(e.path(), e2);
    }
  }
  return {};
}

}  // namespace space::daemon
