// Egress policy (policy.h): profile rules, method and path rules, and the effective Policy of a
// sandbox (a profile narrowed by its --allow entries). Host names reach it already normalized
// (host.cc); here the danger is request-targets that could be re-interpreted past a path prefix
// by an upstream server (dot segments, "..;", encoded slashes and dots, backslashes): those are
// refused, never cleaned up. Reasons are user-facing (audit log, 403 bodies) and quote untrusted
// text escaped and truncated.
#include "egress/policy.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"
#include "egress/ascii.h"

namespace space::egress {
namespace {

char to_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }

}  // namespace

// ---- Rules, methods, paths ----

bool Rule::allows_port(uint16_t port) const {
  if (ports.empty()) return port == 80 || port == 443;
  return std::find(ports.begin(), ports.end(), port) != ports.end();
}

Result<std::string> parse_method(std::string_view text) {
  static constexpr std::string_view kTchar = "!#$%&'*+-.^_`|~";
  bool ok = !text.empty() && text.size() <= 32;
  for (char c : text) {
    if (!(is_digit(c) || is_alpha(c) || kTchar.find(c) != std::string_view::npos)) ok = false;
  }
  if (!ok) {
    return fail(Code::kInvalidArgument,
                fmt::format("invalid HTTP method \"{}\" (examples: GET, POST)", printable(text)));
  }
  std::string m(text);
  for (char& c : m) c = to_upper(c);
  return m;
}

namespace {

// Why `path` (no query) cannot be matched against a prefix, or "" when it can.
std::string path_problem(std::string_view path) {
  if (path.empty() || path.front() != '/') return "is not origin-form (must start with '/')";
  for (size_t i = 0; i < path.size(); ++i) {
    auto c = static_cast<unsigned char>(path[i]);
    if (c <= 0x20 || c >= 0x7f) return "contains a control, space or non-ASCII byte";
    if (c == '\\') return "contains a backslash";
    if (c == '#') return "contains a fragment";
    if (c != '%') continue;
    if (i + 2 >= path.size() || !is_hex(path[i + 1]) || !is_hex(path[i + 2])) {
      return "contains a malformed percent-encoding";
    }
    int v = hex_value(path[i + 1]) * 16 + hex_value(path[i + 2]);
    if (v == '.') return "contains an encoded dot (%2E)";
    if (v == '/') return "contains an encoded slash (%2F)";
    if (v == '\\') return "contains an encoded backslash (%5C)";
    if (v == '%') return "contains an encoded percent sign (%25)";
    if (v < 0x20 || v == 0x7f) return "contains an encoded control byte";
    i += 2;
  }
  // Dot segments: ".", "..", and any all-dot segment, also with path parameters ("..;x",
  // "..%3Bx"), which some servers (Tomcat) strip before resolving.
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view seg = path.substr(start, slash - start);
    // The parameters start at the first ';', encoded or not: a front end that decodes %3B
    // hands "..%3B" on as "..;".
    size_t semi = seg.find(';');
    for (size_t i = 0; i + 2 < seg.size() && i < semi; ++i) {
      if (seg[i] == '%' && seg[i + 1] == '3' && (seg[i + 2] == 'b' || seg[i + 2] == 'B')) semi = i;
    }
    seg = seg.substr(0, semi);
    if (!seg.empty() && seg.find_first_not_of('.') == std::string_view::npos) {
      return "contains a dot segment";
    }
    start = slash + 1;
  }
  return "";
}

}  // namespace

Result<std::string> parse_path_prefix(std::string_view text) {
  std::string why;
  if (text.find('?') != std::string_view::npos) {
    why = "contains a query";
  } else {
    why = path_problem(text);
  }
  if (!why.empty()) {
    return fail(Code::kInvalidArgument,
                fmt::format("invalid path prefix \"{}\": {}", printable(text), why));
  }
  return std::string(text);
}

