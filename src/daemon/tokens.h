// API tokens (docs/api-auth.md): bearer credentials for the REST API, each scoped to a set of
// profiles and operations and valid until it expires or is revoked.
//
// A token's text is "spt_<id>_<secret>": <id> is 12 hex digits naming its row, <secret> 64 hex
// digits (32 random bytes). Only SHA-256(secret) is stored, so the database never holds a
// usable credential, and the text is shown exactly once, when the token is made. Secrets are
// compared in constant time. Scopes are stored as given: which operation and profile names are
// valid is decided by the API layer (src/api/auth.h).
//
// This header is one of the daemon's interfaces (docs/ci.md, "Layers"): the token text and
// record, and TokenStore as an abstract store, which is all that api/, e2b/ and gateway/ see.
// The store spaced keeps, the api_tokens table (created by Store's migrations) through its own
// connection to the daemon's SQLite file as the audit log does, is token_store.cc in the daemon
// library; TokenStore::open makes it.
//
// Every token records the token that minted it (issued_by; none for the root operator's).
// Revoking a token revokes, in the same statement, every token below it in that tree, and a
// token is minted only while its issuer is still valid (checked atomically with the insert),
// so a revoked credential leaves nothing it made behind.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "tls/digest.h"

namespace space::daemon {

inline constexpr std::string_view kTokenPrefix = "spt_";
inline constexpr size_t kTokenIdHexDigits = 12;
inline constexpr size_t kTokenSecretBytes = 32;

struct TokenRecord {
  std::string id;  // 12 hex digits
  std::string name;
  std::vector<std::string> profiles;  // "*" = every profile
  std::vector<std::string> ops;
  double created_at = 0;  // unix seconds
  double expires_at = 0;
  std::optional<double> revoked_at;
  std::optional<double> last_used_at;  // updated at most once a minute
  // The id of the token that minted this one; "" when the root operator did (and for tokens
  // made before spaced recorded issuers, which no cascade reaches).
  std::string issued_by;

  bool revoked() const { return revoked_at.has_value(); }
  bool expired(double now) const { return now >= expires_at; }
};

// The two parts of a token's text.
struct TokenText {
  std::string id;
  std::string secret;
};
// Splits "spt_<12 hex>_<64 hex>"; nullopt unless the text has exactly that shape (lower-case
// hex). Never puts the text in an error message: callers must not either.
std::optional<TokenText> parse_token_text(std::string_view text);
// Lower-case hex SHA-256 of `data` (tls/digest.h).
using tls::sha256_hex;
// Whether `id` looks like a token id (12 lower-case hex digits).
bool is_token_id(std::string_view id);

// A token just made: its record and its text (the only time the text exists outside the
// client).
struct IssuedToken {
  TokenRecord record;
  std::string text;
};

class TokenStore {
 public:
  // The daemon's store in `db_file` (token_store.cc, linked with the daemon library only), whose
  // schema must already hold api_tokens (Store::open migrates it). Adds the issued_by column
  // (and its index) to a table made before it existed.
  static Result<std::unique_ptr<TokenStore>> open(const std::filesystem::path& db_file);
  virtual ~TokenStore() = default;

  // Makes a token valid from `now` for `ttl_s` seconds. `issued_by` is the id of the token
  // minting it ("" = the root operator): it must exist and be neither revoked nor expired at
  // `now`, checked in the same statement as the insert, so a token revoked meanwhile mints
  // nothing (kUnauthenticated saying so).
  virtual Result<IssuedToken> create(const std::string& name,
                                     const std::vector<std::string>& profiles,
                                     const std::vector<std::string>& ops, double ttl_s, double now,
                                     const std::string& issued_by = "") = 0;
  // Every token (revoked and expired ones too), newest first. No secrets: only hashes are
  // stored, and those are not returned either.
  virtual Result<std::vector<TokenRecord>> list() = 0;
  virtual Result<std::optional<TokenRecord>> get(const std::string& id) = 0;
  // Marks a token revoked (kNotFound if unknown), and with it every token it minted, and every
  // token those minted, and so on (one statement: all or none). Revoking again keeps the first
  // time. `cascaded`, if given, receives the ids of the tokens below it that this call revoked.
  virtual Result<TokenRecord> revoke(const std::string& id, double now,
                                     std::vector<std::string>* cascaded = nullptr) = 0;
  // The token that `text` is, if its secret matches and it is neither revoked nor expired.
  // Otherwise kUnauthenticated: "invalid API token" when the text is malformed, unknown or
  // its secret is wrong (one message for all three, so ids cannot be probed); and, only for a
  // correct secret, a message saying it was revoked or when it expired. Records the use.
  virtual Result<TokenRecord> authenticate(std::string_view text, double now) = 0;
  // Whether the token `id` (already authenticated) may still be used at `now`: kUnauthenticated
  // with authenticate()'s message once it is revoked or expired, or when it no longer exists.
  // For requests that outlive their authentication (streams: src/api/auth.h StreamAuth).
  virtual Result<void> check_still_valid(const std::string& id, double now) = 0;
};

}  // namespace space::daemon
