// Handlers for snapshots (docs/snapshots.md): taking one of a sandbox, listing a sandbox's or
// all of them, inspecting and deleting one, rolling a sandbox back to one in place, and
// restoring one into a new sandbox. A {snap} path segment is a snapshot id or its name. Whether
// the caller may see a snapshot is the service's business (ScopedService for tokens); the
// handlers only validate and render.
#include "api/handlers.h"
#include "api/views.h"

namespace space::api::handlers {
namespace {

// The {snap} placeholder, validated.
Result<std::string> snapshot_ref(const Exchange& ex) {
  const std::string& snap = ex.param("snap");
  TRY_VOID(check_snapshot_ref(snap));
  return snap;
}

nlohmann::json snapshot_list(const std::vector<daemon::SnapshotInfo>& list) {
  return {{"snapshots", to_json(list)}};
}

}  // namespace

Result<void> create_snapshot(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  nlohmann::json body = TRY(ex.read_json(nlohmann::json::object()));
  daemon::SnapshotRequest req = TRY(parse_snapshot_request(body));
  daemon::SnapshotInfo info = TRY(ctx.service.snapshot(id, req));
  return ex.respond_json(http::status::created, to_json(info));
}

Result<void> list_sandbox_snapshots(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  std::vector<daemon::SnapshotInfo> list = TRY(ctx.service.list_snapshots(id));
  return ex.respond_json(http::status::ok, snapshot_list(list));
}

Result<void> rollback_sandbox(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  nlohmann::json body = TRY(ex.read_json(nlohmann::json::object()));
  std::string snap = TRY(parse_rollback_request(body));
  daemon::SandboxInfo info = TRY(ctx.service.rollback(id, snap));
  return ex.respond_json(http::status::ok, to_json(info));
}

Result<void> list_snapshots(Exchange& ex, ApiContext& ctx) {
  std::vector<daemon::SnapshotInfo> list = TRY(ctx.service.all_snapshots());
  return ex.respond_json(http::status::ok, snapshot_list(list));
}

Result<void> get_snapshot(Exchange& ex, ApiContext& ctx) {
  std::string snap = TRY(snapshot_ref(ex));
  daemon::SnapshotInfo info = TRY(ctx.service.get_snapshot(snap));
  return ex.respond_json(http::status::ok, to_json(info));
}

Result<void> delete_snapshot(Exchange& ex, ApiContext& ctx) {
  std::string snap = TRY(snapshot_ref(ex));
  TRY_VOID(ctx.service.delete_snapshot(snap));
  return ex.respond_no_content();
}

Result<void> restore_snapshot(Exchange& ex, ApiContext& ctx) {
  std::string snap = TRY(snapshot_ref(ex));
  nlohmann::json body = TRY(ex.read_json(nlohmann::json::object()));
  std::optional<std::string> profile = TRY(parse_restore_request(body));
  daemon::SandboxInfo info = TRY(ctx.service.restore(snap, profile));
  return ex.respond_json(http::status::created, to_json(info));
}

}  // namespace space::api::handlers
