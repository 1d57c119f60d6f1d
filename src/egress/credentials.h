// Credentials the gateway injects into a sandbox's outbound requests. They are defined only in
// spaced's config and never enter a sandbox: a sandbox granted a secret (`--secret NAME`) sees
// a random placeholder in an environment variable, and the gateway swaps the placeholder for
// the real value (or adds a configured header) only on requests to the hosts (and methods and
// paths) the secret is bound to, over TLS it terminates itself. Sources: a literal, an
// environment variable of spaced, a file, or a command that mints a short-lived token, whose
// output is cached for its TTL.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "egress/mask.h"
#include "egress/policy.h"

namespace space::egress {

// One secret as written in spaced's config (docs/configuration.md):
//   "secrets": {
//     "GITHUB_TOKEN": {
//       "value": "..." | "env": "GH_TOKEN" | "file": "/etc/space/gh" |
//       "command": ["/usr/local/bin/mint-token", "--ttl", "900"], "ttl": "15m",
//       "hosts": ["api.github.com", "*.githubusercontent.com"],
//       "methods": ["GET", "POST"],          (optional; default any)
//       "paths": ["/repos/"],                (optional; default any)
//       "profiles": ["live"],                (which profiles may grant it; required)
//       "env_var": "GITHUB_TOKEN",           (variable holding the placeholder; default = name)
//       "header": "Authorization", "format": "Bearer {}",   (optional: set this header)
//       "placeholder_in": ["Authorization", "query:key"]    (optional, see below)
//     }}
// Exactly one source. The value goes only where the definition says: with "header", that header
// is set to format with {} = value on every request the binding matches, and the placeholder is
// replaced nowhere (so it never needs to travel: one-way); without it, the placeholder is
// replaced in the places "placeholder_in" lists, by default the Authorization header only. A
// place is a header name (the placeholder replaced inside that header's values) or "query:NAME"
// (a query parameter NAME whose whole value is the placeholder). Names:
// [A-Za-z_][A-Za-z0-9_]{0,63}.
struct SecretDef {
  std::string name;
  // kRemote: in the gateway process, whose values come from spaced (SecretStore::Fetch).
  enum class Source { kValue, kEnv, kFile, kCommand, kRemote } source = Source::kValue;
  std::string value;                  // kValue: the literal; kEnv: variable; kFile: path
  std::vector<std::string> command;   // kCommand argv (absolute path first)
  std::chrono::seconds ttl{300};      // kCommand: how long its output is reused
  std::vector<HostPattern> hosts;     // non-empty
  std::vector<std::string> methods;   // upper-case; empty = any
  std::vector<std::string> paths;     // prefixes; empty = any
  std::vector<std::string> profiles;  // non-empty
  std::string env_var;
  std::string header;  // empty = replace the placeholder only
  std::string format = "{}";
  std::vector<std::string> placeholder_headers;  // where the placeholder is replaced
  std::vector<std::string> placeholder_query;    // query parameters whose value it may be

  static Result<SecretDef> from_json(const std::string& name, const nlohmann::json& j);
  // The definition without its source, for the gateway process (egress/wire.h): where the
  // value goes, never where it comes from. from_wire() gives a kRemote definition.
  nlohmann::json to_wire() const;
  static Result<SecretDef> from_wire(const std::string& name, const nlohmann::json& j);
  bool bound_to(const Host& host) const;
  // The binding: host, method, and path as the profile's own path check reads it (dot
  // segments with ";" parameters and encoded dots refuse the match, as there).
  bool applies(const Host& host, std::string_view method, std::string_view target) const;
};

// Resolves secret values: reads env/file at each use (so rotation needs no restart) and runs
// commands with an empty environment plus PATH, a 10 s timeout and 64 KiB output cap, caching
// the trimmed stdout for `ttl`. A command that fails is not run again before a backoff (2 s,
// doubling to 5 min, reset by a success) has passed; callers in between get the same error. The
// store remembers the last kRemembered distinct values of each secret it handed out (and the
// literal and readable env/file values from the start), so responses can be masked of every
// value a sandbox could have caused to be sent anywhere. Thread-safe. Values never appear in
// errors or logs.
class SecretStore {
 public:
  static constexpr size_t kRemembered = 4;
  static constexpr std::chrono::seconds kFirstBackoff{2}, kMaxBackoff{300};
  // Asked before a command runs for a caller (a cache miss outside the backoff): false refuses
  // that caller with kResourceExhausted, so a sandbox cannot make spaced run it at will.
  using MintPermit = std::function<bool()>;

