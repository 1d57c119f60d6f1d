// The daemon's API token store (TokenStore in tokens.h): the api_tokens table of spaced's SQLite
// file, through a connection of its own. Only the daemon library has it; the layers above see
// the TokenStore interface.
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sqlite3.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "audit/sqlite_stmt.h"
#include "common/clock.h"
#include "common/hex.h"
#include "daemon/tokens.h"

namespace space::daemon {
using audit::set_busy_wait;
using audit::Stmt;

namespace {

Result<std::string> random_hex(size_t bytes) {
  std::vector<unsigned char> b(bytes);
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1)
    return fail(Code::kInternal, "RAND_bytes failed: no randomness for a new API token");
  std::string out = to_hex(b.data(), b.size());
  OPENSSL_cleanse(b.data(), b.size());
  return out;
}

constexpr const char* kCols =
    "id, name, profiles, ops, created_at, expires_at, revoked_at, last_used_at, secret_hash, "
    "issued_by";

std::vector<std::string> string_list(const std::string& json_text) {
  std::vector<std::string> out;
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (auto& v : j)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

TokenRecord read_token(const Stmt& s) {
  TokenRecord r;
  r.id = s.text(0);
  r.name = s.text(1);
  r.profiles = string_list(s.text(2));
  r.ops = string_list(s.text(3));
  r.created_at = s.real(4);
  r.expires_at = s.real(5);
  r.revoked_at = s.opt_real(6);
  r.last_used_at = s.opt_real(7);
  r.issued_by = s.text(9);  // NULL reads as ""
  return r;
}

// Why a token whose secret matched may not be used at `now`; nullopt if it may.
std::optional<Error> refusal(const TokenRecord& rec, double now) {
  std::string who = "API token " + rec.id + " (" + rec.name + ")";
  if (rec.revoked_at)
    return Error(Code::kUnauthenticated,
                 who + " was revoked at " + rfc3339(*rec.revoked_at) + "; ask for a new one");
  if (rec.expired(now))
    return Error(Code::kUnauthenticated, who + " expired at " + rfc3339(rec.expires_at) +
                                             "; create a new one with `space token create`");
  return std::nullopt;
}

Error invalid_token() {
  return Error(Code::kUnauthenticated,
               "invalid API token (expected \"Authorization: Bearer spt_<id>_<secret>\" with a "
               "token from `space token create`)");
}

}  // namespace

// The api_tokens table through a connection of its own.
class SqliteTokenStore final : public TokenStore {
 public:
  explicit SqliteTokenStore(sqlite3* db) : db_(db) {}
  ~SqliteTokenStore() override { sqlite3_close(db_); }
  SqliteTokenStore(const SqliteTokenStore&) = delete;
  SqliteTokenStore& operator=(const SqliteTokenStore&) = delete;

  Result<IssuedToken> create(const std::string& name, const std::vector<std::string>& profiles,
                             const std::vector<std::string>& ops, double ttl_s, double now,
                             const std::string& issued_by) override;
  Result<std::vector<TokenRecord>> list() override;
  Result<std::optional<TokenRecord>> get(const std::string& id) override;
  Result<TokenRecord> revoke(const std::string& id, double now,
                             std::vector<std::string>* cascaded) override;
  Result<TokenRecord> authenticate(std::string_view text, double now) override;
  Result<void> check_still_valid(const std::string& id, double now) override;

 private:
  Result<void> touch(const std::string& id, double now);

  std::mutex mu_;
  sqlite3* db_;
};

Result<std::unique_ptr<TokenStore>> TokenStore::open(const std::filesystem::path& db_file) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return fail(Code::kUnavailable, "opening database " + db_file.string() + ": " + msg);
  }
  set_busy_wait(db, 5000);
  // Checkpoints are the daemon's (Store::checkpoint), never a commit's.
  sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit=4194304", nullptr,
               nullptr, nullptr);
  std::unique_ptr<TokenStore> s = std::make_unique<SqliteTokenStore>(db);
  Stmt q(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'api_tokens'");
  if (!q.ok() || q.step() != SQLITE_ROW)
    return fail(Code::kUnavailable, db_file.string() +
                                        " has no api_tokens table; open it with the store "
                                        "first (it migrates the schema)");
  return s;
}

Result<IssuedToken> SqliteTokenStore::create(const std::string& name,
                                             const std::vector<std::string>& profiles,
                                             const std::vector<std::string>& ops, double ttl_s,
                                             double now, const std::string& issued_by) {
  IssuedToken out;
  TokenRecord& r = out.record;
  r.name = name;
  r.profiles = profiles;
  r.ops = ops;
  r.created_at = now;
  r.expires_at = now + ttl_s;
  r.issued_by = issued_by;
  {
    std::lock_guard lock(mu_);
    for (int attempt = 0;; ++attempt) {
      r.id = TRY(random_hex(kTokenIdHexDigits / 2));
      std::string secret = TRY(random_hex(kTokenSecretBytes));
      // The issuer's validity is part of the insert: a revoke() cannot slip in between a check
      // and the row, so a token revoked while it mints leaves no child behind.
      Stmt s(db_,
             "INSERT INTO api_tokens (id, name, secret_hash, profiles, ops, created_at, "
             "expires_at, issued_by) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE ?8 IS NULL "
             "OR EXISTS (SELECT 1 FROM api_tokens WHERE id = ?8 AND revoked_at IS NULL AND "
             "expires_at > ?6)");
      if (!s.ok()) return fail(s.error("saving API token"));
      s.bind(1, r.id).bind(2, r.name).bind(3, sha256_hex(secret));
      s.bind(4, nlohmann::json(r.profiles).dump()).bind(5, nlohmann::json(r.ops).dump());
      s.bind(6, r.created_at).bind(7, r.expires_at);
      if (issued_by.empty())
        s.bind_null(8);
      else
        s.bind(8, issued_by);
      int rc = s.step();
      if (rc == SQLITE_DONE && sqlite3_changes(db_) == 1) {
        out.text = std::string(kTokenPrefix) + r.id + "_" + secret;
        OPENSSL_cleanse(secret.data(), secret.size());
        return out;
      }
      OPENSSL_cleanse(secret.data(), secret.size());
      if (rc == SQLITE_DONE) break;  // no row: the issuer is no longer valid
      // An id collision (48 random bits) is retried; anything else is an error.
      if (rc != SQLITE_CONSTRAINT || attempt >= 8) return fail(s.error("saving API token"));
    }
  }
  auto issuer = TRY(get(issued_by));
  std::optional<Error> why = issuer ? refusal(*issuer, now) : std::nullopt;
  if (!why)
    why = Error(Code::kUnauthenticated,
                "API token " + issued_by + " no longer exists; ask for a new one");
  return fail(std::move(*why).wrap("minting a token"));
}

