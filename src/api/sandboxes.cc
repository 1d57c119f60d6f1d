// Handlers for the sandbox resource: create, list, inspect, destroy, pause, resume, diff
// (since creation, or since a snapshot).
#include <charconv>

#include "api/auth.h"
#include "api/handlers.h"
#include "api/views.h"

namespace space::api::handlers {

Result<std::string> sandbox_id(const Exchange& ex) {
  const std::string& id = ex.param("id");
  TRY_VOID(check_sandbox_id(id));
  return id;
}

Result<void> create_sandbox(Exchange& ex, ApiContext& ctx) {
  nlohmann::json body = TRY(ex.read_json(nlohmann::json::object()));
  daemon::CreateRequest req = TRY(parse_create_request(body));
  daemon::SandboxInfo info = TRY(ctx.service.create(req));
  return ex.respond_json(http::status::created, to_json(info));
}

Result<void> list_sandboxes(Exchange& ex, ApiContext& ctx) {
  std::vector<daemon::SandboxInfo> list = TRY(ctx.service.list());
  return ex.respond_json(http::status::ok, {{"sandboxes", to_json(list)}});
}

Result<void> get_sandbox(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  daemon::SandboxInfo info = TRY(ctx.service.inspect(id));
  return ex.respond_json(http::status::ok, to_json(info));
}

Result<void> delete_sandbox(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  bool force = TRY(parse_bool_param(ex.target(), "force", false));
  bool wait = TRY(parse_bool_param(ex.target(), "wait", true));
  TRY_VOID(ctx.service.destroy(id, force, wait));
  return ex.respond_no_content();
}

Result<void> set_sandbox_timeout(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  nlohmann::json body = TRY(ex.read_json(nlohmann::json::object()));
  if (!body.is_object() || !body.contains("timeout") || body.size() != 1)
    return fail(Code::kInvalidArgument,
                "the body must be {\"timeout\": DURATION}, e.g. {\"timeout\": \"30m\"}: the "
                "sandbox then expires that long from now");
  double t = TRY(parse_duration_value(body["timeout"], "timeout"));
  daemon::SandboxInfo info = TRY(ctx.service.set_timeout(id, t));
  return ex.respond_json(http::status::ok, to_json(info));
}

Result<void> connect_port(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  const std::string& text = ex.param("port");
  int port = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port < 1 || port > 65535)
    return fail(Code::kInvalidArgument, "port must be 1-65535, not \"" + text.substr(0, 16) + "\"");
  if (!ex.wants_upgrade("tcp"))
    return fail(Code::kInvalidArgument,
                "this route turns the connection into a TCP tunnel to the port: send "
                "\"Connection: Upgrade\" and \"Upgrade: tcp\" (space port does)");
  if (!ex.body_done()) return fail(Code::kInvalidArgument, "a port connection takes no body");
  UniqueFd peer = TRY(ctx.service.connect_port(id, static_cast<uint16_t>(port)));
  auto auth = std::make_shared<StreamAuth>(ctx.principal, ctx.tokens);
  return ex.tunnel("tcp", peer.get(), [auth] { return auth->check(); });
}

Result<void> pause_sandbox(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  TRY_VOID(ctx.service.pause(id));
  daemon::SandboxInfo info = TRY(ctx.service.inspect(id));
  return ex.respond_json(http::status::ok, to_json(info));
}

Result<void> resume_sandbox(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  TRY_VOID(ctx.service.resume(id));
  daemon::SandboxInfo info = TRY(ctx.service.inspect(id));
  return ex.respond_json(http::status::ok, to_json(info));
}

// ?since=SNAP: against a snapshot (id or name) instead of the sandbox's creation.
Result<void> diff_sandbox(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  auto since = ex.target().query.find("since");
  if (since == ex.target().query.end()) {
    daemon::Diff diff = TRY(ctx.service.diff(id));
    return ex.respond_json(http::status::ok, to_json(diff));
  }
  TRY_VOID(check_snapshot_ref(since->second, "query parameter since"));
  daemon::Diff diff = TRY(ctx.service.diff_since(id, since->second));
  return ex.respond_json(http::status::ok, to_json(diff));
}

}  // namespace space::api::handlers
