// AuditLog implementation: key management, the chained MAC, the batching writer thread, reads
// and verification. See audit_log.h for the contract and docs/audit.md for the format.
#include "audit/audit_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "audit/sqlite_stmt.h"
#include "common/base64.h"
#include "common/clock.h"

namespace space::audit {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kKeyBytes = 32;

Error sql_error(sqlite3* db, std::string_view what) { return sqlite_error(db, what); }

// One prepared statement, finalized on scope exit.
struct RawStmt {
  sqlite3_stmt* s = nullptr;
  RawStmt(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s, nullptr); }
  ~RawStmt() { sqlite3_finalize(s); }
  RawStmt(const RawStmt&) = delete;
  RawStmt& operator=(const RawStmt&) = delete;
  std::string text(int c) const {
    auto* p = sqlite3_column_text(s, c);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(s, c)))
             : std::string();
  }
};

Result<void> exec_sql(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    return fail(Code::kInternal, std::string("sqlite: ") + m);
  }
  return {};
}

Result<sqlite3*> open_db(const fs::path& file) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return fail(Code::kUnavailable, "opening audit database " + file.string() + ": " + msg);
  }
  set_busy_wait(db, 10000);
  // Checkpoints are the daemon's (Store::checkpoint), never a commit's; a WAL this connection
  // restarts is cut back to 4 MiB (as the store's connections do).
  if (auto r = exec_sql(db,
                        "PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0; "
                        "PRAGMA journal_size_limit=4194304");
      !r) {
    sqlite3_close(db);
    return fail(std::move(r.error()));
  }
  return db;
}

std::string ts_text(double ts) { return fmt::format("{:.6f}", ts); }

}  // namespace

std::string chain_mac(const std::string& key, const std::string& prev_hash,
                      const std::string& sandbox_id, int64_t seq, double ts,
                      const std::string& kind, const std::string& data) {
  // Length-prefixed fields: no two different tuples produce the same message.
  std::string msg;
  for (const std::string& f :
       {prev_hash, sandbox_id, std::to_string(seq), ts_text(ts), kind, data}) {
    msg += std::to_string(f.size());
    msg += ':';
    msg += f;
  }
  return tls::hmac_sha256_hex(key, msg);
}

json Event::to_json() const {
  return {{"sandbox_id", sandbox_id},
          {"seq", seq},
          {"ts", ts},
          {"kind", kind},
          {"data", data},
          {"hash", hash}};
}

Result<std::unique_ptr<AuditLog>> AuditLog::open(const fs::path& db_file, const fs::path& key_file,
                                                 Options options) {
  std::string key = TRY(load_or_create_key(key_file));
  sqlite3* w = TRY(open_db(db_file));
  auto r = open_db(db_file);
  if (!r) {
    sqlite3_close(w);
    return fail(std::move(r.error()));
  }
  {
    RawStmt probe(w, "SELECT 1 FROM audit_events LIMIT 1");
    if (!probe.s) {
      auto e = sql_error(w, "the database has no audit_events table");
      sqlite3_close(w);
      sqlite3_close(*r);
      return fail(std::move(e));
    }
  }
  if (options.queue_limit == 0) options.queue_limit = 1;
  if (options.batch == 0) options.batch = 1;
  std::unique_ptr<AuditLog> log(new AuditLog(w, *r, std::move(key), options));
  log->writer_ = std::thread([p = log.get()] { p->writer_loop(); });
  return log;
}

AuditLog::AuditLog(sqlite3* writer, sqlite3* reader, std::string key, Options options)
    : wdb_(writer), rdb_(reader), key_(std::move(key)), options_(options) {}

AuditLog::~AuditLog() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  not_empty_.notify_all();
  not_full_.notify_all();
  if (writer_.joinable()) writer_.join();
  sqlite3_close(wdb_);
  sqlite3_close(rdb_);
}

