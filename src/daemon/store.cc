// SQLite-backed metadata store. Schema changes go through the ordered migration list in
// migrate(); PRAGMA user_version records how far a database has come.
#include "daemon/store.h"

#include <spdlog/spdlog.h>

#include <string>

#include "audit/sqlite_stmt.h"

namespace space::daemon {
using audit::set_busy_wait;
using audit::Stmt;

namespace {

nlohmann::json parse_or_null(const std::string& s) {
  if (s.empty()) return nullptr;
  return nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
}

// The state's name as the database holds it (sandbox_state.h names every state).
const std::string kDestroyedName(to_string(SandboxState::kDestroyed));

constexpr const char* kSandboxCols =
    "id, profile, runtime, image, state, spec, runtime_state, uid_base, created_at, "
    "expires_at, destroyed_at, reason, rollback_to, rollback_saved_as";

SandboxRecord read_sandbox(const Stmt& s) {
  SandboxRecord r;
  r.id = s.text(0);
  r.profile = s.text(1);
  r.runtime = s.text(2);
  r.image = s.text(3);
  // A name this spaced does not know cannot come from an older one (their states are a subset)
  // and a newer one's database is refused at open: still, such a record is torn down.
  r.state = parse_sandbox_state(s.text(4)).value_or(SandboxState::kDestroying);
  r.spec = parse_or_null(s.text(5));
  r.runtime_state = parse_or_null(s.text(6));
  r.uid_base = static_cast<uint32_t>(s.integer(7));
  r.created_at = s.real(8);
  r.expires_at = s.opt_real(9);
  r.destroyed_at = s.opt_real(10);
  r.reason = s.text(11);
  r.rollback_to = s.text(12);
  r.rollback_saved_as = s.text(13);
  return r;
}

ImageRecord read_image(const Stmt& s) {
  ImageRecord r;
  r.name = s.text(0);
  r.kind = s.text(1);
  r.path = s.text(2);
  r.created_at = s.real(3);
  r.size_bytes = static_cast<uint64_t>(s.integer(4));
  r.files = static_cast<uint64_t>(s.integer(5));
  r.format = s.text(6);
  // Written by put_image from a json object; a value that does not parse reads as no config.
  nlohmann::json config = nlohmann::json::parse(s.text(7), nullptr, false);
  r.config = config.is_object() ? std::move(config) : nlohmann::json::object();
  r.digest = s.text(8);
  return r;
}

constexpr const char* kImageCols =
    "name, kind, path, created_at, size_bytes, files, format, config, digest";

constexpr const char* kSnapshotCols =
    "id, sandbox_id, profile, name, kind, parent, runtime, image, spec, uid_base, created_at, "
    "files, logical_bytes, new_bytes, reused_files, skipped";

SnapshotRecord read_snapshot(const Stmt& s) {
  SnapshotRecord r;
  r.id = s.text(0);
  r.sandbox_id = s.text(1);
  r.profile = s.text(2);
  r.name = s.text(3);
  r.kind = s.text(4);
  r.parent = s.text(5);
  r.runtime = s.text(6);
  r.image = s.text(7);
  r.spec = parse_or_null(s.text(8));
  if (!r.spec.is_object()) r.spec = nlohmann::json::object();
  r.uid_base = static_cast<uint32_t>(s.integer(9));
  r.created_at = s.real(10);
  r.files = static_cast<uint64_t>(s.integer(11));
  r.logical_bytes = static_cast<uint64_t>(s.integer(12));
  r.new_bytes = static_cast<uint64_t>(s.integer(13));
  r.reused_files = static_cast<uint64_t>(s.integer(14));
  r.skipped = parse_or_null(s.text(15));
  if (!r.skipped.is_array()) r.skipped = nlohmann::json::array();
  return r;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path& file) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(file.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return fail(Code::kUnavailable, "opening database " + file.string() + ": " + msg);
  }
  set_busy_wait(db, 5000);
  std::unique_ptr<Store> s(new Store(db));
  // journal_size_limit: a WAL that a burst of work grew is cut back to this when it restarts
  // (after a complete checkpoint), so the file does not stay at its high-water mark.
  TRY_VOID(s->exec(("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; "
                    "PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit=" +
                    std::to_string(kWalKeepBytes) + ";")
                       .c_str()));
  TRY_VOID_CTX(s->migrate(), "migrating database " + file.string());
  return s;
}

Store::~Store() {
  sqlite3_close(db_);
  if (ckpt_db_) sqlite3_close(ckpt_db_);
}

Result<void> Store::checkpoint() {
  std::lock_guard lock(ckpt_mu_);
  if (!ckpt_db_) {
    const char* file = sqlite3_db_filename(db_, "main");
    if (!file || sqlite3_open_v2(file, &ckpt_db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
                                 nullptr) != SQLITE_OK) {
      std::string msg = ckpt_db_ ? sqlite3_errmsg(ckpt_db_) : "out of memory";
      sqlite3_close(ckpt_db_);
      ckpt_db_ = nullptr;
      return fail(Code::kUnavailable, "opening the database for checkpoints: " + msg);
    }
    // A connection learns that the file is in WAL mode only when it first reads it; until then
    // a checkpoint on it is a silent no-op (which left every page in the WAL while spaced ran:
    // space.db stayed 4 KiB as the WAL grew by megabytes per hundred sandboxes). So read it.
    const std::string setup =
        "PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit=" + std::to_string(kWalKeepBytes) +
        "; SELECT 1 FROM sqlite_master LIMIT 1";
    int rc = sqlite3_exec(ckpt_db_, setup.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = sqlite3_errmsg(ckpt_db_);
      sqlite3_close(ckpt_db_);
      ckpt_db_ = nullptr;
      return fail(Code::kUnavailable, "opening the database for checkpoints: " + msg);
    }
  }
  int log = 0, done = 0;
  int rc = sqlite3_wal_checkpoint_v2(ckpt_db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  if (rc != SQLITE_OK && rc != SQLITE_BUSY)
    return fail(Code::kUnavailable, std::string("checkpoint: ") + sqlite3_errmsg(ckpt_db_));
  wal_frames_ = log;
  wal_unchecked_ = log > done ? log - done : 0;
  return {};
}

Result<void> Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    return fail(Code::kInternal, std::string("sqlite: ") + m);
  }
  return {};
}

