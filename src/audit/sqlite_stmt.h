// A prepared SQLite statement, finalized on scope exit: the one wrapper the daemon's tables
// (store.cc, tokens.cc) use, so binding and reading columns is written once. It lives in audit/,
// the lowest layer that opens space.db (the audit log shares set_busy_wait), so that both may
// include it (docs/ci.md, Layers).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace space::audit {

// Waits for a lock another connection to the same file holds (the store's and the audit log's
// share space.db) for up to `timeout_ms`. SQLite's own busy timeout sleeps 1, 2, 5, 10 ms...
// between tries, so a write that meets the audit writer's short transaction waited a whole
// millisecond or more; this polls every 50 us for the first 2 ms, then backs off to 1 ms.
inline void set_busy_wait(sqlite3* db, int timeout_ms) {
  sqlite3_busy_handler(
      db,
      [](void* arg, int tries) -> int {
        long total_ms = reinterpret_cast<intptr_t>(arg);
        // Elapsed time so far, approximately: 40 tries of 50 us, then 1 ms each.
        long elapsed_us = tries < 40 ? tries * 50L : 2000L + (tries - 40) * 1000L;
        if (elapsed_us >= total_ms * 1000L) return 0;
        struct timespec ts {
          0, tries < 40 ? 50'000L : 1'000'000L
        };
        nanosleep(&ts, nullptr);
        return 1;
      },
      reinterpret_cast<void*>(static_cast<intptr_t>(timeout_ms)));
}

// SQLite's last error on `db` as an Error. A full disk is the operator's to fix, not a bug:
// 503 with what to do, never a 500 "internal".
inline Error sqlite_error(sqlite3* db, std::string_view what) {
  const int rc = sqlite3_extended_errcode(db) & 0xff;
  if (rc == SQLITE_FULL || rc == SQLITE_IOERR)
    return Error(Code::kUnavailable,
                 std::string(what) + ": " + sqlite3_errmsg(db) +
                     "; the disk holding spaced's state directory is full or failing: free space "
                     "there (`space snapshots` lists snapshots to delete) and retry");
  return Error(Code::kInternal, std::string(what) + ": " + sqlite3_errmsg(db));
}

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  Error error(std::string_view what) const { return sqlite_error(db_, what); }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind_opt(int i, const std::optional<double>& v) {
    if (v)
      sqlite3_bind_double(s_, i, *v);
    else
      sqlite3_bind_null(s_, i);
    return *this;
  }
  Stmt& bind_null(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  int step() { return sqlite3_step(s_); }
  std::string text(int c) const {
    auto* p = sqlite3_column_text(s_, c);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(s_, c)))
             : std::string();
  }
  double real(int c) const { return sqlite3_column_double(s_, c); }
  int64_t integer(int c) const { return sqlite3_column_int64(s_, c); }
  std::optional<double> opt_real(int c) const {
    if (sqlite3_column_type(s_, c) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_double(s_, c);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

}  // namespace space::audit
