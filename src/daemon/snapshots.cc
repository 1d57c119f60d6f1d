// Snapshots from the daemon's side (docs/snapshots.md): taking them (the sandbox frozen
// meanwhile) into the content-addressed store of its profile (src/snapshot), their metadata in
// SQLite, rollback in place, restore into a new sandbox, `diff --since`, rolling snapshots,
// retention and garbage collection.
//
// Each profile has its own store (<state>/snapshots/<profile>) sealed with its own key (derived
// from <state>/snapshot.key), so chunks are never shared across profiles (the dedup of one
// profile cannot tell another which bytes it holds) and a manifest copied into another
// profile's store does not verify. Snapshots hold the writable layer only: on rollback and
// restore the sandbox's processes start afresh (there is no CRIU support yet).
#include <fcntl.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "common/failpoint.h"
#include "common/guard.h"
#include "common/openat2.h"
#include "common/units.h"
#include "daemon/daemon.h"
#include "daemon/retention.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Error unknown_snapshot(const std::string& ref) {
  return Error(Code::kNotFound, "unknown snapshot " + ref.substr(0, 80) +
                                    "; `space snapshots ID` lists a sandbox's snapshots");
}

Result<void> check_name(const std::string& name) {
  bool ok =
      !name.empty() && name.size() <= 64 && std::isalnum(static_cast<unsigned char>(name[0])) &&
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
          std::string::npos &&
      !name.starts_with("snap_");
  if (!ok)
    return fail(Code::kInvalidArgument,
                "snapshot name \"" + name.substr(0, 64) +
                    "\": use 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
                    "digit (and not \"snap_\", which starts snapshot ids)");
  return {};
}

Result<UniqueFd> open_upper(runtime::Instance& inst, const std::string& id) {
  UniqueFd layer = TRY_CTX(inst.writable_layer(), "opening the writable layer of " + id);
  int fd = ::openat(layer.get(), "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail_sys("openat", "upper of " + id);
  return UniqueFd(fd);
}

// Host ids of a sandbox with uid range `from` moved to range `to`; ids outside the range (host
// root, for files the daemon wrote) stay as they are.
uint32_t shift_id(uint32_t id, uint32_t from, uint32_t to) {
  if (id >= from && id - from < runtime::SandboxSpec::kIdRange) return to + (id - from);
  return id;
}

// Files the daemon writes into every sandbox (the gateway's trust store, Chromium's policy;
// Daemon::kInstalledFiles): not the user's changes.
const std::set<std::string> kInstalled = {"/etc/space",
                                          "/etc/space/ca.crt",
                                          "/etc/space/ca-bundle.crt",
                                          "/etc/chromium",
                                          "/etc/chromium/policies",
                                          "/etc/chromium/policies/managed",
                                          "/etc/chromium/policies/managed/space.json"};

}  // namespace

Result<snapshot::Store*> Daemon::snapshot_store(const std::string& profile) {
  return snap_stores_.get(profile);
}

bool Daemon::machine_snapshots(const std::string& runtime) const {
  auto it = runtimes_.find(runtime);
  return it != runtimes_.end() && it->second->keeps_machine_state();
}

SnapshotInfo Daemon::snapshot_info(const SnapshotRecord& r) const {
  const bool machine = machine_snapshots(r.runtime);
  SnapshotInfo i{.id = r.id,
                 .sandbox = r.sandbox_id,
                 .profile = r.profile,
                 .kind = r.kind,
                 .created_at = r.created_at,
                 .expires_at = retention_deadline(r.kind == "manual", r.created_at, cfg_.snapshots),
                 .runtime = r.runtime,
                 .image = r.image,
                 .files = r.files,
                 .logical_bytes = r.logical_bytes,
                 .new_bytes = r.new_bytes,
                 .reused_files = r.reused_files,
                 .contents = machine ? "machine" : "filesystem",
                 .processes = machine ? "resumed" : "restarted"};
  if (!r.name.empty()) i.name = r.name;
  if (!r.parent.empty()) i.parent = r.parent;
  for (auto& s : r.skipped)
    if (s.is_string()) i.skipped.push_back(s.get<std::string>());
  return i;
}

