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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
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
//       "header": "Authorization", "format": "Bearer {}"   (optional: add this header)
//     }}
// Exactly one source. Without "header", the placeholder is replaced wherever it appears in the
// request's headers or request-target; with it, the header is set to format with {} = value
// (and the placeholder is still replaced elsewhere). Names: [A-Za-z_][A-Za-z0-9_]{0,63}.
struct SecretDef {
  std::string name;
  enum class Source { kValue, kEnv, kFile, kCommand } source = Source::kValue;
  std::string value;                    // kValue: the literal; kEnv: variable; kFile: path
  std::vector<std::string> command;     // kCommand argv (absolute path first)
  std::chrono::seconds ttl{300};        // kCommand: how long its output is reused
  std::vector<HostPattern> hosts;       // non-empty
  std::vector<std::string> methods;     // upper-case; empty = any
  std::vector<std::string> paths;       // prefixes; empty = any
  std::vector<std::string> profiles;    // non-empty
  std::string env_var;
  std::string header;                   // empty = replace the placeholder only
  std::string format = "{}";

  static Result<SecretDef> from_json(const std::string& name, const nlohmann::json& j);
  bool bound_to(const Host& host) const;
  bool applies(const Host& host, std::string_view method, std::string_view target) const;
};

// Resolves secret values: reads env/file at each use (so rotation needs no restart) and runs
// commands with an empty environment plus PATH, a 10 s timeout and 64 KiB output cap, caching
// the trimmed stdout for `ttl`. Thread-safe. Values never appear in errors or logs.
class SecretStore {
 public:
  explicit SecretStore(std::map<std::string, SecretDef> defs);
  const SecretDef* find(std::string_view name) const;
  const std::map<std::string, SecretDef>& defs() const { return defs_; }
  // kNotFound for an unknown name; kUnavailable when the source cannot give a value (variable
  // unset, file unreadable or empty, command failed); kTimeout when the command overran.
  // Concurrent callers of one command secret whose cached value expired wait for a single run
  // of the command and share its output (if that run fails, each waiting caller tries again).
  Result<std::string> value(const std::string& name);
  // For tests: the clock used for TTLs.
  void set_clock(std::function<std::chrono::steady_clock::time_point()> clock);
  // For tests: how long a command may run before it (its process group) is killed; 10 s.
  void set_command_timeout(std::chrono::milliseconds timeout);

 private:
  Result<std::string> mint(const SecretDef& def);

  std::map<std::string, SecretDef> defs_;
  std::mutex mu_;  // guards cache_, clock_, command_timeout_
  struct Cached { std::string value; std::chrono::steady_clock::time_point expires; };
  std::map<std::string, Cached> cache_;
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

// Streaming redaction of secret values in response bodies: feed() returns the bytes that are
// safe to pass on (holding back at most max(len)-1 bytes that could start a match); finish()
// returns the rest. Each occurrence is replaced by a same-length run of '*', so body lengths
// (Content-Length) stay right: every byte that belongs to an occurrence of any secret becomes
// '*', occurrences overlapping or not, and redactions() counts occurrences. The output does not
// depend on how the body was split into chunks. Empty secrets are ignored.
class Redactor {
 public:
  explicit Redactor(std::vector<std::string> secrets);
  std::string feed(std::string_view chunk);
  std::string finish();  // also resets the stream (the count is kept)
  size_t redactions() const { return count_; }

 private:
  // Examines pending_[0, decided) as match starts, returns those bytes redacted, drops them.
  std::string scan(size_t decided);

  std::vector<std::string> secrets_;
  size_t keep_ = 0;
  std::string pending_;
  size_t masked_ = 0;  // leading bytes of pending_ covered by an occurrence already counted
  size_t count_ = 0;
};

}  // namespace space::egress