  explicit SecretStore(std::map<std::string, SecretDef> defs);
  // The gateway process's store: every value comes through `fetch` from spaced, which hands
  // out only the secrets granted to `sandbox` (and runs any command itself); nothing is read
  // or run here. Values are remembered for masking like any other.
  using Fetch =
      std::function<Result<std::string>(const std::string& name, const std::string& sandbox)>;
  SecretStore(std::map<std::string, SecretDef> defs, Fetch fetch);
  const SecretDef* find(std::string_view name) const;
  const std::map<std::string, SecretDef>& defs() const { return defs_; }
  // kNotFound for an unknown name; kUnavailable when the source cannot give a value (variable
  // unset, file unreadable or empty, command failed or in its backoff); kTimeout when the
  // command overran; kResourceExhausted when `permit` refused a run. Concurrent callers of one
  // command secret whose cached value expired wait for a single run of the command and share
  // its output. Error messages may quote the command's stderr: they are for the operator (the
  // audit log), never for a sandbox.
  // `sandbox`: whose request it is (what a fetching store asks spaced for).
  Result<std::string> value(const std::string& name, const MintPermit& permit = {},
                            const std::string& sandbox = {});
  // The values of `name` remembered so far (newest last), and adding such values learned
  // elsewhere: spaced tells the gateway process what it handed out before, so that those are
  // masked in responses too.
  std::vector<std::string> remembered(const std::string& name);
  void remember_values(const std::string& name, const std::vector<std::string>& values);
  // Every remembered value of every secret in all its mask_forms(), as one matcher; rebuilt
  // only when a new value was seen. Never null.
  std::shared_ptr<const MaskPatterns> mask_patterns();
  // For tests: the clock used for TTLs and backoffs.
  void set_clock(std::function<std::chrono::steady_clock::time_point()> clock);
  // For tests: how long a command may run before it (its process group) is killed; 10 s.
  void set_command_timeout(std::chrono::milliseconds timeout);

 private:
  Result<std::string> mint(const SecretDef& def, const MintPermit& permit);
  void remember(const std::string& name, const std::string& value);

  std::map<std::string, SecretDef> defs_;
  Fetch fetch_;    // set: the gateway process's store
  std::mutex mu_;  // guards everything below but minting_
  struct Cached {
    std::string value;
    std::chrono::steady_clock::time_point expires;
  };
  std::map<std::string, Cached> cache_;
  struct Failure {
    Code code;
    std::string message;
    std::chrono::steady_clock::time_point retry_at;
    std::chrono::seconds backoff;
  };
  std::map<std::string, Failure> failures_;
  std::map<std::string, std::vector<std::string>> seen_;  // newest last
  uint64_t seen_version_ = 0, patterns_version_ = UINT64_MAX;
  std::shared_ptr<const MaskPatterns> patterns_;
  std::function<std::chrono::steady_clock::time_point()> clock_;
  std::chrono::milliseconds command_timeout_{10000};
  // One per command secret, made in the constructor (so the map itself never changes): held
  // while that secret's command runs, so an expired value is minted once, not once per caller.
  std::map<std::string, std::unique_ptr<std::mutex>> minting_;
};

// A placeholder: "space_ph_<NAME>_<32 hex random>". Unguessable, so a sandbox cannot make the
// gateway substitute a secret it was not granted, and recognizable in logs.
std::string make_placeholder(std::string_view name);

// Replaces every occurrence of `from` with `to` in `s`; returns how many.
size_t replace_all(std::string& s, std::string_view from, std::string_view to);

}  // namespace space::egress