Result<std::optional<SnapshotRecord>> Daemon::take_snapshot(Sandbox& sb, const std::string& kind,
                                                            const std::string& name,
                                                            bool skip_unchanged) {
  const std::string& id = sb.rec.id;
  const std::string& profile = sb.rec.profile;
  if (sb.destroyed) return fail(Code::kConflict, "sandbox " + id + " was destroyed");
  if (!name.empty()) {
    TRY_VOID(check_name(name));
    for (auto& r : TRY(store_->snapshots_named(name)))
      if (r.sandbox_id == id)
        return fail(Code::kAlreadyExists, "sandbox " + id + " already has a snapshot named \"" +
                                              name + "\" (" + r.id + "); pick another name");
  }
  auto* store = TRY(snapshot_store(profile));
  uint64_t quota = 0;
  if (auto it = cfg_.profile_snapshots.find(profile); it != cfg_.profile_snapshots.end())
    quota = it->second.quota_bytes;
  auto over_quota = [&](uint64_t used) {
    return fail(Code::kResourceExhausted,
                "the snapshots of profile " + profile + " use " + format_size(used) + " of its " +
                    format_size(quota) +
                    " quota (snapshot_quota); remove some with `space snapshot rm SNAP`");
  };
  if (quota) {
    uint64_t used = store->stats().stored_bytes;
    if (used >= quota) return over_quota(used);
  }

  std::lock_guard one_at_a_time(take_mu_);
  // The manifests' memory goes back to the system once the snapshot is recorded.
  struct Trim {
    ~Trim() { ::malloc_trim(0); }
  } trim;
  // The previous snapshot of this sandbox: files unchanged since are not read again.
  std::optional<snapshot::Manifest> parent;
  auto previous = TRY(store_->snapshots(id, ""));
  if (!previous.empty()) {
    if (auto m = store->load(previous.front().id); m)
      parent = std::move(*m);
    else
      spdlog::warn("sandbox {}: previous snapshot {} unusable, taking a full one: {}", id,
                   previous.front().id, m.error().message());
  }

  const bool machine = sb.rt->keeps_machine_state();
  // What is read: the writable layer's upper directory, or for VMs a directory where the
  // runtime saves the machine (its memory and disk), removed once it is stored.
  UniqueFd tree;
  fs::path saved_dir = sb.spec.dir / "snapshot";
  Guard remove_saved([&] {
    std::error_code ec;
    if (machine) fs::remove_all(saved_dir, ec);
  });
  if (machine) {
    std::error_code ec;
    fs::remove_all(saved_dir, ec);
    if (::mkdir(saved_dir.c_str(), 0700) != 0) return fail_sys("mkdir", saved_dir.string());
    tree.reset(::open(saved_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!tree) return fail_sys("open", saved_dir.string());
  } else {
    tree = TRY(open_upper(*sb.inst, id));
  }
  std::string snap_id = node_id(random_id("snap_", 12));
  std::map<std::string, std::string> labels = {
      {"sandbox", id}, {"profile", profile}, {"kind", kind}};
  if (!name.empty()) labels["name"] = name;
  const json& s = sb.rec.spec;
  json spec = {{"memory", s.value("memory", uint64_t{0})},
               {"cpus", s.value("cpus", 1.0)},
               {"pids", s.value("pids", 0)},
               {"disk", s.value("disk", uint64_t{0})},
               {"env", s.value("user_env", std::vector<std::string>{})},
               {"workdir", s.value("workdir", std::string("/root"))},
               {"allow", s.value("allow", std::vector<std::string>{})},
               {"secrets", s.value("secrets", std::vector<std::string>{})},
               {"snapshot_every", s.value("snapshot_every", 0.0)}};
  if (auto m = s.find("metadata"); m != s.end() && m->is_object()) spec["metadata"] = *m;
  // What a restore needs besides the files, sealed with them: another node of a cluster that
  // pulls this snapshot from the shared store rebuilds its record from here
  // (pull_from_cluster), trusting it as much as the manifest's MAC.
  labels["record"] = json{
      {"runtime", sb.rec.runtime},
      {"image", sb.rec.image},
      {"spec", spec},
      {"uid_base",
       sb.rec.uid_base}}.dump();

  // Consistent: no process of the sandbox runs while its files are read (a VM stays stopped
  // from the start of its save to the end of the read).
  bool froze = false;
  if (!sb.paused) {
    TRY_VOID_CTX(sb.inst->pause(), "freezing sandbox " + id + " for its snapshot");
    froze = true;
  }
  failpoint("snapshot.after_freeze");  // reconcile thaws every sandbox it reattaches
  auto t0 = std::chrono::steady_clock::now();
  Result<snapshot::Manifest> m = [&]() -> Result<snapshot::Manifest> {
    if (machine) TRY_VOID(sb.inst->save_machine(tree.get()));
    return store->take(tree.get(), snap_id, parent ? &*parent : nullptr, labels);
  }();
  double frozen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (froze)
    if (auto r = sb.inst->resume(); !r)
      spdlog::error("sandbox {}: thawing after its snapshot: {}", id, r.error().message());
  if (!m) {
    metrics_.snapshot_failures++;
    return fail(std::move(m.error()).wrap("taking a snapshot of sandbox " + id));
  }
  if (skip_unchanged && parent) {
    json d = snapshot::Store::diff(&*parent, *m);
    if (d["added"].empty() && d["changed"].empty() && d["deleted"].empty()) {
      (void)store->remove(snap_id);
      return std::optional<SnapshotRecord>{};
    }
  }
  if (quota) {
    uint64_t used = store->stats().stored_bytes;
    if (used > quota) {
      (void)store->remove(snap_id);
      (void)store->gc();
      metrics_.snapshot_failures++;
      return over_quota(used);
    }
  }

  SnapshotRecord rec;
  rec.id = snap_id;
  rec.sandbox_id = id;
  rec.profile = profile;
  rec.name = name;
  rec.kind = kind;
  rec.parent = parent ? previous.front().id : "";
  rec.runtime = sb.rec.runtime;
  rec.image = sb.rec.image;
  rec.spec = spec;
  rec.uid_base = sb.rec.uid_base;
  rec.created_at = m->created_at;
  rec.files = m->entries.empty() ? 0 : m->entries.size() - 1;  // not the root
  rec.logical_bytes = m->logical_bytes;
  rec.new_bytes = m->new_bytes;
  rec.reused_files = m->reused_files;
  rec.skipped = m->skipped;
  failpoint("snapshot.after_manifest");  // reconcile_snapshots removes unrecorded manifests
  if (auto r = store_->put_snapshot(rec); !r) {
    (void)store->remove(snap_id);
    metrics_.snapshot_failures++;
    return fail(std::move(r.error()));
  }
  metrics_.snapshots++;
  audit(id, "snapshot.create",
        {{"snapshot", snap_id},
         {"kind", kind},
         {"name", name.empty() ? json(nullptr) : json(name)},
         {"files", rec.files},
         {"logical_bytes", rec.logical_bytes},
         {"new_bytes", rec.new_bytes},
         {"reused_files", rec.reused_files},
         {"frozen_ms", static_cast<int64_t>(frozen_s * 1000)}});
  spdlog::info("sandbox {}: snapshot {} ({}, {} files, {} new bytes, frozen {:.0f} ms)", id,
               snap_id, kind, rec.files, rec.new_bytes, frozen_s * 1000);
  queue_push(rec);
  return std::optional<SnapshotRecord>(std::move(rec));
}

Result<SnapshotRecord> Daemon::find_snapshot(const std::string& ref, const std::string& profile,
                                             const std::string& sandbox) {
  if (ref.empty() || ref.size() > 200) return fail(unknown_snapshot(ref));
  if (ref.starts_with("snap_")) {
    auto r = TRY(store_->get_snapshot(ref));
    if (!r || (!profile.empty() && r->profile != profile)) return fail(unknown_snapshot(ref));
    return std::move(*r);
  }
  // A name belongs to the sandbox the snapshot was taken of (docs/snapshots.md, "Names").
  std::vector<SnapshotRecord> named = TRY(store_->snapshots_named(ref));
  if (!profile.empty())
    std::erase_if(named, [&](const SnapshotRecord& r) { return r.profile != profile; });
  if (!sandbox.empty()) {
    for (auto& r : named)
      if (r.sandbox_id == sandbox) return std::move(r);
    if (named.empty()) return fail(unknown_snapshot(ref));
    // Another sandbox's snapshot is never taken by its name: one task's files must not reach
    // the next because both named a snapshot alike.
    return fail(Code::kNotFound,
                "sandbox " + sandbox + " has no snapshot named \"" + ref.substr(0, 64) +
                    "\"; a snapshot's name belongs to its sandbox (" + named.front().sandbox_id +
                    " has one: to use another sandbox's snapshot, give its id, " +
                    named.front().id + ")");
  }
  if (named.empty()) return fail(unknown_snapshot(ref));
  if (named.size() > 1) {
    std::string which;
    for (size_t i = 0; i < named.size() && i < 5; ++i)
      which += (i ? ", " : "") + named[i].id + " of " + named[i].sandbox_id;
    return fail(Code::kInvalidArgument, std::to_string(named.size()) + " snapshots are named \"" +
                                            ref.substr(0, 64) + "\" (" + which +
                                            (named.size() > 5 ? ", ..." : "") +
                                            "); give the one you mean by its id");
  }
  return std::move(named.front());
}

Result<snapshot::Manifest> Daemon::manifest_for(const SnapshotRecord& rec, uint32_t uid_base,
                                                bool verify_chunks) {
  auto* store = TRY(snapshot_store(rec.profile));
  auto m = TRY_CTX(store->load(rec.id), "loading snapshot " + rec.id);
  // The MAC holds only for this profile's key; the labels must also match what SQLite says.
  auto label = [&](const char* k) {
    auto it = m.labels.find(k);
    return it == m.labels.end() ? std::string() : it->second;
  };
  if (label("profile") != rec.profile || label("sandbox") != rec.sandbox_id)
    return fail(Code::kProtocol, "snapshot " + rec.id + ": its data belongs to another snapshot");
  if (verify_chunks) TRY_VOID_CTX(store->verify(m), "checking snapshot " + rec.id);
  if (uid_base != rec.uid_base)
    for (auto& e : m.entries) {
      e.uid = shift_id(e.uid, rec.uid_base, uid_base);
      e.gid = shift_id(e.gid, rec.uid_base, uid_base);
    }
  return m;
}

Result<void> Daemon::drop_snapshot(const SnapshotRecord& rec, const std::string& why) {
  auto* store = TRY(snapshot_store(rec.profile));
  if (auto r = store->remove(rec.id); !r && r.error().code() != Code::kNotFound)
    return fail(std::move(r.error()).wrap("removing snapshot " + rec.id));
  TRY_VOID(store_->delete_snapshot(rec.id));
  metrics_.snapshots_dropped++;
  audit(rec.sandbox_id, "snapshot.delete", {{"snapshot", rec.id}, {"reason", why}});
  return {};
}

// --- the service ------------------------------------------------------------------------------

Result<SnapshotInfo> Daemon::snapshot(const std::string& id, const SnapshotRequest& req) {
  auto sb = TRY(live(id));
  std::lock_guard lock(sb->mu);
  if (sb->destroyed)
    return fail(Code::kConflict,
                "sandbox " + id + " changed meanwhile (destroyed or rolled back); try again");
  auto rec = TRY(take_snapshot(*sb, "manual", req.name));
  return snapshot_info(*rec);
}

Result<std::vector<SnapshotInfo>> Daemon::list_snapshots(const std::string& id) {
  if (!TRY(store_->get_sandbox(id)) && TRY(store_->snapshots(id, "")).empty())
    return fail(Code::kNotFound,
                "unknown sandbox " + id.substr(0, 80) + "; `space ls` lists sandboxes");
  std::vector<SnapshotInfo> out;
  for (auto& r : TRY(store_->snapshots(id, ""))) out.push_back(snapshot_info(r));
  return out;
}

Result<std::vector<SnapshotInfo>> Daemon::all_snapshots() {
  std::vector<SnapshotInfo> out;
  for (auto& r : TRY(store_->snapshots("", ""))) out.push_back(snapshot_info(r));
  return out;
}

Result<SnapshotInfo> Daemon::get_snapshot(const std::string& snap) {
  return snapshot_info(TRY(find_snapshot(snap, "")));
}

Result<void> Daemon::delete_snapshot(const std::string& snap) {
  auto rec = TRY(find_snapshot(snap, ""));
  TRY_VOID(drop_snapshot(rec, "removed by the API"));
  // Free its chunks now rather than at the next retention pass.
  if (auto* store = snapshot_store(rec.profile).value_or(nullptr))
    collect_garbage(rec.profile, *store);
  return {};
}

Result<Diff> Daemon::diff_since(const std::string& id, const std::string& snap) {
  auto sb = TRY(live(id));
  auto rec = TRY(find_snapshot(snap, "", id));
  if (rec.profile != sb->rec.profile)
    return fail(unknown_snapshot(snap));  // other profiles' snapshots do not exist for it
  auto m = TRY(manifest_for(rec, sb->rec.uid_base, false));
  UniqueFd upper = TRY(open_upper(*sb->inst, id));
  auto now = TRY_CTX(snapshot::Store::scan(upper.get()), "reading the writable layer of " + id);
  json d = snapshot::Store::diff(&m, now);
  // A path the snapshot did not hold is as in the image; if the image has it, it was changed
  // (copied up), not added.
  std::set<std::string> in_snapshot;
  for (auto& e : m.entries) in_snapshot.insert("/" + e.path);
  UniqueFd lower(::open(sb->spec.image.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto in_lower = [&](const std::string& abs) {
    if (!lower) return false;
    int fd = sys_openat2(lower.get(), abs.c_str() + 1, O_PATH | O_NOFOLLOW | O_CLOEXEC,
                         RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  };
  std::vector<std::string> added, changed = d["changed"].get<std::vector<std::string>>(),
                                  deleted = d["deleted"].get<std::vector<std::string>>();
  for (auto& p : d["added"].get<std::vector<std::string>>())
    (!in_snapshot.count(p) && in_lower(p) ? changed : added).push_back(p);
  std::erase_if(changed, [](const std::string& p) { return kInstalled.count(p) > 0; });
  std::sort(changed.begin(), changed.end());
  return Diff{
      .added = std::move(added), .changed = std::move(changed), .deleted = std::move(deleted)};
}

Result<SandboxInfo> Daemon::restore(const std::string& snap,
                                    const std::optional<std::string>& profile) {
  auto found = find_snapshot(snap, "");
  if (!found && found.error().code() == Code::kNotFound && snap.starts_with("snap_") &&
      cluster_store_) {
    // Taken on another node of the cluster (or on this one before its state was lost): the
    // shared store may have it.
    auto pulled = pull_from_cluster(snap);
    if (pulled || pulled.error().code() != Code::kNotFound) found = std::move(pulled);
  }
  auto rec = TRY(std::move(found));
  if (profile && *profile != rec.profile)
    return fail(Code::kPermissionDenied,
                "snapshot " + rec.id + " belongs to profile " + rec.profile +
                    "; a snapshot never restores into another profile (drop --profile)");
  // Load and check the manifest before anything is made; the data is checked as it is restored.
  auto m = std::make_shared<snapshot::Manifest>(TRY(manifest_for(rec, rec.uid_base, false)));
  auto* store = TRY(snapshot_store(rec.profile));
  CreateRequest req;
  const json& s = rec.spec;
  req.runtime = rec.runtime;
  req.image = rec.image;
  req.profile = rec.profile;
  req.limits.memory_bytes = s.value("memory", cfg_.default_limits.memory_bytes);
  req.limits.cpus = s.value("cpus", cfg_.default_limits.cpus);
  req.limits.pids = s.value("pids", cfg_.default_limits.pids);
  req.limits.disk_bytes = s.value("disk", cfg_.default_limits.disk_bytes);
  req.limits_given = {true, true, true, true};
  req.env = s.value("env", std::vector<std::string>{});
  req.workdir = s.value("workdir", std::string("/root"));
  req.workdir_given = true;  // the sandbox's own, whatever its image's config says now
  req.allow = s.value("allow", std::vector<std::string>{});
  req.secrets = s.value("secrets", std::vector<std::string>{});
  req.snapshot_every_s = s.value("snapshot_every", 0.0);
  if (auto md = s.find("metadata"); md != s.end() && md->is_object())
    for (auto& [k, v] : md->items())
      if (v.is_string()) req.metadata[k] = v.get<std::string>();
  uint32_t from = rec.uid_base;
  auto populate = [m, store, from](int upper_fd, uint32_t uid_base) -> Result<void> {
    snapshot::Manifest shifted = *m;
    for (auto& e : shifted.entries) {
      e.uid = shift_id(e.uid, from, uid_base);
      e.gid = shift_id(e.gid, from, uid_base);
    }
    return store->restore(shifted, upper_fd);
  };
  auto info = TRY_CTX(create_sandbox(req, populate, {{"from_snapshot", rec.id}}),
                      "restoring snapshot " + rec.id);
  metrics_.restores++;
  info.restored_from = rec.id;
  return info;
}

// --- rolling snapshots, retention, garbage collection ---------------------------------------

void Daemon::schedule_snapshots(Sandbox& sb) {
  double every = sb.rec.spec.value("snapshot_every", 0.0);
  sb.next_snapshot_at = every > 0 ? now_s() + every : 0;
}

void Daemon::run_retention(bool full) {
  auto all = store_->snapshots("", "");
  if (!all) {
    spdlog::warn("snapshot retention: {}", all.error().message());
    return;
  }
  std::vector<SnapshotAge> ages;
  std::map<std::string, const SnapshotRecord*> by_id;
  for (auto& r : *all) {
    ages.push_back({r.id, r.sandbox_id, r.kind == "manual", r.created_at});
    by_id[r.id] = &r;
  }
  std::set<std::string> touched;
  for (auto& id : retention_drops(ages, cfg_.snapshots, now_s())) {
    const SnapshotRecord& r = *by_id[id];
    if (auto d = drop_snapshot(r, "retention"); !d)
      spdlog::warn("snapshot retention: {}", d.error().message());
    else
      touched.insert(r.profile);
  }
  for (auto& p : cfg_.profiles) {
    if (!full && !touched.count(p)) continue;
    if (!fs::exists(cfg_.state_dir / "snapshots" / p)) continue;
    auto* store = snapshot_store(p).value_or(nullptr);
    if (!store) continue;
    collect_garbage(p, *store);
  }
}

void Daemon::collect_garbage(const std::string& profile, snapshot::Store& store) {
  auto g = store.gc();
  std::string blocked;
  if (g) {
    metrics_.gc_bytes_freed += g->bytes;
    if (g->chunks)
      spdlog::info("snapshot store of profile {}: gc freed {} chunks ({})", profile, g->chunks,
                   format_size(g->bytes));
  } else {
    blocked = g.error().message();
    spdlog::warn("snapshot store of profile {}: gc: {}", profile, blocked);
  }
  snap_stores_.set_gc_blocked(profile, std::move(blocked));
}

json Daemon::store_report() {
  json out = json::object();
  for (auto& [profile, st] : snap_stores_.status())
    out[profile] = {{"chunks", st.stats.chunks},
                    {"stored_bytes", st.stats.stored_bytes},
                    {"quarantined_chunks", st.stats.quarantined},
                    {"gc_blocked", st.gc_blocked.empty() ? json(nullptr) : json(st.gc_blocked)}};
  return out;
}

void Daemon::reconcile_snapshots() {
  for (auto& p : cfg_.profiles) {
    if (!fs::exists(cfg_.state_dir / "snapshots" / p)) continue;
    auto* store = snapshot_store(p).value_or(nullptr);
    if (!store) continue;
    for (auto& id : store->list())
      if (auto r = store_->get_snapshot(id); r && !*r) {
        spdlog::warn("snapshot store of profile {}: removing {}, which was never recorded", p, id);
        (void)store->remove(id);
      }
  }
  if (auto all = store_->snapshots("", ""); all)
    for (auto& r : *all)
      if (auto* store = snapshot_store(r.profile).value_or(nullptr))
        if (auto m = store->load(r.id); !m && m.error().code() == Code::kNotFound)
          (void)drop_snapshot(r, "its data is missing from the store");
}

void Daemon::snapshot_loop() {
  // Collect every store at start and hourly (a crash may have left unreferenced chunks), and
  // at each retention pass the stores where something was dropped.
  run_retention(true);
  double last_full = now_s();
  double next_retention = now_s() + cfg_.snapshots.gc_interval_s;
  while (!stop_.wait_for(std::chrono::milliseconds(500))) {
    double now = now_s();
    for (auto& sb : registry_.all()) {
      if (sb->destroyed || !(sb->next_snapshot_at > 0 && sb->next_snapshot_at <= now)) continue;
      std::lock_guard l(sb->mu);
      if (sb->destroyed) continue;
      double every = sb->rec.spec.value("snapshot_every", 0.0);
      sb->next_snapshot_at = every > 0 ? now + every : 0;
      if (auto r = take_snapshot(*sb, "scheduled", "", true); !r)
        spdlog::warn("sandbox {}: scheduled snapshot failed: {}", sb->rec.id, r.error().message());
    }
    if (now >= next_retention) {
      bool full = now - last_full > 3600;
      if (full) last_full = now;
      run_retention(full);
      next_retention = now_s() + cfg_.snapshots.gc_interval_s;
    }
  }
}

}  // namespace space::daemon
