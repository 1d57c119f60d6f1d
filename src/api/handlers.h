// The REST handlers, one file per resource: sandboxes.cc, exec.cc, processes.cc, files.cc,
// snapshots.cc, images.cc, system.cc, audit.cc, tokens.cc. Each validates its request (request.h),
// calls the SandboxService and writes the response; errors are returned and rendered by the router.
#pragma once

#include <optional>
#include <string>

#include "api/router.h"

namespace space::api::handlers {

// The {id} placeholder, validated.
Result<std::string> sandbox_id(const Exchange& ex);

// A request body (an upload, an image import), for as long as the caller may still send it:
// each chunk is read only after `auth` still holds; `refused` says why it stopped early (the
// token went bad).
daemon::ChunkSource guarded_body(Exchange& ex, StreamAuth& auth, std::optional<Error>& refused);

Result<void> create_sandbox(Exchange& ex, ApiContext& ctx);
Result<void> list_sandboxes(Exchange& ex, ApiContext& ctx);
Result<void> get_sandbox(Exchange& ex, ApiContext& ctx);
Result<void> delete_sandbox(Exchange& ex, ApiContext& ctx);
Result<void> pause_sandbox(Exchange& ex, ApiContext& ctx);
Result<void> set_sandbox_timeout(Exchange& ex, ApiContext& ctx);
Result<void> connect_port(Exchange& ex, ApiContext& ctx);
Result<void> resume_sandbox(Exchange& ex, ApiContext& ctx);
Result<void> diff_sandbox(Exchange& ex, ApiContext& ctx);
Result<void> get_audit(Exchange& ex, ApiContext& ctx);

Result<void> exec(Exchange& ex, ApiContext& ctx);
// The "exit" event of an exec stream (also the end of a detached command's logs).
nlohmann::json exit_event_json(const daemon::ExitStatus& s);

Result<void> list_processes(Exchange& ex, ApiContext& ctx);
Result<void> kill_process(Exchange& ex, ApiContext& ctx);
Result<void> process_logs(Exchange& ex, ApiContext& ctx);
Result<void> wait_process(Exchange& ex, ApiContext& ctx);

Result<void> get_file(Exchange& ex, ApiContext& ctx);
Result<void> put_file(Exchange& ex, ApiContext& ctx);
Result<void> delete_file(Exchange& ex, ApiContext& ctx);

Result<void> create_snapshot(Exchange& ex, ApiContext& ctx);
Result<void> list_sandbox_snapshots(Exchange& ex, ApiContext& ctx);
Result<void> rollback_sandbox(Exchange& ex, ApiContext& ctx);
Result<void> list_snapshots(Exchange& ex, ApiContext& ctx);
Result<void> get_snapshot(Exchange& ex, ApiContext& ctx);
Result<void> delete_snapshot(Exchange& ex, ApiContext& ctx);
Result<void> restore_snapshot(Exchange& ex, ApiContext& ctx);

Result<void> import_image(Exchange& ex, ApiContext& ctx);
Result<void> list_images(Exchange& ex, ApiContext& ctx);
Result<void> get_image(Exchange& ex, ApiContext& ctx);
Result<void> delete_image(Exchange& ex, ApiContext& ctx);
Result<void> build_image_vm(Exchange& ex, ApiContext& ctx);
Result<void> build_image(Exchange& ex, ApiContext& ctx);
// The query of POST /v1/images/{name}/build (docs/images.md): dockerfile (a relative path
// without ".."), profile, no_cache, step_timeout (seconds, > 0 and <= 86400), build_args (a JSON
// object of at most 256 strings), secrets and allow (comma lists). Unknown parameters are refused.
Result<daemon::BuildRequest> parse_build_request(const Target& t);
// One progress event of a build as its NDJSON line's object ("step", "output", "step_done",
// "warning").
nlohmann::json build_event_json(const daemon::BuildEvent& e);

Result<void> create_token(Exchange& ex, ApiContext& ctx);
Result<void> list_tokens(Exchange& ex, ApiContext& ctx);
Result<void> revoke_token(Exchange& ex, ApiContext& ctx);

Result<void> health(Exchange& ex, ApiContext& ctx);
Result<void> doctor(Exchange& ex, ApiContext& ctx);
Result<void> node_info(Exchange& ex, ApiContext& ctx);
Result<void> drain_node(Exchange& ex, ApiContext& ctx);
Result<void> metrics(Exchange& ex, ApiContext& ctx);

}  // namespace space::api::handlers