Result<void> Store::migrate() {
  // Each entry moves the schema from version i to i+1. Never edit a shipped entry.
  static const char* kMigrations[] = {
      R"(CREATE TABLE sandboxes (
           id TEXT PRIMARY KEY,
           profile TEXT NOT NULL,
           runtime TEXT NOT NULL,
           image TEXT NOT NULL,
           state TEXT NOT NULL,
           spec TEXT NOT NULL,
           runtime_state TEXT,
           uid_base INTEGER NOT NULL,
           created_at REAL NOT NULL,
           expires_at REAL,
           destroyed_at REAL,
           reason TEXT NOT NULL DEFAULT '');
         CREATE INDEX sandboxes_state ON sandboxes(state);
         CREATE TABLE images (
           name TEXT PRIMARY KEY,
           kind TEXT NOT NULL,
           path TEXT NOT NULL,
           created_at REAL NOT NULL,
           size_bytes INTEGER NOT NULL DEFAULT 0,
           files INTEGER NOT NULL DEFAULT 0);)",
      // 1 -> 2: the audit log (src/audit, docs/audit.md). Rows are never updated; the
      // (sandbox_id, seq) index serves reads, verification and the chain head lookup.
      R"(CREATE TABLE audit_events (
           id INTEGER PRIMARY KEY,
           sandbox_id TEXT NOT NULL,
           seq INTEGER NOT NULL,
           ts REAL NOT NULL,
           kind TEXT NOT NULL,
           data TEXT NOT NULL,
           hash TEXT NOT NULL);
         CREATE INDEX audit_events_sandbox_seq ON audit_events(sandbox_id, seq);)",
      // 2 -> 3: API tokens (src/daemon/tokens.h, docs/api-auth.md). Only SHA-256 of a token's
      // secret is kept; profiles and ops are JSON arrays of names.
      R"(CREATE TABLE api_tokens (
           id TEXT PRIMARY KEY,
           name TEXT NOT NULL,
           secret_hash TEXT NOT NULL,
           profiles TEXT NOT NULL,
           ops TEXT NOT NULL,
           created_at REAL NOT NULL,
           expires_at REAL NOT NULL,
           revoked_at REAL,
           last_used_at REAL);)",
      // 3 -> 4: snapshot metadata (docs/snapshots.md); the data is in <state>/snapshots.
      // Names are unique within a profile.
      R"(CREATE TABLE snapshots (
           id TEXT PRIMARY KEY,
           sandbox_id TEXT NOT NULL,
           profile TEXT NOT NULL,
           name TEXT,
           kind TEXT NOT NULL,
           parent TEXT,
           runtime TEXT NOT NULL,
           image TEXT NOT NULL,
           spec TEXT NOT NULL,
           uid_base INTEGER NOT NULL,
           created_at REAL NOT NULL,
           files INTEGER NOT NULL DEFAULT 0,
           logical_bytes INTEGER NOT NULL DEFAULT 0,
           new_bytes INTEGER NOT NULL DEFAULT 0,
           reused_files INTEGER NOT NULL DEFAULT 0,
           skipped TEXT NOT NULL DEFAULT '[]');
         CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id, created_at);
         CREATE UNIQUE INDEX snapshots_name ON snapshots(profile, name) WHERE name IS NOT NULL;)",
      // 4 -> 5: every create asks whether a uid range is taken; without an index that scanned
      // every row, destroyed ones included (kept destroyed_retention_days), so creates slowed
      // down as the table grew.
      R"(CREATE INDEX sandboxes_uid_base ON sandboxes(uid_base);)",
      // 5 -> 6: which token minted each token, so a revocation reaches what it minted
      // (src/daemon/tokens.h). Rows from before have NULL: no cascade reaches them.
      R"(ALTER TABLE api_tokens ADD COLUMN issued_by TEXT;
         CREATE INDEX api_tokens_issued_by ON api_tokens(issued_by);)",
      // 6 -> 7: a rollback's intent (state rolling_back): the snapshot it goes to and the one
      // the state before was saved as, so that a restarted spaced finishes it.
      R"(ALTER TABLE sandboxes ADD COLUMN rollback_to TEXT NOT NULL DEFAULT '';
         ALTER TABLE sandboxes ADD COLUMN rollback_saved_as TEXT NOT NULL DEFAULT '';)",
      // 7 -> 8: a snapshot's name belongs to its sandbox, not to the whole profile: two runs of
      // one agent may each name a snapshot "before-cleanup" (docs/snapshots.md, "Names").
      R"(DROP INDEX snapshots_name;
         CREATE UNIQUE INDEX snapshots_name ON snapshots(sandbox_id, name) WHERE name IS NOT NULL;
         CREATE INDEX snapshots_by_name ON snapshots(name) WHERE name IS NOT NULL;)",
      // 8 -> 9: what an image was imported from and the config it honours (docs/images.md):
      // its format (rootfs, oci, docker), its config's defaults (JSON) and manifest digest.
      R"(ALTER TABLE images ADD COLUMN format TEXT NOT NULL DEFAULT '';
         ALTER TABLE images ADD COLUMN config TEXT NOT NULL DEFAULT '{}';
         ALTER TABLE images ADD COLUMN digest TEXT NOT NULL DEFAULT '';)",
  };
  std::lock_guard lock(mu_);
  int64_t version;
  {
    // Finalized before the migrations run: DROP INDEX refuses a connection with a statement
    // still open ("database table is locked").
    Stmt q(db_, "PRAGMA user_version");
    if (!q.ok() || q.step() != SQLITE_ROW) return fail(q.error("reading user_version"));
    version = q.integer(0);
  }
  const int64_t target = static_cast<int64_t>(std::size(kMigrations));
  if (version > target)
    return fail(Code::kUnavailable, "database schema version " + std::to_string(version) +
                                        " is newer than this spaced understands (" +
                                        std::to_string(target) +
                                        "); run a newer spaced or use another --state-dir");
  for (int64_t v = version; v < target; ++v) {
    TRY_VOID(exec("BEGIN IMMEDIATE"));
    auto r = exec(kMigrations[v]);
    if (!r) {
      (void)exec("ROLLBACK");
      return r;
    }
    std::string set = "PRAGMA user_version=" + std::to_string(v + 1);
    TRY_VOID(exec(set.c_str()));
    TRY_VOID(exec("COMMIT"));
  }
  return {};
}

