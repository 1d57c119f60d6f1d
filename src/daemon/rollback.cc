// Rollback in place (docs/snapshots.md): the sandbox restarts on a snapshot's files (or, for
// VMs, its whole machine) under the same id, and the state it had is kept as a snapshot first,
// so that a rollback never loses anything. It spans steps a kill -9 can cut (docs/
// crash-safety.md): the state before is saved, the intent is recorded (state rolling_back, with
// both snapshots), the old instance stops, the new one starts, the record says running again.
// A spaced that finds a rolling_back record at start finishes the rollback from the snapshots
// (resume_rollback): whatever step it died at, the sandbox ends up running, on the snapshot, or
// failing that on its state before.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "common/failpoint.h"
#include "daemon/daemon.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

Result<void> Daemon::start_from_snapshot(Sandbox& sb, const snapshot::Manifest& man,
                                         snapshot::Store& store) {
  runtime::SandboxSpec spec = sb.spec;
  std::error_code ec;
  fs::create_directories(spec.dir, ec);
  const bool machine = sb.rt->keeps_machine_state();
  (machine ? spec.restore_machine : spec.populate_upper) = [&](int fd) {
    return store.restore(man, fd);
  };
  sb.inst = TRY(sb.rt->create(spec));
  auto fail_started = [&](Error e) -> Result<void> {
    close_agent(sb);
    stop_egress(sb.rec.id);
    (void)sb.inst->destroy();
    sb.egress_relay.reset();
    sb.dns_relay.reset();
    sb.conn.reset();
    sb.inst.reset();
    return fail(std::move(e));
  };
  if (auto r = open_agent(sb, machine); !r) return fail_started(std::move(r.error()));
  std::string workdir = sb.rec.spec.value("workdir", std::string());
  if (!workdir.empty()) {
    auto r =
        sb.conn->request({{"op", "mkdir"}, {"path", workdir}, {"mode", 0755}, {"parents", true}});
    if (!r && r.error().code() != Code::kAlreadyExists)
      return fail_started(std::move(r.error()).wrap("creating workdir " + workdir));
  }
  auto eg = egress_of(sb.rec);
  if (!eg) return fail_started(std::move(eg.error()));
  if (auto r = start_egress(sb, std::move(*eg), CaMode::kReinstall); !r)
    return fail_started(std::move(r.error()).wrap("setting up egress"));
  return {};
}

void Daemon::finish_rollback(const std::shared_ptr<Sandbox>& sb, const std::string& outcome) {
  SandboxRecord& rec = sb->rec;
  json event = {{"snapshot", rec.rollback_to},
                {"saved_as", rec.rollback_saved_as},
                {"outcome", outcome},
                {"agent_pid", sb->inst->agent_pid()}};
  rec.runtime_state = sb->inst->persist();
  move(rec, SandboxState::kRunning);
  rec.rollback_to.clear();
  rec.rollback_saved_as.clear();
  if (auto r = store_->put_sandbox(rec); !r)
    spdlog::error("sandbox {}: recording its rollback: {} (a restart finishes it again)", rec.id,
                  r.error().message());
  schedule_snapshots(*sb);
  registry_.add(sb);
  watch(sb);
  audit(rec.id, "sandbox.rollback", std::move(event));
}

