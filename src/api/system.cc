// Handlers about the daemon itself: health, doctor (what this host supports), and Prometheus
// metrics (the daemon's own, then the API server's).
#include "api/handlers.h"

namespace space::api::handlers {

Result<void> health(Exchange& ex, ApiContext& ctx) {
  return ex.respond_json(http::status::ok, ctx.service.health());
}

Result<void> doctor(Exchange& ex, ApiContext& ctx) {
  return ex.respond_json(http::status::ok, ctx.service.doctor());
}

Result<void> metrics(Exchange& ex, ApiContext& ctx) {
  std::string text = ctx.service.metrics();
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += ctx.metrics.render();
  return ex.respond(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", std::move(text));
}

}  // namespace space::api::handlers
