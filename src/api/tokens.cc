// Handlers for API tokens (docs/api-auth.md): create (the only response that ever carries a
// token's text), list (no secrets), revoke. A token caller with the admin operation sees and
// manages only tokens within its own scope, and cannot mint a token stronger or longer-lived
// than itself; the root operator manages all of them. A token records the token that minted it,
// and revoking one revokes everything minted below it (daemon/tokens.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "api/handlers.h"
#include "common/clock.h"

namespace space::api::handlers {
namespace {

Result<daemon::TokenStore*> token_store(const ApiContext& ctx) {
  if (ctx.tokens == nullptr) return fail(Code::kUnavailable, "this spaced keeps no API tokens");
  return ctx.tokens;
}

const Principal& caller(const ApiContext& ctx) {
  static const Principal kRoot{.root = true};
  return ctx.principal ? *ctx.principal : kRoot;
}

std::unexpected<Error> unknown_token(const std::string& id) {
  return fail(Code::kNotFound,
              "unknown API token " + id.substr(0, 40) + "; `space token ls` lists tokens");
}

}  // namespace

Result<void> create_token(Exchange& ex, ApiContext& ctx) {
  daemon::TokenStore* tokens = TRY(token_store(ctx));
  nlohmann::json body = TRY(ex.read_json());
  static const std::set<std::string> kNoProfiles;
  TokenRequest req = TRY(parse_token_request(body, ctx.profiles ? *ctx.profiles : kNoProfiles));
  double now = now_s();
  const Principal& who = caller(ctx);
  TRY_VOID(check_can_issue(who, req, now));
  daemon::IssuedToken issued =
      TRY_CTX(tokens->create(req.name, req.profiles, req.ops, req.ttl_s, now, who.token_id()),
              "creating token");
  spdlog::info("api: {} created API token {} ({}) for profiles [{}], operations [{}], until {}",
               who.describe(), issued.record.id, issued.record.name,
               fmt::join(issued.record.profiles, ","), fmt::join(issued.record.ops, ","),
               rfc3339(issued.record.expires_at));
  nlohmann::json j = token_json(issued.record, now);
  j["token"] = std::move(issued.text);
  return ex.respond(http::status::created, "application/json", json_text(j) + "\n",
                    {{"Cache-Control", "no-store"}});
}

Result<void> list_tokens(Exchange& ex, ApiContext& ctx) {
  daemon::TokenStore* tokens = TRY(token_store(ctx));
  double now = now_s();
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& t : TRY(tokens->list()))
    if (covers(caller(ctx), t.profiles, t.ops)) arr.push_back(token_json(t, now));
  return ex.respond_json(http::status::ok, {{"tokens", std::move(arr)}});
}

Result<void> revoke_token(Exchange& ex, ApiContext& ctx) {
  daemon::TokenStore* tokens = TRY(token_store(ctx));
  const std::string& id = ex.param("id");
  if (!daemon::is_token_id(id)) return unknown_token(id);
  // Tokens outside the caller's scope do not exist for it (as sandboxes of other profiles).
  auto existing = TRY(tokens->get(id));
  if (!existing || !covers(caller(ctx), existing->profiles, existing->ops))
    return unknown_token(id);
  std::vector<std::string> below;
  daemon::TokenRecord rec = TRY(tokens->revoke(id, now_s(), &below));
  if (below.empty()) {
    spdlog::info("api: {} revoked API token {} ({})", caller(ctx).describe(), rec.id, rec.name);
  } else {
    spdlog::info("api: {} revoked API token {} ({}) and the {} token(s) minted below it: {}",
                 caller(ctx).describe(), rec.id, rec.name, below.size(), fmt::join(below, ","));
  }
  return ex.respond_no_content();
}

}  // namespace space::api::handlers
