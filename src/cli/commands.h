// The `space` commands, each a thin client of one or two REST calls. A command returns the
// process exit code, or an Error that main() prints as "space: ..." with exit code 125.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "cli/args.h"
#include "cli/client.h"
#include "common/error.h"

namespace space::cli {

// The whole CLI: parse, dispatch, print errors. Returns the exit code.
int main(int argc, char** argv);
Result<int> run_command(const Args& args, const Client& client);

// sandbox commands (commands_sandbox.cc)
Result<int> cmd_create(const Args& a, const Client& c);
Result<int> cmd_ls(const Args& a, const Client& c);
Result<int> cmd_inspect(const Args& a, const Client& c);
Result<int> cmd_rm(const Args& a, const Client& c);
Result<int> cmd_pause(const Args& a, const Client& c);
Result<int> cmd_timeout(const Args& a, const Client& c);
// port forwarding (commands_port.cc)
Result<int> cmd_port(const Args& a, const Client& c);
Result<int> cmd_resume(const Args& a, const Client& c);
Result<int> cmd_diff(const Args& a, const Client& c);
Result<int> cmd_ps(const Args& a, const Client& c);
Result<int> cmd_kill(const Args& a, const Client& c);
Result<int> cmd_logs(const Args& a, const Client& c);
// `space exec -t`: the command on a terminal in the sandbox (commands_terminal.cc).
Result<int> cmd_exec_terminal(const Args& a, const Client& c);
Result<int> cmd_wait(const Args& a, const Client& c);
Result<int> cmd_doctor(const Args& a, const Client& c);

// run and exec (commands_exec.cc)
Result<int> cmd_run(const Args& a, const Client& c);
Result<int> cmd_exec(const Args& a, const Client& c);
// Streams one exec over `conn`: stdout/stderr to ours as they arrive, our stdin to it if
// `forward_stdin`. Returns the command's exit code (126/127 if it could not start,
// 128+signal if it was killed, 128+our signal if we were interrupted).
Result<int> stream_exec(Connection conn, const std::string& id, nlohmann::json body,
                        bool forward_stdin);
// Whether an exec gets our stdin: not when it is a terminal (the command gets /dev/null), nor
// when it is /dev/null itself (the daemon gives the command /dev/null without a chunked body
// and a thread to pump it).
bool should_forward_stdin();
// The bytes of a "stdout" or "stderr" exec event (base64 in its "data").
Result<std::string> exec_event_data(const nlohmann::json& event);
// The shell-style exit code of an exit event, printing its notes (error, timeout, OOM).
int exit_code_of(const nlohmann::json& exit_event);

// cp (commands_cp.cc)
struct Endpoint {
  bool remote = false;
  std::string id;    // remote only
  std::string path;  // local path, or absolute path inside the sandbox
};
// "sb_1:/etc/hosts" -> remote; "./a:b", "/tmp/x", "file" -> local.
Result<Endpoint> parse_endpoint(std::string_view text);
Result<int> cmd_cp(const Args& a, const Client& c);

// images (commands_image.cc)
Result<int> cmd_image_import(const Args& a, const Client& c);
Result<int> cmd_image_ls(const Args& a, const Client& c);
Result<int> cmd_image_inspect(const Args& a, const Client& c);
Result<int> cmd_image_rm(const Args& a, const Client& c);
Result<int> cmd_image_build_vm(const Args& a, const Client& c);
// `space image build NAME [-f DOCKERFILE] [CONTEXT]` (docs/images.md).
Result<int> cmd_image_build(const Args& a, const Client& c);

// snapshots (commands_snapshot.cc)
Result<int> cmd_snapshot(const Args& a, const Client& c);
Result<int> cmd_snapshot_rm(const Args& a, const Client& c);
Result<int> cmd_snapshots(const Args& a, const Client& c);
Result<int> cmd_rollback(const Args& a, const Client& c);
Result<int> cmd_restore(const Args& a, const Client& c);
// "/v1/snapshots/<snap>" with the id or name encoded.
std::string snapshot_target(const std::string& snap, std::string_view suffix = "");

// audit (commands_audit.cc)
Result<int> cmd_audit(const Args& a, const Client& c);
// One event as a human-readable line ("TIME  SEQ  KIND  details\n"), every field escaped
// (escape_text in output.h).
std::string format_audit_event(const nlohmann::json& event);

// MCP server on stdio (mcp.cc)
Result<int> cmd_mcp(const Args& a, const Client& c);

// API tokens (commands_token.cc)
Result<int> cmd_token_create(const Args& a, const Client& c);
Result<int> cmd_token_ls(const Args& a, const Client& c);
Result<int> cmd_token_rm(const Args& a, const Client& c);

// "/v1/sandboxes/<id>" with the id encoded.
std::string sandbox_target(const std::string& id, std::string_view suffix = "");

}  // namespace space::cli
