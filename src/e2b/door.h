// The E2B door: spaced speaking E2B's protocol on a listener of its own (config "e2b"), so that
// E2B's official SDKs (JS `e2b`, `@e2b/code-interpreter`, Python `e2b`) drive SPACE sandboxes
// unchanged, given E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (docs/e2b.md).
//
// One port serves both of E2B's origins:
//   - the control plane (E2B's REST API: POST /v2/sandboxes, GET /sandboxes/{id}, ...), for
//     requests that name no sandbox; the caller's X-API-KEY is a SPACE API token written as
//     "e2b_<76 hex>" (TokenStore's "spt_<id>_<secret>", space token create --e2b), and its
//     profiles and operations hold as on SPACE's own API;
//   - the sandbox side (E2B's envd on port 49983, the code interpreter on 49999), for requests
//     with the headers E2b-Sandbox-Id and E2b-Sandbox-Port (E2B_SANDBOX_URL), or, with
//     Options::domain, a Host of "<port>-<sandboxId>.<domain>". Each sandbox has its own envd
//     access token (X-Access-Token), an HMAC of its id under a key only spaced holds
//     (<state_dir>/e2b.key), checked on every sandbox-side call.
//
// Everything goes through the same SandboxService as SPACE's API: an E2B sandbox is an ordinary
// SPACE sandbox (listed by `space ls`, audited, behind its profile's egress allowlist).
// Errors are E2B's shape, {"code": <HTTP status>, "message": "..."}; Connect RPC calls answer
// Connect's, {"code": "not_found", "message": "..."}.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "api/auth.h"
#include "api/exchange.h"
#include "api/router.h"
#include "common/error.h"
#include "e2b/wire.h"

namespace space::e2b {

inline constexpr uint16_t kEnvdPort = 49983;
inline constexpr uint16_t kCodeInterpreterPort = 49999;
// What envd version the door reports: the SDKs turn features on and off by it. Only claim what
// is served (docs/e2b.md).
inline constexpr std::string_view kEnvdVersion = "0.5.7";

struct Options {
  // Host-based routing "<port>-<sandboxId>.<domain>" ("" = headers only).
  std::string domain;
  // templateID -> SPACE image. "base" and "code-interpreter-v1" map to "host" unless given.
  std::map<std::string, std::string> templates;
  // The profile sandboxes are created in when the caller's token does not name exactly one.
  std::string profile = "test";
  // The key of the envd access tokens (32 random bytes, <state_dir>/e2b.key).
  std::string envd_key;
};

// Reads <dir>/e2b.key, making it (0600, 32 random bytes) if missing.
Result<std::string> load_or_make_key(const std::string& dir);

class Door {
 public:
  explicit Door(Options options);

  // Answers one request on the E2B listener (api::ApiServer::Options::dispatch). Never throws.
  void dispatch(api::Exchange& ex, api::ApiContext& ctx);
  // Ends what the door runs on its own (envd's processes and their threads) before the daemon
  // under it stops: after the listener stopped, before Daemon::shutdown.
  void shutdown();

  // The envd access token of sandbox `sandbox_id` for the API token `token_id` that created or
  // connected it: "<token id>.<hex HMAC-SHA256(envd_key, sandbox id, token id)>". The sandbox
  // side checks it, then the API token itself (revoked, expired, its operations: exec for
  // processes and the interpreter, files for files), so revoking the API token revokes it.
  std::string envd_token(std::string_view sandbox_id, std::string_view token_id) const;
  // The caller of a sandbox-side request: the API token its envd access token names, still
  // valid (kUnauthenticated otherwise).
  Result<api::Principal> envd_principal(std::string_view token, std::string_view sandbox_id,
                                        api::ApiContext& ctx) const;
  const Options& options() const { return options_; }
  // templateID -> image name.
  std::string image_for(std::string_view template_id) const;

 private:
  Options options_;
};

// An E2B error: {"code": status, "message": message}.
Result<void> respond_error(api::Exchange& ex, int status, std::string_view message);
// The HTTP status E2B's SDKs expect for a SPACE error.
int status_for(const Error& e);

}  // namespace space::e2b
