// Route table and dispatcher (see router.h). Matching is by path segments so that a
// percent-encoded '/' inside an image name cannot change which route is taken.
#include "api/router.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <utility>

#include "api/handlers.h"
#include "common/clock.h"
#include "common/token_bucket.h"
#include "daemon/caller.h"

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
      {verb::post, "/v1/sandboxes", h::create_sandbox, Op::kCreate},
      {verb::get, "/v1/sandboxes", h::list_sandboxes, Op::kRead},
      {verb::get, "/v1/sandboxes/{id}", h::get_sandbox, Op::kRead},
      {verb::delete_, "/v1/sandboxes/{id}", h::delete_sandbox, Op::kLifecycle},
      {verb::post, "/v1/sandboxes/{id}/exec", h::exec, Op::kExec},
      {verb::get, "/v1/sandboxes/{id}/processes", h::list_processes, Op::kRead},
      {verb::delete_, "/v1/sandboxes/{id}/processes/{pid}", h::kill_process, Op::kExec},
      {verb::get, "/v1/sandboxes/{id}/processes/{pid}/logs", h::process_logs, Op::kRead},
      {verb::get, "/v1/sandboxes/{id}/processes/{pid}/wait", h::wait_process, Op::kRead},
      {verb::get, "/v1/sandboxes/{id}/files", h::get_file, Op::kRead},
      {verb::put, "/v1/sandboxes/{id}/files", h::put_file, Op::kFiles},
      {verb::delete_, "/v1/sandboxes/{id}/files", h::delete_file, Op::kFiles},
      {verb::get, "/v1/sandboxes/{id}/diff", h::diff_sandbox, Op::kRead},
      {verb::get, "/v1/sandboxes/{id}/audit", h::get_audit, Op::kRead},
      {verb::post, "/v1/sandboxes/{id}/pause", h::pause_sandbox, Op::kLifecycle},
      {verb::post, "/v1/sandboxes/{id}/timeout", h::set_sandbox_timeout, Op::kLifecycle},
      {verb::post, "/v1/sandboxes/{id}/ports/{port}", h::connect_port, Op::kExec},
      {verb::post, "/v1/sandboxes/{id}/resume", h::resume_sandbox, Op::kLifecycle},
      {verb::post, "/v1/sandboxes/{id}/snapshots", h::create_snapshot, Op::kLifecycle},
      {verb::get, "/v1/sandboxes/{id}/snapshots", h::list_sandbox_snapshots, Op::kRead},
      {verb::post, "/v1/sandboxes/{id}/rollback", h::rollback_sandbox, Op::kLifecycle},
      {verb::get, "/v1/snapshots", h::list_snapshots, Op::kRead},
      {verb::get, "/v1/snapshots/{snap}", h::get_snapshot, Op::kRead},
      {verb::delete_, "/v1/snapshots/{snap}", h::delete_snapshot, Op::kLifecycle},
      {verb::post, "/v1/snapshots/{snap}/restore", h::restore_snapshot, Op::kCreate},
      {verb::put, "/v1/images/{name}", h::import_image, Op::kImages},
      {verb::get, "/v1/images", h::list_images, Op::kRead},
      {verb::get, "/v1/images/{name}", h::get_image, Op::kRead},
      {verb::delete_, "/v1/images/{name}", h::delete_image, Op::kImages},
      {verb::post, "/v1/images/{name}/vm", h::build_image_vm, Op::kImages},
      {verb::post, "/v1/images/{name}/build", h::build_image, Op::kImages},
      {verb::post, "/v1/tokens", h::create_token, Op::kAdmin},
      {verb::get, "/v1/tokens", h::list_tokens, Op::kAdmin},
      {verb::delete_, "/v1/tokens/{id}", h::revoke_token, Op::kAdmin},
      {verb::get, "/v1/health", h::health, Op::kNone},
      {verb::get, "/v1/node", h::node_info, Op::kRead},
      {verb::post, "/v1/node/drain", h::drain_node, Op::kAdmin},
      {verb::get, "/v1/doctor", h::doctor, Op::kAdmin},
      {verb::get, "/metrics", h::metrics, Op::kAdmin},
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
  // Who is asking comes first: on the TCP listener nothing, not even a 404, answers a caller
  // without a valid token.
  double now = now_s();
  std::string_view forwarded = ex.header(kPrincipalHeader);
  Result<Principal> principal =
      forwarded.empty()
          ? authenticate(ctx.transport, ex.header(http::field::authorization), ctx.tokens, now)
      : ctx.transport != Transport::kMutualTls
          ? Result<Principal>(fail(Code::kPermissionDenied,
                                   std::string(kPrincipalHeader) +
                                       " is taken only from a cluster member over mutual TLS "
                                       "(api_tls.client_ca, docs/cluster.md); send an API token"))
          : forwarded_principal(forwarded, ctx.profiles ? *ctx.profiles : std::set<std::string>{},
                                now);
  if (!principal) {
    r = fail(std::move(principal.error()));
  } else if (!match) {
    r = fail(Code::kNotFound, "no route for " + std::string(ex.method_string()) + " " +
                                  ex.target().path +
                                  "; the API is described in api/openapi.yaml (GET /v1/sandboxes, "
                                  "POST /v1/sandboxes/{id}/exec, ...)");
  } else if (auto allowed = authorize(*principal, match->route->op, name); !allowed) {
    r = std::move(allowed);
  } else if (auto ticket = ctx.token_load ? ctx.token_load->enter(principal->token_id())
                                          : Result<TokenLoad::Ticket>(TokenLoad::Ticket());
             !ticket) {
    r = fail(std::move(ticket.error()));
  } else {
    ex.set_params(std::move(match->params));
    // A token limited to some profiles sees the service through a ScopedService; what the
    // daemon records meanwhile (audit events) names the token.
    std::optional<ScopedService> scoped;
    if (!principal->all_profiles()) scoped.emplace(ctx.service, *principal);
    ApiContext hctx{scoped ? static_cast<daemon::SandboxService&>(*scoped) : ctx.service,
                    ctx.metrics,
                    ctx.transport,
                    ctx.tokens,
                    ctx.profiles,
                    &*principal,
                    ctx.token_load};
    daemon::CallerScope caller(daemon::Caller{principal->token_id()});
    try {
      r = match->route->handler(ex, hctx);
    } catch (const nlohmann::json::type_error& e) {
      if (e.id != 316) {
        spdlog::error("api: {} raised {}", name, e.what());
        r = fail(Code::kInternal, std::string("internal error: ") + e.what());
      } else {
        // Text that is not UTF-8 met a JSON serializer. The request's own fields are checked
        // up front (request.h), so this is text the request led the daemon to (a sandbox's
        // file names, say): still the caller's input, never a 500. Logged: a check is missing.
        spdlog::warn("api: {}: text that is not UTF-8 reached the daemon's JSON: {}", name,
                     e.what());
        r = fail(Code::kInvalidArgument,
                 std::string("the request, or text it made the daemon read, is not valid "
                             "UTF-8 (") +
                     e.what() + "); names, paths and values must be UTF-8 text");
      }
    } catch (const std::exception& e) {
      // Handlers return errors as values; an exception here is a bug, not a client error.
      spdlog::error("api: {} raised {}", name, e.what());
      r = fail(Code::kInternal, std::string("internal error: ") + e.what());
    }
  }
  if (!r) {
    const Error& e = r.error();
    if (!ex.responded() && e.code() == Code::kUnauthenticated) {
      // RFC 6750: say how to authenticate, and whether the token presented was the problem.
      std::string challenge = "Bearer realm=\"spaced\"";
      if (!ex.header(http::field::authorization).empty()) challenge += ", error=\"invalid_token\"";
      (void)ex.respond(http::status::unauthorized, "application/json",
                       json_text(error_body(e)) + "\n", {{"WWW-Authenticate", challenge}});
    } else if (!ex.responded()) {
      (void)ex.respond_error(e);
    } else {
      // Headers (and maybe part of a stream) are out: all we can do is cut the body short.
      ex.mark_broken();
    }
    if (e.code() == Code::kUnauthenticated || e.code() == Code::kPermissionDenied) {
      // The message names the token by id at most: never the Authorization header. A flood of
      // refusals must not rotate spaced's log history away: a few lines a second, then one
      // line saying how many were left out (the audit log is not involved).
      static std::mutex refusals_mu;
      static TokenBucket refusals;
      static uint64_t left_out = 0;
      std::unique_lock lock(refusals_mu);
      if (refusals.take(2, 20)) {
        uint64_t skipped = std::exchange(left_out, 0);
        lock.unlock();
        if (skipped > 0)
          spdlog::warn("api: {} more refused requests were not logged one by one (rate limit)",
                       skipped);
        spdlog::info("api: {} {} refused ({}): {}", ex.method_string(), ex.target().path,
                     http_status(e.code()), e.message());
      } else {
        ++left_out;
      }
    }
    if (http_status(e.code()) >= 500) {
      spdlog::warn("api: {} {} -> {}: {}", ex.method_string(), ex.target().path,
                   http_status(e.code()), e.message());
    }
  }
  spdlog::debug("api: {} {} -> {} ({})", ex.method_string(), ex.target().path, ex.status(),
                principal ? principal->describe() : "unauthenticated");
  ctx.metrics.request_done(name, ex.status());
}

}  // namespace space::api