Result<void> Store::write_sandbox(const SandboxRecord& r) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO sandboxes (id, profile, runtime, image, state, spec, "
         "runtime_state, uid_base, created_at, expires_at, destroyed_at, reason, rollback_to, "
         "rollback_saved_as) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!s.ok()) return fail(s.error("saving sandbox"));
  s.bind(1, r.id).bind(2, r.profile).bind(3, r.runtime).bind(4, r.image);
  s.bind(5, std::string(to_string(r.state)));
  s.bind(6, r.spec.dump()).bind(7, r.runtime_state.is_null() ? "" : r.runtime_state.dump());
  s.bind(8, static_cast<int64_t>(r.uid_base)).bind(9, r.created_at);
  s.bind_opt(10, r.expires_at).bind_opt(11, r.destroyed_at).bind(12, r.reason);
  s.bind(13, r.rollback_to).bind(14, r.rollback_saved_as);
  if (s.step() != SQLITE_DONE) return fail(s.error("saving sandbox " + r.id));
  return {};
}

Result<void> Store::put_sandbox(const SandboxRecord& r) {
  {
    std::lock_guard lock(mu_);
    TRY_VOID(write_sandbox(r));
  }
  std::lock_guard kept(unsaved_mu_);
  unsaved_.erase(r.id);  // a newer record landed
  return {};
}