Decision check_path(const std::vector<std::string>& prefixes, std::string_view target) {
  auto refuse = [&](std::string_view why) {
    return Decision{false, fmt::format("request-target {} {}", printable(target), why)};
  };
  if (target.empty()) return Decision{false, "empty request-target"};
  for (char ch : target) {
    auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f) return refuse("contains a control, space or non-ASCII byte");
  }
  if (target == "*") {
    if (prefixes.empty()) return Decision{true, ""};
    return Decision{false, "path * not allowed"};
  }
  if (target.front() != '/') return refuse("is not origin-form (must start with '/')");
  if (prefixes.empty()) return Decision{true, ""};
  std::string_view path = target.substr(0, target.find('?'));
  std::string why = path_problem(path);
  if (!why.empty()) return Decision{false, fmt::format("path {} {}", printable(path), why)};
  for (const std::string& p : prefixes) {
    if (path.starts_with(p)) return Decision{true, ""};
  }
  return Decision{false, fmt::format("path {} not allowed", printable(path))};
}

// ---- Profiles ----

namespace {

std::unexpected<Error> bad_profile(std::string_view where, std::string_view why) {
  return fail(Code::kInvalidArgument, fmt::format("{}: {}", where, why));
}

Result<std::vector<std::string>> string_list(const nlohmann::json& j, std::string_view where) {
  if (!j.is_array() || j.empty()) {
    return bad_profile(where, "must be a non-empty array of strings (omit it for any)");
  }
  std::vector<std::string> out;
  for (const auto& e : j) {
    if (!e.is_string()) return bad_profile(where, "must be an array of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<Rule> parse_rule_object(const nlohmann::json& j, const std::string& where) {
  Rule r;
  bool have_host = false;
  for (const auto& [key, v] : j.items()) {
    std::string at = where + "." + key;
    if (key == "host") {
      if (!v.is_string()) return bad_profile(at, "must be a string");
      r.host = TRY_CTX(parse_host_pattern(v.get<std::string>()), at);
      have_host = true;
    } else if (key == "ports") {
      if (!v.is_array() || v.empty()) {
        return bad_profile(at, "must be a non-empty array of ports (omit it for 80 and 443)");
      }
      for (const auto& p : v) {
        if (!p.is_number_integer() || p.get<int64_t>() < 1 || p.get<int64_t>() > 65535) {
          return bad_profile(
              at, fmt::format("invalid port {}: a port is 1..65535", printable(p.dump())));
        }
        r.ports.push_back(static_cast<uint16_t>(p.get<int64_t>()));
      }
    } else if (key == "methods") {
      for (const std::string& m : TRY(string_list(v, at))) {
        r.methods.push_back(TRY_CTX(parse_method(m), at));
      }
    } else if (key == "paths") {
      for (const std::string& p : TRY(string_list(v, at))) {
        r.path_prefixes.push_back(TRY_CTX(parse_path_prefix(p), at));
      }
    } else {
      return bad_profile(where, fmt::format("unknown key \"{}\" (expected host, ports, methods, "
                                            "paths)",
                                            printable(key)));
    }
  }
  if (!have_host) return bad_profile(where, "\"host\" is required");
  return r;
}

Result<Rule> parse_rule(const nlohmann::json& j, const std::string& where) {
  if (j.is_string()) {
    auto hp = TRY_CTX(parse_host_port_pattern(j.get<std::string>()), where);
    Rule r;
    r.host = std::move(hp.host);
    if (hp.port) r.ports = {*hp.port};
    return r;
  }
  if (j.is_object()) return parse_rule_object(j, where);
  return bad_profile(where, "must be \"HOST[:PORT]\" or an object with \"host\"");
}

}  // namespace

Result<EgressProfile> EgressProfile::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return bad_profile("egress", "must be an object");
  EgressProfile p;
  for (const auto& [key, v] : j.items()) {
    if (key == "allow") {
      if (!v.is_array()) return bad_profile("egress.allow", "must be an array");
      for (size_t i = 0; i < v.size(); ++i) {
        p.allow.push_back(TRY(parse_rule(v[i], fmt::format("egress.allow[{}]", i))));
      }
    } else if (key == "allow_networks") {
      if (!v.is_array()) return bad_profile("egress.allow_networks", "must be an array");
      for (size_t i = 0; i < v.size(); ++i) {
        std::string at = fmt::format("egress.allow_networks[{}]", i);
        if (!v[i].is_string()) return bad_profile(at, "must be a string");
        p.allow_networks.push_back(TRY_CTX(parse_cidr(v[i].get<std::string>()), at));
      }
    } else if (key == "max_connections") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1'000'000) {
        return bad_profile("egress.max_connections", "must be an integer from 1 to 1000000");
      }
      p.max_connections = static_cast<size_t>(v.get<int64_t>());
    } else if (key == "bandwidth") {
      if (v.is_string()) {
        p.bandwidth_bytes_per_s = TRY_CTX(parse_size(v.get<std::string>()), "egress.bandwidth");
      } else if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
        p.bandwidth_bytes_per_s = v.get<uint64_t>();
      } else {
        return bad_profile("egress.bandwidth", "must be a size such as \"10M\" (bytes/s)");
      }
    } else {
      return bad_profile("egress", fmt::format("unknown key \"{}\" (expected allow, "
                                               "allow_networks, max_connections, bandwidth)",
                                               printable(key)));
    }
  }
  return p;
}