Result<void> AuditLog::append(const std::string& sandbox_id, const std::string& kind, json data) {
  Pending p{sandbox_id, now_s(), kind, data.dump(-1, ' ', false, json::error_handler_t::replace)};
  std::unique_lock lock(mu_);
  if (queue_.size() >= options_.queue_limit) {
    ++blocked_;
    not_full_.wait(lock, [&] { return closing_ || queue_.size() < options_.queue_limit; });
  }
  if (closing_) return fail(Code::kUnavailable, "the audit log is closed");
  // Stamp under the lock so timestamps follow queue (and so sequence) order.
  p.ts = std::max(p.ts, now_s());
  queue_.push_back(std::move(p));
  ++enqueued_;
  not_empty_.notify_one();
  return {};
}

Result<void> AuditLog::flush(std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock lock(mu_);
  uint64_t target = enqueued_;
  auto done = [&] { return committed_ >= target || (closing_ && queue_.empty()); };
  if (!timeout) {
    committed_cv_.wait(lock, done);
    return {};
  }
  if (committed_cv_.wait_for(lock, *timeout, done)) return {};
  return fail(Code::kUnavailable,
              "the audit log is behind: its writes fail (" +
                  (last_error_.empty() ? std::string("slow disk") : last_error_) +
                  "); events are kept in memory and written once they can be; retry later");
}

uint64_t AuditLog::appended() const {
  std::lock_guard lock(mu_);
  return committed_;
}
uint64_t AuditLog::blocked_appends() const {
  std::lock_guard lock(mu_);
  return blocked_;
}

Result<AuditLog::ChainHead> AuditLog::load_head(const std::string& sandbox_id) {
  RawStmt s(wdb_,
            "SELECT seq, hash FROM audit_events WHERE sandbox_id = ? ORDER BY seq DESC "
            "LIMIT 1");
  if (!s.s) return fail(sql_error(wdb_, "reading the audit chain head"));
  sqlite3_bind_text(s.s, 1, sandbox_id.data(), static_cast<int>(sandbox_id.size()),
                    SQLITE_TRANSIENT);
  int rc = sqlite3_step(s.s);
  if (rc == SQLITE_DONE) return ChainHead{};
  if (rc != SQLITE_ROW) return fail(sql_error(wdb_, "reading the audit chain head"));
  return ChainHead{sqlite3_column_int64(s.s, 0), s.text(1)};
}

Result<void> AuditLog::write_batch(std::vector<Pending>& batch) {
  std::map<std::string, ChainHead> heads;  // applied to heads_ only after COMMIT
  TRY_VOID(exec_sql(wdb_, "BEGIN IMMEDIATE"));
  auto body = [&]() -> Result<void> {
    RawStmt ins(wdb_,
                "INSERT INTO audit_events (sandbox_id, seq, ts, kind, data, hash) "
                "VALUES (?,?,?,?,?,?)");
    if (!ins.s) return fail(sql_error(wdb_, "preparing the audit insert"));
    for (auto& p : batch) {
      auto it = heads.find(p.sandbox_id);
      if (it == heads.end()) {
        auto known = heads_.find(p.sandbox_id);
        ChainHead h = known != heads_.end() ? known->second : TRY(load_head(p.sandbox_id));
        it = heads.emplace(p.sandbox_id, h).first;
      }
      ChainHead& h = it->second;
      int64_t seq = h.seq + 1;
      std::string mac = chain_mac(key_, h.hash, p.sandbox_id, seq, p.ts, p.kind, p.data);
      sqlite3_reset(ins.s);
      sqlite3_bind_text(ins.s, 1, p.sandbox_id.data(), static_cast<int>(p.sandbox_id.size()),
                        SQLITE_STATIC);
      sqlite3_bind_int64(ins.s, 2, seq);
      sqlite3_bind_double(ins.s, 3, p.ts);
      sqlite3_bind_text(ins.s, 4, p.kind.data(), static_cast<int>(p.kind.size()), SQLITE_STATIC);
      sqlite3_bind_text(ins.s, 5, p.data.data(), static_cast<int>(p.data.size()), SQLITE_STATIC);
      sqlite3_bind_text(ins.s, 6, mac.data(), static_cast<int>(mac.size()), SQLITE_TRANSIENT);
      if (sqlite3_step(ins.s) != SQLITE_DONE) return fail(sql_error(wdb_, "appending audit event"));
      h = ChainHead{seq, std::move(mac)};
    }
    return exec_sql(wdb_, "COMMIT");
  };
  if (auto r = body(); !r) {
    (void)exec_sql(wdb_, "ROLLBACK");
    return r;
  }
  for (auto& [id, h] : heads) heads_[id] = std::move(h);
  return {};
}

