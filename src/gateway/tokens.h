// The gateway's API tokens (docs/cluster.md, "Tokens"): a JSON file every replica reads (a
// Kubernetes Secret), so the gateway stays stateless. Tokens have spaced's form
// ("spt_<12 hex id>_<64 hex secret>") and scopes; the file holds only SHA-256(secret):
//
//   {"tokens": [{"id": "1a2b3c4d5e6f", "name": "ci", "secret_sha256": "<64 hex>",
//                "profiles": ["test"], "ops": ["read", "create", "exec", "files", "lifecycle"],
//                "expires_at": "2027-06-01T00:00:00Z"}]}
//
// `space-gateway token create` prints a new token and its entry. Revoking one is removing its
// entry: the file is re-read when it changes (checked at most once a second), and streams of a
// token no longer in it are cut within about a second.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "daemon/tokens.h"

namespace space::gateway {

struct GatewayToken {
  daemon::TokenRecord record;  // id, name, profiles, ops, expires_at
  std::string secret_sha256;
};

// Parses the file's text; errors name the entry and what is wrong.
[[nodiscard]] Result<std::map<std::string, GatewayToken>> parse_tokens(const std::string& text);

class TokenFile {
 public:
  // Reads `file` once (an unreadable or invalid file at start is an error).
  [[nodiscard]] static Result<std::unique_ptr<TokenFile>> open(std::filesystem::path file);

  // The token record for an "Authorization: Bearer spt_..." header value (the whole header);
  // kUnauthenticated with spaced's wording otherwise (never repeating the header).
  Result<daemon::TokenRecord> authenticate(std::string_view authorization);
  // kUnauthenticated once `id` is no longer in the file or has expired.
  Result<void> still_valid(const std::string& id);

 private:
  explicit TokenFile(std::filesystem::path file) : file_(std::move(file)) {}
  void refresh();  // re-reads the file if it changed; a bad file keeps the previous tokens
  std::string file_stamp() const;  // "" when the file cannot be looked at

  std::filesystem::path file_;
  std::mutex mu_;
  std::map<std::string, GatewayToken> tokens_;  // by id; guarded by mu_
  std::string stamp_;                           // guarded by mu_
  std::chrono::steady_clock::time_point next_check_;
  bool reported_bad_ = false;
};

// A new token and its tokens-file entry, for `space-gateway token create`.
struct NewToken {
  std::string text;      // "spt_<id>_<secret>": shown once
  nlohmann::json entry;  // goes into the file's "tokens" array
};
[[nodiscard]] Result<NewToken> make_token(const std::string& name,
                                          const std::vector<std::string>& profiles,
                                          const std::vector<std::string>& ops, double ttl_s);

}  // namespace space::gateway
