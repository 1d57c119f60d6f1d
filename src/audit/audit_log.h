// The audit log: an append-only, hash-chained record of what happened in each sandbox, kept
// in the daemon's SQLite file (table audit_events, created by the store's migrations) and
// outliving the sandbox. Every event carries a per-sandbox sequence number and an HMAC-SHA256
// over the previous event's MAC and its own fields, keyed by a secret in
// <state_dir>/audit.key, so editing, inserting, deleting or reordering rows is detected by
// verify(). Appends go through one writer thread behind a bounded queue: when the queue is
// full append() blocks — callers (and the sandboxed processes they stand for) wait; events
// are never dropped. The event schema is documented in docs/audit.md.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "tls/digest.h"

namespace space::audit {

struct Event {
  std::string sandbox_id;
  int64_t seq = 0;      // 1, 2, 3 ... per sandbox
  double ts = 0;        // unix seconds
  std::string kind;     // e.g. "exec.start"; see docs/audit.md
  nlohmann::json data;  // kind-specific fields
  std::string hash;     // hex HMAC-SHA256 chaining this event to the previous one

  nlohmann::json to_json() const;
};

struct VerifyReport {
  bool ok = true;
  int64_t events = 0;                    // rows examined
  std::optional<int64_t> first_bad_seq;  // the first sequence number that does not check
  std::string problem;                   // what is wrong there
};

class AuditLog {
 public:
  struct Options {
    size_t queue_limit = 8192;  // queued events before append() blocks
    size_t batch = 1024;        // events per transaction
  };
  // Opens `db_file` (its schema must already hold audit_events) and the key in `key_file`,
  // creating a fresh 32-byte key (mode 0600) if the file does not exist.
  static Result<std::unique_ptr<AuditLog>> open(const std::filesystem::path& db_file,
                                                const std::filesystem::path& key_file,
                                                Options options);
  static Result<std::unique_ptr<AuditLog>> open(const std::filesystem::path& db_file,
                                                const std::filesystem::path& key_file) {
    return open(db_file, key_file, Options{});
  }
  ~AuditLog();  // writes out everything queued, then stops the writer
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Queues an event stamped now. Blocks while the queue is full. Fails only once the log is
  // closed.
  Result<void> append(const std::string& sandbox_id, const std::string& kind, nlohmann::json data);
  // Waits until every event queued before the call is committed.
  // With a timeout: kUnavailable (saying why the writer is behind) when the events are not
  // written by then; a reader must not hang while the disk is full.
  Result<void> flush(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // Events of a sandbox with seq > after, oldest first, at most `limit`.
  Result<std::vector<Event>> read(const std::string& sandbox_id, int64_t after, size_t limit);
  // Whether the sandbox has any event.
  Result<bool> has_events(const std::string& sandbox_id);
  // Walks the chain 1..N checking contiguity and every MAC.
  Result<VerifyReport> verify(const std::string& sandbox_id);
  // Retention: deletes the whole log of every sandbox destroyed before `before` (unix s).
  Result<int> prune_destroyed(double before);

  // Counters for /metrics.
  uint64_t appended() const;
  uint64_t blocked_appends() const;

 private:
  struct Pending {
    std::string sandbox_id;
    double ts;
    std::string kind;
    std::string data;  // canonical JSON text (the bytes the MAC covers)
  };
  struct ChainHead {
    int64_t seq = 0;
    std::string hash;  // hex; "" before the first event
  };

  AuditLog(sqlite3* writer, sqlite3* reader, std::string key, Options options);
  std::string last_error_;  // the writer's last failure, until a batch commits; guarded by mu_
  void writer_loop();
  Result<void> write_batch(std::vector<Pending>& batch);
  Result<ChainHead> load_head(const std::string& sandbox_id);

  sqlite3* wdb_;  // the writer thread's connection
  sqlite3* rdb_;  // readers' connection, guarded by rmu_
  std::mutex rmu_;
  std::string key_;
  Options options_;

  mutable std::mutex mu_;
  std::condition_variable not_full_, not_empty_, committed_cv_;
  std::deque<Pending> queue_;
  uint64_t enqueued_ = 0, committed_ = 0, blocked_ = 0;
  bool closing_ = false;
  std::map<std::string, ChainHead> heads_;  // writer thread only
  std::thread writer_;
};

// HMAC-SHA256 of one event given the previous event's hash (hex; "" for the first).
std::string chain_mac(const std::string& key, const std::string& prev_hash,
                      const std::string& sandbox_id, int64_t seq, double ts,
                      const std::string& kind, const std::string& data);

// Running SHA-256 for exec output (tls/digest.h).
using tls::Sha256;

// Keeps the first and last `limit` bytes of a stream plus its size and SHA-256, for
// exec.end's output summaries.
class OutputDigest {
 public:
  explicit OutputDigest(size_t limit = 512) : limit_(limit) {}
  void add(std::string_view bytes);
  nlohmann::json finish();  // {"bytes","sha256","head_b64","tail_b64","truncated"}
 private:
  size_t limit_;
  uint64_t bytes_ = 0;
  std::string head_, tail_;
  Sha256 sha_;
};

// The 32-byte random key kept in `file` (mode 0600), created on first use: the audit log's MAC
// key, and the snapshot store's master key.
Result<std::string> load_or_create_key(const std::filesystem::path& file);

}  // namespace space::audit