void Store::put_sandbox_eventually(const SandboxRecord& r) {
  if (auto w = put_sandbox(r); !w) {
    spdlog::warn("sandbox {}: recording it {}: {} (written again once it can be)", r.id,
                 to_string(r.state), w.error().message());
    std::lock_guard lock(unsaved_mu_);
    unsaved_[r.id] = r;
  }
}

void Store::retry_unsaved() {
  std::lock_guard kept(unsaved_mu_);  // before mu_ (put_sandbox never holds both)
  for (auto it = unsaved_.begin(); it != unsaved_.end();) {
    {
      std::lock_guard lock(mu_);
      if (!write_sandbox(it->second)) return;  // still failing: the next tick tries again
    }
    spdlog::info("sandbox {}: recorded {} (the write failed before)", it->first,
                 to_string(it->second.state));
    it = unsaved_.erase(it);
  }
}

size_t Store::unsaved() const {
  std::lock_guard lock(unsaved_mu_);
  return unsaved_.size();
}

Result<std::optional<SandboxRecord>> Store::get_sandbox(const std::string& id) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kSandboxCols + " FROM sandboxes WHERE id = ?";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("reading sandbox"));
  s.bind(1, id);
  int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<SandboxRecord>{};
  if (rc != SQLITE_ROW) return fail(s.error("reading sandbox " + id));
  return std::optional<SandboxRecord>(read_sandbox(s));
}

Result<std::vector<SandboxRecord>> Store::live_sandboxes() {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kSandboxCols +
                    " FROM sandboxes WHERE state != ? ORDER BY created_at";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("listing sandboxes"));
  s.bind(1, kDestroyedName);
  std::vector<SandboxRecord> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_sandbox(s));
  if (rc != SQLITE_DONE) return fail(s.error("listing sandboxes"));
  return out;
}

Result<bool> Store::uid_base_in_use(uint32_t base) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "SELECT 1 FROM sandboxes WHERE uid_base = ? AND state != ? LIMIT 1");
  if (!s.ok()) return fail(s.error("checking uid range"));
  s.bind(1, static_cast<int64_t>(base)).bind(2, kDestroyedName);
  int rc = s.step();
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return fail(s.error("checking uid range"));
}

Result<int> Store::prune_destroyed(double before) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "DELETE FROM sandboxes WHERE state = ? AND destroyed_at < ?");
  if (!s.ok()) return fail(s.error("pruning sandboxes"));
  s.bind(1, kDestroyedName).bind(2, before);
  if (s.step() != SQLITE_DONE) return fail(s.error("pruning sandboxes"));
  return sqlite3_changes(db_);
}

Result<void> Store::put_image(const ImageRecord& r) {
  std::lock_guard lock(mu_);
  std::string sql =
      std::string("INSERT OR REPLACE INTO images (") + kImageCols + ") VALUES (?,?,?,?,?,?,?,?,?)";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("saving image"));
  s.bind(1, r.name).bind(2, r.kind).bind(3, r.path).bind(4, r.created_at);
  s.bind(5, static_cast<int64_t>(r.size_bytes)).bind(6, static_cast<int64_t>(r.files));
  // The config came from an uploaded image: dump() must not throw on what it holds.
  s.bind(7, r.format)
      .bind(8, r.config.is_object()
                   ? r.config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                   : std::string("{}"));
  s.bind(9, r.digest);
  if (s.step() != SQLITE_DONE) return fail(s.error("saving image " + r.name));
  return {};
}

