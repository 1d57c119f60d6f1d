#include "e2b/door.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/clock.h"
#include "common/fd.h"
#include "common/hex.h"
#include "daemon/caller.h"
#include "daemon/tokens.h"
#include "e2b/handlers.h"
#include "e2b/wire.h"
#include "tls/digest.h"

namespace space::e2b {

namespace {

// Whether `pattern` ("/sandboxes/{sandboxID}/timeout") matches `segments`; the {x} values.
std::optional<std::vector<std::pair<std::string, std::string>>> match(
    std::string_view pattern, const std::vector<std::string>& segments) {
  std::vector<std::pair<std::string, std::string>> params;
  size_t i = 0, pos = 1;  // past the leading '/'
  while (pos <= pattern.size()) {
    size_t end = pattern.find('/', pos);
    if (end == std::string_view::npos) end = pattern.size();
    std::string_view part = pattern.substr(pos, end - pos);
    if (i >= segments.size()) return std::nullopt;
    if (part.size() > 2 && part.front() == '{' && part.back() == '}') {
      if (segments[i].empty()) return std::nullopt;
      params.emplace_back(std::string(part.substr(1, part.size() - 2)), segments[i]);
    } else if (part != segments[i]) {
      return std::nullopt;
    }
    ++i;
    pos = end + 1;
  }
  if (i != segments.size()) return std::nullopt;
  return params;
}

bool equal_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

Result<std::string> load_or_make_key(const std::string& dir) {
  const std::string path = dir + "/e2b.key";
  const std::string where = "the E2B door's key " + path;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd) {
    char buf[64];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n != 32)
      return fail(Code::kUnavailable,
                  where +
                      " is not 32 bytes; remove it and restart spaced (envd access tokens "
                      "of existing sandboxes change)");
    return std::string(buf, 32);
  }
  if (errno != ENOENT) return fail(Error::sys("open", path).wrap(where));
  std::string key(32, '\0');
  if (::getrandom(key.data(), key.size(), 0) != ssize_t(key.size()))
    return fail(Error::sys("getrandom").wrap(where));
  const std::string tmp = path + ".tmp";
  UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out) return fail(Error::sys("open", tmp).wrap(where));
  if (::write(out.get(), key.data(), key.size()) != ssize_t(key.size()) ||
      ::fsync(out.get()) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    auto e = Error::sys("write", tmp).wrap(where);
    ::unlink(tmp.c_str());
    return fail(std::move(e));
  }
  return key;
}

Door::Door(Options options) : options_(std::move(options)) {
  options_.templates.try_emplace("base", "host");
  options_.templates.try_emplace("code-interpreter-v1", "host");
}

void Door::shutdown() { stop_envd_processes(); }

std::string Door::envd_token(std::string_view sandbox_id, std::string_view token_id) const {
  std::string data = "envd";
  data += '\0';
  data += sandbox_id;
  data += '\0';
  data += token_id;
  return std::string(token_id) + "." + tls::hmac_sha256_hex(options_.envd_key, data);
}

Result<api::Principal> Door::envd_principal(std::string_view token, std::string_view sandbox_id,
                                            api::ApiContext& ctx) const {
  if (token.empty())
    return fail(Code::kUnauthenticated,
                "missing X-Access-Token: sandbox-side calls need the sandbox's envd access token "
                "(envdAccessToken of create or connect)");
  auto dot = token.find('.');
  std::string_view id = dot == std::string_view::npos ? std::string_view() : token.substr(0, dot);
  if (!daemon::is_token_id(id) || !equal_secret(token, envd_token(sandbox_id, id)))
    return fail(Code::kUnauthenticated, "X-Access-Token is not an envd access token of sandbox " +
                                            std::string(sandbox_id).substr(0, 64) +
                                            " (create and connect answer one as envdAccessToken)");
  if (!ctx.tokens) return fail(Code::kUnauthenticated, "this spaced has no API tokens");
  // The API token it was given to must still hold: revoked or expired, its envd tokens go too.
  TRY_VOID(ctx.tokens->check_still_valid(std::string(id), now_s()));
  auto rec = TRY(ctx.tokens->get(std::string(id)));
  if (!rec) return fail(Code::kUnauthenticated, "the API token of this envd access token is gone");
  api::Principal p;
  p.token = std::move(*rec);
  return p;
}

std::string Door::image_for(std::string_view template_id) const {
  auto it = options_.templates.find(std::string(template_id));
  return it != options_.templates.end() ? it->second : std::string(template_id);
}

int status_for(const Error& e) { return http_status(e.code()); }

Result<void> respond_error(api::Exchange& ex, int status, std::string_view message) {
  nlohmann::json body = {{"code", status}, {"message", std::string(message)}};
  return ex.respond(http::int_to_status(unsigned(status)), "application/json",
                    api::json_text(body) + "\n");
}

