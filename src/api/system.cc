// Handlers about the daemon itself: health, doctor (what this host supports), and Prometheus
// metrics (the daemon's own, then the API server's).
#include <signal.h>
#include <unistd.h>

#include "api/handlers.h"
#include "api/request.h"
#include "api/views.h"

namespace space::api::handlers {
using nlohmann::json;

Result<void> health(Exchange& ex, ApiContext& ctx) {
  return ex.respond_json(http::status::ok, to_json(ctx.service.health()));
}

Result<void> doctor(Exchange& ex, ApiContext& ctx) {
  return ex.respond_json(http::status::ok, ctx.service.doctor());
}

Result<void> node_info(Exchange& ex, ApiContext& ctx) {
  return ex.respond_json(http::status::ok, to_json(TRY(ctx.service.node_info())));
}

// POST /v1/node/drain[?exit=true]: the drain report; with exit, spaced then stops (SIGTERM to
// itself, the same orderly shutdown), as `spaced drain` asks.
Result<void> drain_node(Exchange& ex, ApiContext& ctx) {
  bool exit_after = TRY(parse_bool_param(ex.target(), "exit", false));
  // No body, or {} (clients that always send a JSON body); the one option is ?exit=.
  json body = TRY(ex.read_json(json::object()));
  if (!body.is_object() || !body.empty())
    return fail(Code::kInvalidArgument,
                "POST /v1/node/drain takes no body (or {}); its one option is the query "
                "parameter exit, e.g. /v1/node/drain?exit=true");
  json report = to_json(TRY(ctx.service.drain()));
  report["exiting"] = exit_after;
  auto r = ex.respond_json(http::status::ok, report);
  if (exit_after) ::kill(::getpid(), SIGTERM);
  return r;
}

Result<void> metrics(Exchange& ex, ApiContext& ctx) {
  std::string text = ctx.service.metrics();
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += ctx.metrics.render();
  return ex.respond(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", std::move(text));
}

}  // namespace space::api::handlers