Result<std::optional<ImageRecord>> Store::get_image(const std::string& name) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kImageCols + " FROM images WHERE name = ?";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("reading image"));
  s.bind(1, name);
  int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<ImageRecord>{};
  if (rc != SQLITE_ROW) return fail(s.error("reading image " + name));
  return std::optional<ImageRecord>(read_image(s));
}

Result<std::vector<ImageRecord>> Store::images() {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kImageCols + " FROM images ORDER BY name";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("listing images"));
  std::vector<ImageRecord> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_image(s));
  if (rc != SQLITE_DONE) return fail(s.error("listing images"));
  return out;
}

Result<void> Store::delete_image(const std::string& name) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "DELETE FROM images WHERE name = ?");
  if (!s.ok()) return fail(s.error("deleting image"));
  s.bind(1, name);
  if (s.step() != SQLITE_DONE) return fail(s.error("deleting image " + name));
  return {};
}

Result<void> Store::put_snapshot(const SnapshotRecord& r) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("INSERT INTO snapshots (") + kSnapshotCols +
                    ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("saving snapshot"));
  s.bind(1, r.id).bind(2, r.sandbox_id).bind(3, r.profile);
  if (r.name.empty())
    s.bind_null(4);
  else
    s.bind(4, r.name);
  s.bind(5, r.kind);
  if (r.parent.empty())
    s.bind_null(6);
  else
    s.bind(6, r.parent);
  s.bind(7, r.runtime).bind(8, r.image).bind(9, r.spec.dump());
  s.bind(10, static_cast<int64_t>(r.uid_base)).bind(11, r.created_at);
  s.bind(12, static_cast<int64_t>(r.files)).bind(13, static_cast<int64_t>(r.logical_bytes));
  s.bind(14, static_cast<int64_t>(r.new_bytes)).bind(15, static_cast<int64_t>(r.reused_files));
  s.bind(16, r.skipped.dump());
  int rc = s.step();
  if (rc == SQLITE_CONSTRAINT)
    return fail(Code::kAlreadyExists, "sandbox " + r.sandbox_id +
                                          " already has a snapshot named \"" + r.name +
                                          "\"; pick another name");
  if (rc != SQLITE_DONE) return fail(s.error("saving snapshot " + r.id));
  return {};
}

Result<std::optional<SnapshotRecord>> Store::get_snapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kSnapshotCols + " FROM snapshots WHERE id = ?";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("reading snapshot"));
  s.bind(1, id);
  int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<SnapshotRecord>{};
  if (rc != SQLITE_ROW) return fail(s.error("reading snapshot " + id));
  return std::optional<SnapshotRecord>(read_snapshot(s));
}

Result<std::vector<SnapshotRecord>> Store::snapshots_named(const std::string& name) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kSnapshotCols +
                    " FROM snapshots WHERE name = ? ORDER BY created_at DESC, id DESC";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("reading snapshots"));
  s.bind(1, name);
  std::vector<SnapshotRecord> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_snapshot(s));
  if (rc != SQLITE_DONE) return fail(s.error("reading snapshots named " + name));
  return out;
}

Result<std::vector<SnapshotRecord>> Store::snapshots(const std::string& sandbox_id,
                                                     const std::string& profile) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kSnapshotCols +
                    " FROM snapshots WHERE (?1 = '' OR sandbox_id = ?1) AND (?2 = '' OR profile "
                    "= ?2) ORDER BY created_at DESC, id DESC";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("listing snapshots"));
  s.bind(1, sandbox_id).bind(2, profile);
  std::vector<SnapshotRecord> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_snapshot(s));
  if (rc != SQLITE_DONE) return fail(s.error("listing snapshots"));
  return out;
}

Result<void> Store::delete_snapshot(const std::string& id) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "DELETE FROM snapshots WHERE id = ?");
  if (!s.ok()) return fail(s.error("deleting snapshot"));
  s.bind(1, id);
  if (s.step() != SQLITE_DONE) return fail(s.error("deleting snapshot " + id));
  return {};
}

}  // namespace space::daemon