Result<SandboxInfo> Daemon::rollback(const std::string& id, const std::string& snap) {
  auto old = TRY(live(id));
  std::unique_lock lock(old->mu);
  if (old->destroyed)
    return fail(Code::kConflict,
                "sandbox " + id + " changed meanwhile (destroyed or rolled back); try again");
  auto rec = TRY(find_snapshot(snap, "", id));
  if (rec.profile != old->rec.profile)
    return fail(Code::kPermissionDenied,
                "snapshot " + rec.id + " belongs to profile " + rec.profile + " and sandbox " + id +
                    " to " + old->rec.profile + ": a snapshot never restores into another profile");
  if (rec.image != old->rec.image || rec.runtime != old->rec.runtime)
    return fail(Code::kInvalidArgument,
                "snapshot " + rec.id + " was taken of a " + rec.runtime + " sandbox of image " +
                    rec.image + ", and " + id + " is a " + old->rec.runtime + " sandbox of image " +
                    old->rec.image + "; `space restore " + rec.id + "` makes a sandbox of its own");
  auto* store = TRY(snapshot_store(rec.profile));
  // Everything the rollback needs is checked before the sandbox is touched: the manifest's MAC
  // and every chunk's hash.
  auto target = TRY(manifest_for(rec, old->rec.uid_base, true));
  if (machine_snapshots(rec.runtime)) {
    // A machine resumes only on the image disk it ran on: if that changed, neither the target
    // nor the state before could start again.
    auto image = TRY(images_.resolve(old->rec.image));
    TRY_VOID_CTX(old->inst->check_resumable(image), "rolling back sandbox " + id);
  }
  // The state about to be replaced is kept, so a rollback never loses anything.
  auto saved = TRY_CTX(take_snapshot(*old, "rollback", ""),
                       "saving the current state of " + id + " before rolling back");
  auto before = TRY(manifest_for(*saved, old->rec.uid_base, false));
  failpoint("rollback.after_save");

  // The intent: from here on a restarted spaced finishes the rollback (resume_rollback).
  const SandboxState was = old->rec.state;
  move(old->rec, SandboxState::kRollingBack);
  old->rec.rollback_to = rec.id;
  old->rec.rollback_saved_as = saved->id;
  auto undo_intent = [&] {
    old->rec.state = was;
    old->rec.rollback_to.clear();
    old->rec.rollback_saved_as.clear();
    (void)store_->put_sandbox(old->rec);
  };
  if (auto r = store_->put_sandbox(old->rec); !r) {
    undo_intent();
    return fail(std::move(r.error()).wrap("rolling back sandbox " + id));
  }
  failpoint("rollback.after_intent");

  old->replacing = true;
  old->destroyed = true;
  stop_egress(id);
  close_agent(*old);
  if (auto r = old->inst->destroy(); !r) {
    old->destroyed = false;
    old->replacing = false;
    undo_intent();
    spdlog::error("rollback of {}: stopping it failed: {}", id, r.error().message());
    stop_.wake();  // its channel is closed: the reaper retires it
    return fail(std::move(r.error()).wrap("rolling back sandbox " + id));
  }
  failpoint("rollback.after_stop");

  auto fresh = std::make_shared<Sandbox>();
  fresh->rt = old->rt;
  fresh->rec = old->rec;
  fresh->spec = old->spec;
  auto r = start_from_snapshot(*fresh, target, *store);
  if (r) {
    failpoint("rollback.after_start");
    finish_rollback(fresh, "rolled back");
    old->replaced = true;
    metrics_.rollbacks++;
    spdlog::info("sandbox {}: rolled back to {} (the state before is {})", id, rec.id, saved->id);
    SandboxInfo out = info(fresh->rec, fresh.get());
    out.rollback = SandboxInfo::Rollback{
        .snapshot = rec.id,
        .saved_as = saved->id,
        .processes = machine_snapshots(rec.runtime) ? "resumed" : "restarted"};
    return out;
  }
  spdlog::error("rollback of {} to {} failed: {}; going back to {}", id, rec.id,
                r.error().message(), saved->id);
  if (auto back = start_from_snapshot(*fresh, before, *store); back) {
    finish_rollback(fresh, "failed; restored the state before");
    old->replaced = true;
    return fail(std::move(r.error()).wrap(
        "rolling back sandbox " + id + " to " + rec.id +
        " (the sandbox is back to its state before, kept as snapshot " + saved->id + ")"));
  }
  // Neither came up: the sandbox is gone, its state before is kept as a snapshot.
  record_destroyed(old->rec, "rollback to " + rec.id + " failed: " + r.error().message() +
                                 "; its state before is snapshot " + saved->id);
  registry_.remove(id, old.get());
  old->replacing = false;
  return fail(std::move(r.error()).wrap(
      "rolling back sandbox " + id + " to " + rec.id +
      " (the sandbox could not be restarted and was removed; `space restore " + saved->id +
      "` brings back its state before)"));
}

bool Daemon::resume_rollback(const std::shared_ptr<Sandbox>& sb) {
  SandboxRecord& rec = sb->rec;
  auto store = snapshot_store(rec.profile);
  if (!store) {
    record_destroyed(rec, "interrupted rollback: " + store.error().message());
    return false;
  }
  // The snapshot it was going to, else the state it had (saved before the intent was written).
  std::string why;
  for (const std::string& snap : {rec.rollback_to, rec.rollback_saved_as}) {
    Result<void> r = [&]() -> Result<void> {
      auto found = TRY(find_snapshot(snap, rec.profile));
      auto man = TRY(manifest_for(found, rec.uid_base, true));
      return start_from_snapshot(*sb, man, **store);
    }();
    if (r) {
      const bool target = snap == rec.rollback_to;
      finish_rollback(sb, target ? "rolled back (finished after spaced restarted)"
                                 : "interrupted; restored the state before (after spaced "
                                   "restarted)");
      metrics_.rollbacks++;
      spdlog::info("sandbox {}: finished its interrupted rollback on {}", rec.id, snap);
      return true;
    }
    why += (why.empty() ? "" : "; ") + snap + ": " + r.error().message();
    spdlog::error("sandbox {}: finishing its rollback on {}: {}", rec.id, snap,
                  r.error().message());
  }
  record_destroyed(rec, "interrupted rollback could not be finished (" + why +
                            "); its snapshots are kept: `space restore " + rec.rollback_saved_as +
                            "` brings back its state before");
  return false;
}

}  // namespace space::daemon
