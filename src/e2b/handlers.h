// The E2B door's handlers (door.h), one file per part of the protocol: control.cc (E2B's REST
// control plane), envd_process.cc and envd_filesystem.cc (envd's Connect RPC services),
// envd_files.cc (envd's REST /files, /health, /envs), interpreter.cc (the code interpreter's
// /execute and /contexts). door.cc authenticates and routes; handlers return errors as values,
// which door.cc renders in E2B's shape (or Connect's, for RPCs).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "api/auth.h"
#include "api/exchange.h"
#include "common/error.h"
#include "daemon/service.h"
#include "e2b/door.h"

namespace space::e2b {

namespace http = boost::beast::http;

struct Call {
  api::Exchange& ex;
  daemon::SandboxService& service;  // a ScopedService for a token limited to some profiles
  const Door& door;
  const api::Principal* principal = nullptr;  // the control plane's caller; null sandbox-side
  std::string sandbox_id;                     // sandbox side, and {sandboxID} routes
  uint16_t port = 0;                          // sandbox side: E2b-Sandbox-Port
  // Sandbox side: whether the API token behind the envd access token still holds (revoked or
  // expired: kUnauthenticated). Streams and relays that outlive their request ask it about once
  // a second and end with its error. Empty for /health.
  std::function<Result<void>()> still_allowed;
};

// --- the control plane (control.cc)
struct ControlRoute {
  http::verb method;
  std::string_view pattern;  // "/sandboxes/{sandboxID}"; {x} matches one path segment
  Result<void> (*handler)(Call&);
  api::Op op;
};
const std::vector<ControlRoute>& control_routes();

// --- the sandbox side
// envd (port 49983): Connect RPCs under /process.Process/ and /filesystem.Filesystem/, REST
// /files, /health, /envs. A request no route matches is a 404 naming what is served.
Result<void> serve_envd(Call& call);
// Ends every process envd started (their pump threads use the daemon's exec sessions) and
// waits for their threads; new Starts are refused from then on. Door::shutdown calls it.
void stop_envd_processes();
// The code interpreter (port 49999): /execute, /contexts, /health.
Result<void> serve_interpreter(Call& call);

// Any other port (port_proxy.cc): an HTTP/1.1 reverse proxy, WebSocket upgrades included, to
// that TCP port inside the sandbox (SandboxService::connect_port, as `space port`).
Result<void> serve_port(Call& call);

// envd's parts (envd.cc routes to them; `method` is the RPC's name after the service).
Result<void> envd_process(Call& call, std::string_view method);
Result<void> envd_filesystem(Call& call, std::string_view method);
// One method of a Connect service: its handler (given the request message) and whether it is
// a server stream (Content-Type application/connect+json) or unary (application/json).
struct Rpc {
  std::string_view name;
  Result<void> (*handler)(Call&, const nlohmann::json&);
  bool streaming;
};
// Serves `method` of Connect service `service` ("process.Process") from its `rpcs`: an unknown
// method is unimplemented, naming what is served; the request is read and its kind must be the
// method's (invalid_argument saying which Content-Type it takes).
Result<void> serve_rpc(Call& call, std::string_view service, std::string_view method,
                       const std::vector<Rpc>& rpcs);
Result<void> envd_files(Call& call);  // GET and POST /files

// Who an envd call runs as (envd.cc): the name from Authorization: Basic base64(name:) (or
// /files' ?username=), E2B's "user" when none. A name in the sandbox's /etc/passwd runs as that
// user; "root" as root; "user" missing from it runs as root with HOME=/home/user (created), so
// that E2B's default paths work in images without that account; any other name is refused.
struct EnvdUser {
  std::string name;
  std::string exec_user;         // daemon::ExecRequest::user ("" = root)
  std::string home;              // relative paths resolve against it
  std::vector<std::string> env;  // "K=V" added to every command (HOME, USER)
};
std::string envd_username(const api::Exchange& ex);
Result<EnvdUser> envd_user(Call& call, const std::string& name);
// `path` made absolute against the user's home ("" = the home), "." and ".." folded.
std::string envd_path(const EnvdUser& user, std::string_view path);
// Runs argv to completion as root; its stderr (trimmed) as the error of a non-zero exit.
Result<void> envd_run(Call& call, std::vector<std::string> argv, const std::string& user = "");
// Writes `source` to `path` as `user` would (E2B's envd writes as the call's user): root's
// writes go through SandboxService::write_file; another user's through `sh -c 'mkdir -p DIR &&
// cat > PATH'` run as that user, so the file and the directories made for it are the user's
// and the sandbox's permissions apply (writing where the user may not is permission_denied).
Result<void> envd_write(Call& call, const EnvdUser& user, const std::string& path,
                        const daemon::ChunkSource& source);

// What the control plane answers for a sandbox (GET /sandboxes/{id}, list, create).
nlohmann::json sandbox_json(const daemon::SandboxInfo& info, const Door& door);

}  // namespace space::e2b
