// The request and response stages every codec calls (request_stage.h): target, policy, grants,
// injection, encoding rules, response checks and masking, and their audit events.
#include "egress/request_stage.h"

#include <boost/beast/http/field.hpp>

#include "egress/ascii.h"
#include "egress/http_rules.h"
#include "egress/inject.h"

namespace space::egress {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;

constexpr size_t kAuditPathMax = 256;

// Why a response from a host a granted secret is bound to cannot be masked reliably, if it
// cannot: a body in a content coding (the gateway asked for identity) or a part of a larger
// representation (a range of a stored value holds a piece no mask recognizes). The upstream's
// own values are not quoted: they could carry the secret.
std::optional<std::string> unmaskable(const http::response_header<>& res) {
  if (res.result_int() == 206) return "a partial (206) response";
  for (auto& f : res) {
    if (f.name() != http::field::content_encoding) continue;
    std::string_view v(f.value().data(), f.value().size());
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    if (!v.empty() && !iequals(v, "identity")) return "a body in a content coding";
  }
  return std::nullopt;
}

// Why a 101 answering a WebSocket handshake cannot be carried, if it cannot.
std::optional<std::string> not_plain_websocket(const http::response_header<>& res) {
  auto upgrade = res[http::field::upgrade];
  if (!iequals(std::string_view(upgrade.data(), upgrade.size()), "websocket"))
    return "the upstream switched to a protocol other than WebSocket";
  if (res.count(http::field::sec_websocket_extensions))
    return "the upstream chose a WebSocket extension the gateway did not offer";
  return std::nullopt;
}

// Masks secret values out of every header field's name and value (a name with '*' in it is
// still a valid field name). Fields keep their order.
void mask_fields(http::response_header<>& res, Redactor& redactor) {
  if (!redactor.active()) return;
  std::vector<std::pair<std::string, std::string>> fields;
  bool changed = false;
  for (auto& f : res) {
    std::string_view name(f.name_string().data(), f.name_string().size());
    std::string_view value(f.value().data(), f.value().size());
    // The framing fields stay as they are (a number, "chunked"): masking them would break the
    // message, and they carry no more than the body's length does.
    bool framing =
        f.name() == http::field::content_length || f.name() == http::field::transfer_encoding;
    std::string n = redactor.mask(name), v = framing ? std::string(value) : redactor.mask(value);
    changed |= n != name || v != value;
    fields.emplace_back(std::move(n), std::move(v));
  }
  if (!changed) return;
  res.clear();
  for (auto& [n, v] : fields) res.insert(n, v);
}

}  // namespace

std::string_view standard_reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 421:
      return "Misdirected Request";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 502:
      return "Bad Gateway";
    default:
      return "Error";
  }
}

std::string audit_path(std::string_view target) {
  std::string p(target.substr(0, target.find('?')));
  if (p.size() > kAuditPathMax) p = p.substr(0, kAuditPathMax) + "...";
  return p;
}

RequestStage::RequestStage(Shared& g, Gateway::State& st, Arrival arrival)
    : g_(g),
      st_(st),
      arrival_(arrival),
      via_(!arrival.via.empty()                            ? arrival.via
           : arrival.mode == RequestMode::kProxy           ? "proxy"
           : arrival.mode == RequestMode::kTransparentHttp ? "transparent-http"
                                                           : "intercept") {}

LocalReply RequestStage::reply(int status, std::string message) const {
  return {status, std::string(standard_reason(status)), std::move(message)};
}

void RequestStage::deny(const std::string& host, uint16_t port, const std::string& reason,
                        std::string_view method, std::string_view path) {
  ++g_.denied;
  json ev = {{"via", via_}, {"host", host}, {"port", port}, {"reason", reason}};
  if (arrival_.http2) ev["http2"] = true;
  if (!method.empty()) ev["method"] = method;
  if (!path.empty()) ev["path"] = audit_path(path);
  g_.audit(st_, "egress.denied", std::move(ev));
}

LocalReply RequestStage::refuse(int status, const std::string& message, std::string_view method,
                                std::string_view path) {
  deny(arrival_.fixed_host ? arrival_.fixed_host->name : "?", arrival_.default_port, message,
       method, path);
  return reply(status, message);
}

LocalReply RequestStage::refuse(const Forward& f, int status, const std::string& message) {
  deny(f.host.name, f.port, message, f.method, f.path);
  return reply(status, message);
}