// ---- Policy ----
// narrow_ holds the --allow entries as Rules whose `ports` is empty (any port the profile
// allows) or the one port given.

namespace {

bool narrow_allows(const Rule& n, const Host& host, uint16_t port) {
  return n.host.matches(host) &&
         (n.ports.empty() || std::find(n.ports.begin(), n.ports.end(), port) != n.ports.end());
}

// Hosts reach the policy from normalize_host; anything else (a caller building a Host by hand)
// is refused rather than compared.
bool normalized(const Host& host) {
  auto n = normalize_host(host.name);
  return n && *n == host;
}

}  // namespace

Result<Policy> Policy::make(std::string profile_name, const EgressProfile& profile,
                            const std::vector<std::string>& narrow) {
  Policy p;
  p.profile_ = std::move(profile_name);
  p.rules_ = profile.allow;
  p.networks_ = profile.allow_networks;
  p.max_connections_ = profile.max_connections;
  p.bandwidth_ = profile.bandwidth_bytes_per_s;
  for (const std::string& entry : narrow) {
    std::string where = "--allow " + printable(entry);
    auto hp = TRY_CTX(parse_host_port_pattern(entry), where);
    bool inside = std::any_of(p.rules_.begin(), p.rules_.end(), [&](const Rule& r) {
      return hp.host.within(r.host) && (!hp.port || r.allows_port(*hp.port));
    });
    if (!inside) {
      return fail(Code::kInvalidArgument,
                  fmt::format("{}: profile {} does not allow it", where, p.profile_));
    }
    Rule n;
    n.host = std::move(hp.host);
    if (hp.port) n.ports = {*hp.port};
    p.narrow_.push_back(std::move(n));
  }
  return p;
}

nlohmann::json Policy::to_json() const {
  auto rule_json = [](const Rule& r) {
    nlohmann::json j = {{"host", r.host.text()}};
    if (!r.ports.empty()) j["ports"] = r.ports;
    if (!r.methods.empty()) j["methods"] = r.methods;
    if (!r.path_prefixes.empty()) j["paths"] = r.path_prefixes;
    return j;
  };
  nlohmann::json allow = nlohmann::json::array(), networks = nlohmann::json::array(),
                 narrow = nlohmann::json::array();
  for (const Rule& r : rules_) allow.push_back(rule_json(r));
  for (const Cidr& c : networks_)
    networks.push_back(fmt::format("{}/{}", c.base.to_string(), c.prefix));
  for (const Rule& n : narrow_) {
    std::string host = n.host.text();
    bool v6 = host.find(':') != std::string::npos;
    if (n.ports.empty()) {
      narrow.push_back(v6 ? "[" + host + "]" : host);
    } else {
      narrow.push_back((v6 ? "[" + host + "]" : host) + ":" + std::to_string(n.ports.front()));
    }
  }
  return {{"profile", profile_},
          {"max_connections", max_connections_},
          {"egress",
           {{"allow", allow},
            {"allow_networks", networks},
            {"max_connections", std::max<size_t>(max_connections_, 1)},
            {"bandwidth", bandwidth_}}},
          {"narrow", narrow}};
}

Result<Policy> Policy::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("egress") || !j["profile"].is_string() ||
      !j["narrow"].is_array() || !j["max_connections"].is_number_unsigned())
    return fail(Code::kInvalidArgument, "policy: not the gateway's policy form");
  std::vector<std::string> narrow;
  for (const auto& n : j["narrow"]) {
    if (!n.is_string()) return fail(Code::kInvalidArgument, "policy: narrow must be strings");
    narrow.push_back(n.get<std::string>());
  }
  auto profile = TRY_CTX(EgressProfile::from_json(j["egress"]), "policy");
  auto p = TRY(make(j["profile"].get<std::string>(), profile, narrow));
  p.max_connections_ = j["max_connections"].get<size_t>();  // 0 for Policy(): refuses all
  return p;
}

