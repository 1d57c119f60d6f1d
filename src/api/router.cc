// Route table and dispatcher (see router.h). Matching is by path segments so that a
// percent-encoded '/' inside an image name cannot change which route is taken.
#include "api/router.h"

#include <spdlog/spdlog.h>

#include <exception>

#include "api/handlers.h"

namespace space::api {
namespace {

using http::verb;
namespace h = handlers;

std::vector<std::string_view> split_pattern(std::string_view pattern) {
  std::vector<std::string_view> out;
  size_t start = 1;
  while (start <= pattern.size()) {
    size_t slash = pattern.find('/', start);
    if (slash == std::string_view::npos) slash = pattern.size();
    if (slash > start) out.push_back(pattern.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

std::string route_name(const Route& r) {
  return std::string(http::to_string(r.method)) + " " + std::string(r.pattern);
}

}  // namespace

const std::vector<Route>& routes() {
  static const std::vector<Route> kRoutes = {
      {verb::post, "/v1/sandboxes", h::create_sandbox},
      {verb::get, "/v1/sandboxes", h::list_sandboxes},
      {verb::get, "/v1/sandboxes/{id}", h::get_sandbox},
      {verb::delete_, "/v1/sandboxes/{id}", h::delete_sandbox},
      {verb::post, "/v1/sandboxes/{id}/exec", h::exec},
      {verb::get, "/v1/sandboxes/{id}/processes", h::list_processes},
      {verb::delete_, "/v1/sandboxes/{id}/processes/{pid}", h::kill_process},
      {verb::get, "/v1/sandboxes/{id}/files", h::get_file},
      {verb::put, "/v1/sandboxes/{id}/files", h::put_file},
      {verb::delete_, "/v1/sandboxes/{id}/files", h::delete_file},
      {verb::get, "/v1/sandboxes/{id}/diff", h::diff_sandbox},
      {verb::get, "/v1/sandboxes/{id}/audit", h::get_audit},
      {verb::post, "/v1/sandboxes/{id}/pause", h::pause_sandbox},
      {verb::post, "/v1/sandboxes/{id}/resume", h::resume_sandbox},
      {verb::put, "/v1/images/{name}", h::import_image},
      {verb::get, "/v1/images", h::list_images},
      {verb::delete_, "/v1/images/{name}", h::delete_image},
      {verb::get, "/v1/health", h::health},
      {verb::get, "/v1/doctor", h::doctor},
      {verb::get, "/metrics", h::metrics},
  };
  return kRoutes;
}

std::optional<RouteMatch> match_route(http::verb method, const std::vector<std::string>& segments) {
  for (const Route& r : routes()) {
    if (r.method != method) continue;
    auto parts = split_pattern(r.pattern);
    if (parts.size() != segments.size()) continue;
    RouteMatch m{&r, {}};
    bool ok = true;
    for (size_t i = 0; i < parts.size() && ok; ++i) {
      if (parts[i].size() > 2 && parts[i].front() == '{' && parts[i].back() == '}') {
        m.params.emplace_back(std::string(parts[i].substr(1, parts[i].size() - 2)), segments[i]);
      } else {
        ok = parts[i] == segments[i];
      }
    }
    if (ok) return m;
  }
  return std::nullopt;
}

void dispatch(Exchange& ex, ApiContext& ctx) {
  auto match = match_route(ex.method(), ex.target().segments);
  std::string name = match ? route_name(*match->route) : "unmatched";
  Result<void> r;
  if (!match) {
    r = fail(Code::kNotFound, "no route for " + std::string(ex.method_string()) + " " +
                                  ex.target().path +
                                  "; the API is described in api/openapi.yaml (GET /v1/sandboxes, "
                                  "POST /v1/sandboxes/{id}/exec, ...)");
  } else {
    ex.set_params(std::move(match->params));
    try {
      r = match->route->handler(ex, ctx);
    } catch (const std::exception& e) {
      // Handlers return errors as values; an exception here is a bug, not a client error.
      spdlog::error("api: {} raised {}", name, e.what());
      r = fail(Code::kInternal, std::string("internal error: ") + e.what());
    }
  }
  if (!r) {
    const Error& e = r.error();
    if (!ex.responded()) {
      (void)ex.respond_error(e);
    } else {
      // Headers (and maybe part of a stream) are out: all we can do is cut the body short.
      ex.mark_broken();
    }
    if (http_status(e.code()) >= 500) {
      spdlog::warn("api: {} {} -> {}: {}", ex.method_string(), ex.target().path,
                   http_status(e.code()), e.message());
    }
  }
  spdlog::debug("api: {} {} -> {}", ex.method_string(), ex.target().path, ex.status());
  ctx.metrics.request_done(name, ex.status());
}

}  // namespace space::api