Result<std::vector<TokenRecord>> SqliteTokenStore::list() {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kCols + " FROM api_tokens ORDER BY created_at DESC";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("listing API tokens"));
  std::vector<TokenRecord> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_token(s));
  if (rc != SQLITE_DONE) return fail(s.error("listing API tokens"));
  return out;
}

Result<std::optional<TokenRecord>> SqliteTokenStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kCols + " FROM api_tokens WHERE id = ?";
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return fail(s.error("reading API token"));
  s.bind(1, id);
  int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<TokenRecord>{};
  if (rc != SQLITE_ROW) return fail(s.error("reading API token"));
  return std::optional<TokenRecord>(read_token(s));
}

Result<TokenRecord> SqliteTokenStore::revoke(const std::string& id, double now,
                                             std::vector<std::string>* cascaded) {
  {
    std::lock_guard lock(mu_);
    if (cascaded) {
      // What the update below will reach, for the caller's log line. Nothing writes tokens
      // between the two statements: every write goes through this connection under mu_.
      Stmt q(db_,
             "WITH RECURSIVE below(id) AS (SELECT id FROM api_tokens WHERE issued_by = ?1 "
             "UNION SELECT t.id FROM api_tokens t JOIN below b ON t.issued_by = b.id) "
             "SELECT id FROM api_tokens WHERE id IN below AND revoked_at IS NULL "
             "ORDER BY created_at");
      if (!q.ok()) return fail(q.error("revoking API token"));
      q.bind(1, id);
      int rc;
      cascaded->clear();
      while ((rc = q.step()) == SQLITE_ROW) cascaded->push_back(q.text(0));
      if (rc != SQLITE_DONE) return fail(q.error("revoking API token " + id));
    }
    // The token and everything minted below it, transitively, in one statement.
    Stmt s(db_,
           "WITH RECURSIVE tree(id) AS (SELECT ?2 UNION SELECT t.id FROM api_tokens t JOIN "
           "tree ON t.issued_by = tree.id) "
           "UPDATE api_tokens SET revoked_at = ?1 WHERE id IN tree AND revoked_at IS NULL");
    if (!s.ok()) return fail(s.error("revoking API token"));
    s.bind(1, now).bind(2, id);
    if (s.step() != SQLITE_DONE) return fail(s.error("revoking API token " + id));
  }
  auto r = TRY(get(id));
  if (!r)
    return fail(Code::kNotFound,
                "unknown API token " + id.substr(0, 40) + "; `space token ls` lists tokens");
  return std::move(*r);
}

Result<TokenRecord> SqliteTokenStore::authenticate(std::string_view text, double now) {
  auto parts = parse_token_text(text);
  if (!parts) return fail(invalid_token());
  std::string hash;
  TokenRecord rec;
  {
    std::lock_guard lock(mu_);
    std::string sql = std::string("SELECT ") + kCols + " FROM api_tokens WHERE id = ?";
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return fail(s.error("reading API token"));
    s.bind(1, parts->id);
    int rc = s.step();
    if (rc == SQLITE_DONE) {
      // Hash anyway, so an unknown id costs the same time as a wrong secret.
      (void)sha256_hex(parts->secret);
      return fail(invalid_token());
    }
    if (rc != SQLITE_ROW) return fail(s.error("reading API token"));
    rec = read_token(s);
    hash = s.text(8);
  }
  std::string given = sha256_hex(parts->secret);
  OPENSSL_cleanse(parts->secret.data(), parts->secret.size());
  if (hash.size() != given.size() || CRYPTO_memcmp(hash.data(), given.data(), given.size()) != 0)
    return fail(invalid_token());
  if (auto why = refusal(rec, now)) return fail(std::move(*why));
  if (!rec.last_used_at || now - *rec.last_used_at >= 60) {
    (void)touch(rec.id, now);  // bookkeeping only: a failure must not refuse the request
    rec.last_used_at = now;
  }
  return rec;
}

Result<void> SqliteTokenStore::check_still_valid(const std::string& id, double now) {
  auto rec = TRY_CTX(get(id), "checking API token " + id);
  if (!rec)
    return fail(Code::kUnauthenticated, "API token " + id + " no longer exists; ask for a new one");
  if (auto why = refusal(*rec, now)) return fail(std::move(*why));
  return {};
}

Result<void> SqliteTokenStore::touch(const std::string& id, double now) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "UPDATE api_tokens SET last_used_at = ? WHERE id = ?");
  if (!s.ok()) return fail(s.error("recording API token use"));
  s.bind(1, now).bind(2, id);
  if (s.step() != SQLITE_DONE) return fail(s.error("recording API token use"));
  return {};
}

}  // namespace space::daemon