bool RequestStage::bound_secret(const Host& host) const {
  for (auto& gr : st_.sb.grants)
    if (const SecretDef* def = g_.secrets->find(gr.name); def && def->bound_to(host)) return true;
  return false;
}

std::optional<LocalReply> RequestStage::admit(const Host& host, uint16_t port) {
  Decision d = st_.sb.policy.check_host(host, port);
  if (d.allowed) return std::nullopt;
  deny(host.name, port, d.reason);
  return reply(403, d.reason);
}

bool RequestStage::must_intercept(const Host& host, uint16_t port) const {
  return st_.sb.policy.needs_inspection(host, port) || bound_secret(host);
}

Verdict RequestStage::decide(http::request_header<>& req) {
  const Policy& policy = st_.sb.policy;
  const bool h2 = arrival_.http2;
  const std::string fixed = arrival_.fixed_host ? arrival_.fixed_host->name : "?";
  Forward f;
  f.method = std::string(req.method_string());
  f.path = std::string(req.target());
  f.port = arrival_.default_port;
  // One Host field at most (RFC 9112 §3.2): with two, the gateway and the upstream could each
  // route by a different one.
  if (req.count(http::field::host) > 1) {
    deny(fixed, arrival_.default_port, "more than one Host header", f.method);
    return reply(400, "more than one Host header");
  }
  // Which host this request goes to.
  if (arrival_.mode == RequestMode::kProxy) {
    if (req.method() == http::verb::connect)
      return reply(400, "CONNECT must be the first request on a connection");
    auto split = split_absolute_target(f.path);
    if (!split) {
      const std::string& msg = split.error().message();
      deny("?", 0, msg, f.method);
      return reply(400, msg);
    }
    std::string_view auth = split->authority;
    auto a = parse_authority(auth, 80);
    if (!a) {
      deny(std::string(auth.substr(0, 256)), 0, a.error().message(), f.method);
      return reply(400, "bad URL host: " + a.error().message());
    }
    f.path = std::move(split->path);
    f.host = a->host;
    f.port = a->port;
    req.set(http::field::host, std::string(auth));
    req.target(f.path);
  } else {
    std::string host_header(req[http::field::host]);
    auto a = parse_authority(host_header, arrival_.default_port);
    if (!a) {
      std::string msg = (h2 ? "bad :authority: " : "bad Host header: ") + a.error().message();
      deny(fixed, arrival_.default_port, msg, f.method, f.path);
      return reply(400, msg);
    }
    if (arrival_.mode == RequestMode::kIntercepted &&
        (!(a->host == *arrival_.fixed_host) || a->port != arrival_.default_port)) {
      std::string msg = (h2 ? ":authority \"" : "Host \"") + host_header.substr(0, 256) +
                        "\" does not match the TLS connection's host " + fixed;
      deny(fixed, arrival_.default_port, msg, f.method, f.path);
      return reply(421, msg);
    }
    if (arrival_.mode == RequestMode::kTransparentHttp && a->port != 80)
      return reply(400, "the transparent listener serves port 80 only");
    f.host = a->host;
    f.port = a->port;
  }
  Decision d = policy.check_host(f.host, f.port);
  if (d.allowed) d = policy.check_request(f.host, f.port, f.method, f.path);
  if (!d.allowed) return refuse(f, 403, d.reason);

  const bool intercepted = arrival_.mode == RequestMode::kIntercepted;
  // A WebSocket handshake to an intercepted host is carried (the upgrade is authorized and
  // credentials are injected like any request): Upgrade and Connection survive the hop-by-hop
  // strip, and no extension is offered (permessage-deflate would hide the frames' payloads
  // from masking). HTTP/2 has no such handshake (an extended CONNECT is refused by its codec).
  f.websocket = intercepted && !h2 && websocket_upgrade_requested(req);
  strip_hop_by_hop_fields(req);
  if (f.websocket) {
    req.set(http::field::upgrade, "websocket");
    req.set(http::field::connection, "Upgrade");
    req.erase(http::field::sec_websocket_extensions);
  }
  // Credentials: only inside TLS the gateway terminated, only for requests the secret is bound
  // to, only where its definition says. Elsewhere a placeholder travels as the meaningless
  // string it is.
  if (intercepted) {
    if (auto refused = inject_credentials(req, f)) return std::move(*refused);
  }
  // Requests to a host a granted secret is bound to may have planted a value there: their
  // responses must come back in a form masking can read (docs/egress.md, "What comes back").
  f.bound = intercepted && bound_secret(f.host);
  if (f.bound) {
    req.set(http::field::accept_encoding, "identity");
    // A range of a stored value is a piece of it that no mask would recognize.
    req.erase(http::field::range);
    req.erase(http::field::if_range);
  }
  return f;
}