Decision Policy::check_host(const Host& host, uint16_t port) const {
  if (!normalized(host)) {
    return Decision{false, fmt::format("host {} is not normalized", printable(host.name))};
  }
  bool host_known = false;
  bool allowed = false;
  for (const Rule& r : rules_) {
    if (!r.host.matches(host)) continue;
    host_known = true;
    if (r.allows_port(port)) allowed = true;
  }
  if (!host_known) {
    return Decision{false, fmt::format("host {} not in profile {}", host.name, profile_)};
  }
  if (!allowed) {
    return Decision{false, fmt::format("port {} not allowed for {}", port, host.name)};
  }
  if (narrow_.empty()) return Decision{true, ""};
  bool narrow_host = false;
  for (const Rule& n : narrow_) {
    if (narrow_allows(n, host, port)) return Decision{true, ""};
    if (n.host.matches(host)) narrow_host = true;
  }
  if (narrow_host) {
    return Decision{false, fmt::format("port {} not allowed for {} by this sandbox's --allow", port,
                                       host.name)};
  }
  return Decision{false, fmt::format("host {} not in this sandbox's --allow list (profile {})",
                                     host.name, profile_)};
}

Decision Policy::check_request(const Host& host, uint16_t port, std::string_view method,
                               std::string_view target) const {
  Decision d = check_host(host, port);
  if (!d.allowed) return d;
  if (!parse_method(method)) {
    return Decision{false, fmt::format("invalid method {}", printable(method))};
  }
  if (target == "*" && method != "OPTIONS") {
    return Decision{false, "request-target * is valid only with OPTIONS"};
  }
  bool method_ok = false;
  Decision path_refusal{false, ""};
  for (const Rule& r : rules_) {
    if (!r.host.matches(host) || !r.allows_port(port)) continue;
    if (!r.methods.empty() &&
        std::find(r.methods.begin(), r.methods.end(), method) == r.methods.end()) {
      continue;
    }
    method_ok = true;
    Decision pd = check_path(r.path_prefixes, target);
    if (pd.allowed) return pd;
    path_refusal = std::move(pd);
  }
  if (!method_ok) {
    return Decision{false, fmt::format("method {} not allowed for {}", method, host.name)};
  }
  path_refusal.reason += " for " + host.name;
  return path_refusal;
}

bool Policy::needs_inspection(const Host& host, uint16_t port) const {
  // Fail safe: a caller that asks about a host it should have refused gets "intercept", and
  // check_request then refuses every request.
  if (!check_host(host, port).allowed) return true;
  for (const Rule& r : rules_) {
    if (r.host.matches(host) && r.allows_port(port) && r.methods.empty() &&
        r.path_prefixes.empty()) {
      return false;
    }
  }
  return true;
}

Decision Policy::check_address(const IpAddress& addr) const {
  AddressClass c = classify(addr);
  std::string text = addr.to_string();
  if (rules_.empty()) {
    return Decision{false, fmt::format("profile {} allows no egress", profile_)};
  }
  // 0.0.0.0 and :: reach this host's own services when dialed; no allow_networks entry
  // ("0.0.0.0/0") can mean that.
  if (c == AddressClass::kUnspecified) {
    return Decision{false, fmt::format("address {} is unspecified", text)};
  }
  if (c == AddressClass::kPublic) return Decision{true, ""};
  for (const Cidr& n : networks_) {
    if (n.contains(addr)) return Decision{true, ""};
  }
  return Decision{false, fmt::format("address {} is {}", text, address_class_name(c))};
}

std::vector<uint16_t> Policy::ports() const {
  std::vector<uint16_t> out;
  for (const Rule& r : rules_) {
    std::vector<uint16_t> rp = r.ports.empty() ? std::vector<uint16_t>{80, 443} : r.ports;
    for (uint16_t port : rp) {
      bool ok = narrow_.empty() || std::any_of(narrow_.begin(), narrow_.end(), [&](const Rule& n) {
                  bool overlap = n.host.within(r.host) || r.host.within(n.host);
                  bool port_ok = n.ports.empty() || n.ports.front() == port;
                  return overlap && port_ok;
                });
      if (ok) out.push_back(port);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace space::egress
