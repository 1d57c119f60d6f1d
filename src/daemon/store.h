// The daemon's metadata store: one SQLite file in the state directory. It records every
// sandbox (live and destroyed), images, and has room for snapshots and audit events (later
// issues add their tables through the same migration list). WAL mode; one connection guarded
// by a mutex — the daemon's write rate is low (a few rows per sandbox).
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "daemon/sandbox_state.h"

namespace space::daemon {

struct SandboxRecord {
  std::string id;
  std::string profile;
  std::string runtime;
  std::string image;
  SandboxState state = SandboxState::kCreating;
  nlohmann::json spec;           // limits, env, workdir, allow, secrets
  nlohmann::json runtime_state;  // Instance::persist()
  uint32_t uid_base = 0;
  double created_at = 0;  // unix seconds
  std::optional<double> expires_at;
  std::optional<double> destroyed_at;
  std::string reason;  // why it was destroyed
  // rolling_back: the snapshot it is being rolled back to and the one its state before was
  // saved as, so that a restarted spaced can finish the rollback (docs/crash-safety.md).
  std::string rollback_to, rollback_saved_as;
};

struct ImageRecord {
  std::string name;
  std::string kind;  // host | imported | built | cache (a build step: not listed)
  std::string path;  // rootfs directory
  double created_at = 0;
  uint64_t size_bytes = 0;
  uint64_t files = 0;
  // What was imported: "rootfs" (a root-filesystem tarball or directory), "oci" (an OCI image
  // layout or oci-archive), "docker" (a `docker save` archive) or "dockerfile" (built by
  // `space image build`); "" for host and for images
  // imported before formats were recorded.
  std::string format;
  // The image config's defaults SPACE honours (image::ImageConfig::to_json(): env,
  // working_dir, user, entrypoint, cmd, labels); {} when there are none.
  nlohmann::json config = nlohmann::json::object();
  std::string digest;  // sha256:... of the chosen manifest (docker: of the config); "" else
};

// A snapshot's metadata (its data is in the snapshot store, src/snapshot). Everything needed
// to restore it into a new sandbox is here: the sandbox's settings when it was taken.
struct SnapshotRecord {
  std::string id;  // snap_<hex>, also the manifest's id
  std::string sandbox_id;
  std::string profile;
  std::string name;    // "" = unnamed
  std::string kind;    // manual | scheduled | exec | rollback
  std::string parent;  // the snapshot it was taken incrementally from, or ""
  std::string runtime;
  std::string image;
  nlohmann::json spec;    // limits, user env, workdir, allow, secrets, snapshot_every
  uint32_t uid_base = 0;  // the sandbox's host uid range when taken
  double created_at = 0;
  uint64_t files = 0, logical_bytes = 0, new_bytes = 0, reused_files = 0;
  nlohmann::json skipped = nlohmann::json::array();
};

class Store {
 public:
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& file);
  ~Store();

  Result<void> put_sandbox(const SandboxRecord& r);  // insert or replace
  // A record that must land (a sandbox recorded destroyed): where the write fails (a full
  // disk) it is kept in memory and written by retry_unsaved(), unless a later put of the same
  // sandbox lands first. A spaced killed meanwhile finds the row as it was, and its reconcile
  // ends it.
  void put_sandbox_eventually(const SandboxRecord& r);
  // Writes what put_sandbox_eventually kept (the reaper calls it once a second).
  void retry_unsaved();
  size_t unsaved() const;
  Result<std::optional<SandboxRecord>> get_sandbox(const std::string& id);
  // Sandboxes not destroyed, oldest first.
  Result<std::vector<SandboxRecord>> live_sandboxes();
  Result<bool> uid_base_in_use(uint32_t base);
  // Deletes destroyed sandboxes' rows older than `before` (unix seconds).
  Result<int> prune_destroyed(double before);

  Result<void> put_image(const ImageRecord& r);
  Result<std::optional<ImageRecord>> get_image(const std::string& name);
  Result<std::vector<ImageRecord>> images();
  Result<void> delete_image(const std::string& name);

  // kAlreadyExists if its sandbox has a snapshot of that name.
  Result<void> put_snapshot(const SnapshotRecord& r);
  Result<std::optional<SnapshotRecord>> get_snapshot(const std::string& id);
  // Every snapshot of that name (of any sandbox and profile), newest first.
  Result<std::vector<SnapshotRecord>> snapshots_named(const std::string& name);
  // Newest first; filtered by sandbox and/or profile when not empty.
  Result<std::vector<SnapshotRecord>> snapshots(const std::string& sandbox_id,
                                                const std::string& profile);
  Result<void> delete_snapshot(const std::string& id);

  // Copies the write-ahead log into the database file (a passive checkpoint, on a connection of
  // its own: writers go on meanwhile). Every connection to space.db runs with
  // wal_autocheckpoint=0, so that the checkpoint's fsync is never paid by a request that happens
  // to commit the 1000th page; the daemon calls this about once a second instead.
  Result<void> checkpoint();
  // After the last checkpoint: frames in the WAL, and those not yet copied into the database
  // (a reader holding an old snapshot keeps them; /metrics shows both).
  int wal_frames() const { return wal_frames_.load(); }
  int wal_unchecked() const { return wal_unchecked_.load(); }
  // What a WAL file is cut back to when it restarts (PRAGMA journal_size_limit).
  static constexpr int64_t kWalKeepBytes = 4 << 20;

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Result<void> migrate();
  Result<void> exec(const char* sql);
  Result<void> write_sandbox(const SandboxRecord& r);  // mu_ held

  std::mutex mu_;
  sqlite3* db_;
  std::mutex ckpt_mu_;
  sqlite3* ckpt_db_ = nullptr;  // opened on first use
  std::atomic<int> wal_frames_{0}, wal_unchecked_{0};
  mutable std::mutex unsaved_mu_;  // a leaf; never held with mu_
  std::map<std::string, SandboxRecord> unsaved_;
};

}  // namespace space::daemon