std::optional<LocalReply> RequestStage::inject_credentials(http::request_header<>& req,
                                                           Forward& f) {
  for (auto& gr : st_.sb.grants) {
    const SecretDef* def = g_.secrets->find(gr.name);
    if (!def || !def->applies(f.host, f.method, f.path)) continue;
    auto value = g_.secrets->value(
        gr.name, [this] { return st_.mint_allowed(); }, st_.sb.id);
    if (!value) {
      // The reason may quote a mint command's stderr: it is for the operator only.
      g_.audit(st_, "credential.error",
               {{"secret", gr.name}, {"host", f.host.name}, {"error", value.error().message()}});
      if (value.error().code() == Code::kResourceExhausted)
        return reply(429, "credential " + gr.name +
                              ": new tokens were asked for too often from this sandbox; retry "
                              "in a few seconds");
      return reply(502, "credential " + gr.name +
                            " is unavailable; the reason is in this sandbox's audit log "
                            "(credential.error) for the operator");
    }
    inject(req, *def, gr.placeholder, *value);
    f.secrets.push_back(gr.name);
    ++g_.credential_uses;
    g_.audit(st_, "credential.use",
             {{"secret", gr.name},
              {"host", f.host.name},
              {"method", f.method},
              {"path", audit_path(f.path)}});
  }
  return std::nullopt;
}

std::optional<LocalReply> RequestStage::respond_head(const Forward& f, http::response_header<>& res,
                                                     Redactor& redactor) {
  if (f.websocket && res.result_int() == 101) {
    if (auto problem = not_plain_websocket(res)) {
      deny(f.host.name, f.port, "response refused: " + *problem, f.method, f.path);
      return reply(502, *problem);
    }
  } else if (f.bound) {
    if (auto problem = unmaskable(res)) {
      deny(f.host.name, f.port, "response refused: " + *problem, f.method, f.path);
      return reply(502, "the response from " + f.host.name + " was refused: " + *problem +
                            "; responses from a host a secret is bound to must be whole and "
                            "unencoded, so that the secret can be masked out of them");
    }
  }
  strip_hop_by_hop_fields(res);
  // The reason phrase is the upstream's free text: the standard one replaces it.
  res.reason({});
  mask_fields(res, redactor);
  return std::nullopt;
}

void RequestStage::audit_request(const Forward& f, int status, uint64_t bytes_up,
                                 uint64_t bytes_down, size_t redactions, json extra) {
  g_.bytes_up += bytes_up;
  g_.bytes_down += bytes_down;
  json ev = {{"via", via_},          {"host", f.host.name},        {"port", f.port},
             {"method", f.method},   {"path", audit_path(f.path)}, {"status", status},
             {"bytes_up", bytes_up}, {"bytes_down", bytes_down}};
  if (arrival_.http2) ev["http2"] = true;
  if (f.websocket) ev["websocket"] = true;
  if (!f.secrets.empty()) ev["secrets"] = f.secrets;
  if (redactions) ev["redactions"] = redactions;
  for (auto& [k, v] : extra.items()) ev[k] = v;
  g_.audit(st_, "egress.request", std::move(ev));
}

void RequestStage::audit_tunnel(const Host& host, uint16_t port, const std::string& address,
                                uint64_t bytes_up, uint64_t bytes_down,
                                std::chrono::milliseconds duration) {
  g_.audit(st_, "egress.tunnel",
           {{"via", via_},
            {"host", host.name},
            {"port", port},
            {"address", address},
            {"bytes_up", bytes_up},
            {"bytes_down", bytes_down},
            {"duration_ms", duration.count()}});
}

void RequestStage::audit_error(const Host& host, uint16_t port, const std::string& error) {
  g_.audit(st_, "egress.error", {{"host", host.name}, {"port", port}, {"error", error}});
}

}  // namespace space::egress