void Door::dispatch(api::Exchange& ex, api::ApiContext& ctx) {
  Result<void> r;
  std::string name = "e2b.unmatched";
  std::optional<api::Principal> principal;
  std::optional<api::ScopedService> scoped;
  std::optional<daemon::CallerScope> caller;
  try {
    std::string sandbox_id(ex.header("E2b-Sandbox-Id"));
    std::optional<uint16_t> port;
    if (!sandbox_id.empty()) {
      // No E2b-Sandbox-Port is envd's; a bad one reaches serve_port as 0, which refuses it.
      std::string_view port_header = ex.header("E2b-Sandbox-Port");
      port = port_header.empty() ? kEnvdPort : parse_port(port_header).value_or(0);
    } else if (auto h = route_host(ex.header(http::field::host), options_.domain)) {
      port = h->first;
      sandbox_id = h->second;
    }
    if (port) {
      // The sandbox side: the sandbox's own envd access token, except for /health.
      name = *port == kEnvdPort              ? "e2b.envd"
             : *port == kCodeInterpreterPort ? "e2b.interpreter"
                                             : "e2b.port";
      // (/health of a user's port is the user's server's: proxied, with the token.)
      const bool health =
          (*port == kEnvdPort || *port == kCodeInterpreterPort) && ex.target().path == "/health";
      std::string_view token = ex.header("X-Access-Token");
      // @e2b/code-interpreter sends X-Access-Token on /execute only; its /contexts calls carry
      // just E2B's traffic access token, which create answers as the same secret.
      if (token.empty()) token = ex.header("E2B-Traffic-Access-Token");
      Result<api::Principal> p = health ? Result<api::Principal>(api::Principal{})
                                        : envd_principal(token, sandbox_id, ctx);
      std::optional<api::TokenLoad::Ticket> ticket;
      if (p && !health) {
        const std::string& path = ex.target().path;
        api::Op op = *port != kEnvdPort                            ? api::Op::kExec
                     : path.starts_with("/process.Process/")       ? api::Op::kExec
                     : path.starts_with("/filesystem.Filesystem/") ? api::Op::kFiles
                     : path == "/files"                            ? api::Op::kFiles
                                                                   : api::Op::kRead;
        if (auto allowed = api::authorize(*p, op, name); !allowed) {
          p = fail(std::move(allowed.error()));
        } else if (ctx.token_load) {
          auto t = ctx.token_load->enter(p->token_id());
          if (!t)
            p = fail(std::move(t.error()));
          else
            ticket.emplace(std::move(*t));
        }
      }
      if (!p) {
        r = fail(std::move(p.error()));
      } else {
        if (!health) {
          principal = std::move(*p);
          if (!principal->all_profiles()) scoped.emplace(ctx.service, *principal);
          caller.emplace(daemon::Caller{principal->token_id()});
        }
        Call call{ex,         scoped ? static_cast<daemon::SandboxService&>(*scoped) : ctx.service,
                  *this,      nullptr,
                  sandbox_id, *port};
        if (principal && ctx.tokens)
          call.still_allowed = [tokens = ctx.tokens, id = principal->token_id()] {
            return tokens->check_still_valid(id, now_s());
          };
        if (*port == kEnvdPort)
          r = serve_envd(call);
        else if (*port == kCodeInterpreterPort)
          r = serve_interpreter(call);
        else
          r = serve_port(call);
      }
    } else {
      // The control plane.
      const ControlRoute* route = nullptr;
      std::vector<std::pair<std::string, std::string>> params;
      for (const auto& cr : control_routes()) {
        if (cr.method != ex.method()) continue;
        if (auto m = match(cr.pattern, ex.target().segments)) {
          route = &cr;
          params = std::move(*m);
          break;
        }
      }
      std::string_view key = ex.header("X-API-KEY");
      auto token = token_from_e2b_key(key);
      if (key.empty()) {
        r = fail(Code::kUnauthenticated,
                 "missing X-API-KEY: set E2B_API_KEY to a SPACE API token in E2B's form "
                 "(`space token create --name NAME ... --e2b` prints one)");
      } else if (!token) {
        r = fail(Code::kUnauthenticated,
                 "X-API-KEY is not a SPACE API token in E2B's form (e2b_ and 76 hex digits; "
                 "`space token create --name NAME ... --e2b` prints one)");
      } else if (auto p = api::authenticate(ctx.transport, "Bearer " + *token, ctx.tokens, now_s());
                 !p) {
        r = fail(std::move(p.error()));
      } else if (!route) {
        r = fail(Code::kNotFound, "no route for " + std::string(ex.method_string()) + " " +
                                      ex.target().path +
                                      " on SPACE's E2B door (docs/e2b.md "
                                      "lists what is served)");
      } else if (name = "e2b." + std::string(route->pattern);
                 !api::authorize(*p, route->op, name)) {
        r = api::authorize(*p, route->op, name);
      } else if (auto ticket = ctx.token_load
                                   ? ctx.token_load->enter(p->token_id())
                                   : Result<api::TokenLoad::Ticket>(api::TokenLoad::Ticket());
                 !ticket) {
        r = fail(std::move(ticket.error()));
      } else {
        principal = std::move(*p);
        if (!principal->all_profiles()) scoped.emplace(ctx.service, *principal);
        Call call{ex, scoped ? static_cast<daemon::SandboxService&>(*scoped) : ctx.service, *this,
                  &*principal};
        for (auto& [k, v] : params)
          if (k == "sandboxID") call.sandbox_id = v;
        caller.emplace(daemon::Caller{principal->token_id()});
        r = route->handler(call);
      }
    }
  } catch (const std::exception& e) {
    spdlog::error("e2b: {} {} raised {}", ex.method_string(), ex.target().path, e.what());
    r = fail(Code::kInternal, std::string("internal error: ") + e.what());
  }
  if (!r) {
    const Error& e = r.error();
    if (!ex.responded()) {
      (void)respond_error(ex, status_for(e), e.message());
    } else {
      ex.mark_broken();
    }
    if (status_for(e) >= 500)
      spdlog::warn("e2b: {} {} -> {}: {}", ex.method_string(), ex.target().path, status_for(e),
                   e.message());
  }
  ctx.metrics.request_done(name, ex.status());
}

}  // namespace space::e2b