void AuditLog::writer_loop() {
  std::vector<Pending> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      not_empty_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty() && closing_) break;
      // Events stay in the queue (and count against its limit) until they are committed.
      size_t n = std::min(queue_.size(), options_.batch);
      batch.assign(queue_.begin(), queue_.begin() + static_cast<long>(n));
    }
    int attempt = 0;
    for (;;) {
      auto r = write_batch(batch);
      if (r) break;
      // Never drop: keep retrying; appenders block behind the full queue meanwhile.
      spdlog::error("audit log: writing {} events failed (attempt {}): {}", batch.size(), ++attempt,
                    r.error().message());
      {
        std::lock_guard lock(mu_);
        last_error_ = r.error().message();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100 * attempt, 2000)));
    }
    {
      std::lock_guard lock(mu_);
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(batch.size()));
      committed_ += batch.size();
      last_error_.clear();
    }
    not_full_.notify_all();
    committed_cv_.notify_all();
  }
  committed_cv_.notify_all();
}

Result<std::vector<Event>> AuditLog::read(const std::string& sandbox_id, int64_t after,
                                          size_t limit) {
  std::lock_guard lock(rmu_);
  RawStmt s(rdb_,
            "SELECT seq, ts, kind, data, hash FROM audit_events WHERE sandbox_id = ? AND "
            "seq > ? ORDER BY seq LIMIT ?");
  if (!s.s) return fail(sql_error(rdb_, "reading the audit log"));
  sqlite3_bind_text(s.s, 1, sandbox_id.data(), static_cast<int>(sandbox_id.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_int64(s.s, 2, after);
  sqlite3_bind_int64(s.s, 3, static_cast<int64_t>(std::min<size_t>(limit, INT64_MAX)));
  std::vector<Event> out;
  int rc;
  while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) {
    Event e;
    e.sandbox_id = sandbox_id;
    e.seq = sqlite3_column_int64(s.s, 0);
    e.ts = sqlite3_column_double(s.s, 1);
    e.kind = s.text(2);
    e.data = json::parse(s.text(3), nullptr, false);
    e.hash = s.text(4);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return fail(sql_error(rdb_, "reading the audit log"));
  return out;
}

Result<bool> AuditLog::has_events(const std::string& sandbox_id) {
  std::lock_guard lock(rmu_);
  RawStmt s(rdb_, "SELECT 1 FROM audit_events WHERE sandbox_id = ? LIMIT 1");
  if (!s.s) return fail(sql_error(rdb_, "reading the audit log"));
  sqlite3_bind_text(s.s, 1, sandbox_id.data(), static_cast<int>(sandbox_id.size()),
                    SQLITE_TRANSIENT);
  int rc = sqlite3_step(s.s);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return fail(sql_error(rdb_, "reading the audit log"));
}

Result<VerifyReport> AuditLog::verify(const std::string& sandbox_id) {
  std::lock_guard lock(rmu_);
  // Ordered by rowid, not seq: a reordered or re-numbered row shows up as a gap.
  RawStmt s(rdb_,
            "SELECT seq, ts, kind, data, hash FROM audit_events WHERE sandbox_id = ? "
            "ORDER BY id");
  if (!s.s) return fail(sql_error(rdb_, "verifying the audit log"));
  sqlite3_bind_text(s.s, 1, sandbox_id.data(), static_cast<int>(sandbox_id.size()),
                    SQLITE_TRANSIENT);
  VerifyReport rep;
  std::string prev;
  int64_t expect = 1;
  int rc;
  while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) {
    ++rep.events;
    if (!rep.ok) continue;
    int64_t seq = sqlite3_column_int64(s.s, 0);
    double ts = sqlite3_column_double(s.s, 1);
    std::string kind = s.text(2), data = s.text(3), hash = s.text(4);
    if (seq != expect) {
      rep.ok = false;
      rep.first_bad_seq = expect;
      rep.problem = fmt::format(
          "expected event {} but found {} (deleted, inserted or "
          "reordered events)",
          expect, seq);
      continue;
    }
    std::string mac = chain_mac(key_, prev, sandbox_id, seq, ts, kind, data);
    if (mac.size() != hash.size() || CRYPTO_memcmp(mac.data(), hash.data(), mac.size()) != 0) {
      rep.ok = false;
      rep.first_bad_seq = seq;
      rep.problem = fmt::format(
          "event {} does not match its MAC (edited, or the chain "
          "before it was changed)",
          seq);
      continue;
    }
    prev = std::move(hash);
    ++expect;
  }
  if (rc != SQLITE_DONE) return fail(sql_error(rdb_, "verifying the audit log"));
  return rep;
}

Result<int> AuditLog::prune_destroyed(double before) {
  std::lock_guard lock(rmu_);
  RawStmt s(rdb_,
            "DELETE FROM audit_events WHERE sandbox_id IN (SELECT sandbox_id FROM "
            "audit_events WHERE kind = 'sandbox.destroy' AND ts < ?)");
  if (!s.s) return fail(sql_error(rdb_, "pruning the audit log"));
  sqlite3_bind_double(s.s, 1, before);
  if (sqlite3_step(s.s) != SQLITE_DONE) return fail(sql_error(rdb_, "pruning the audit log"));
  return sqlite3_changes(rdb_);
}

void OutputDigest::add(std::string_view b) {
  bytes_ += b.size();
  sha_.update(b);
  if (head_.size() < limit_) {
    size_t n = std::min(limit_ - head_.size(), b.size());
    head_.append(b.substr(0, n));
  }
  tail_.append(b.substr(b.size() > limit_ ? b.size() - limit_ : 0));
  if (tail_.size() > limit_) tail_.erase(0, tail_.size() - limit_);
}

json OutputDigest::finish() {
  json j = {{"bytes", bytes_}, {"sha256", sha_.hex()}, {"head_b64", base64_encode(head_)}};
  // The tail only adds information when the output did not fit in the head.
  if (bytes_ > limit_) j["tail_b64"] = base64_encode(tail_);
  j["truncated"] = bytes_ > 2 * limit_;
  return j;
}

// A 32-byte random key in `file` (0600), made on first use.
Result<std::string> load_or_create_key(const fs::path& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    unsigned char k[kKeyBytes];
    if (RAND_bytes(k, sizeof k) != 1) return fail(Code::kInternal, "RAND_bytes failed");
    fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return fail_sys("open", file.string());
    bool ok = ::write(fd, k, sizeof k) == static_cast<ssize_t>(sizeof k) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) {
      ::unlink(file.c_str());
      return fail(Code::kUnavailable, "writing key " + file.string());
    }
    return std::string(reinterpret_cast<char*>(k), sizeof k);
  }
  if (fd < 0) return fail_sys("open", file.string());
  char buf[kKeyBytes + 1];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n != static_cast<ssize_t>(kKeyBytes))
    return fail(Code::kUnavailable,
                "key " + file.string() + " is not " + std::to_string(kKeyBytes) + " bytes");
  return std::string(buf, kKeyBytes);
}

}  // namespace space::audit
