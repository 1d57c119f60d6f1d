// Credential injection into intercepted requests (inject.h): the secret's configured header, the
// placeholder in listed header fields (a Basic credential decoded first) and query parameters.
#include "egress/inject.h"

#include <algorithm>
#include <array>
#include <vector>

#include "common/base64.h"
#include "egress/ascii.h"
#include "egress/mask.h"

namespace space::egress {
namespace {

namespace http = boost::beast::http;

// The placeholder replaced in a query's parameters listed in `names` whose whole value it is.
std::optional<std::string> substitute_query(std::string_view target,
                                            const std::vector<std::string>& names,
                                            std::string_view placeholder, std::string_view value) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string out(target.substr(0, q + 1));
  bool changed = false;
  std::string_view query = target.substr(q + 1);
  for (size_t i = 0; i <= query.size();) {
    size_t amp = query.find('&', i);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view param = query.substr(i, amp - i);
    size_t eq = param.find('=');
    std::string_view key = param.substr(0, eq);
    bool listed = std::find(names.begin(), names.end(), key) != names.end();
    if (eq != std::string_view::npos && listed && param.substr(eq + 1) == placeholder) {
      out.append(key);
      out += '=';
      out += percent_encode(value);
      changed = true;
    } else {
      out.append(param);
    }
    if (amp < query.size()) out += '&';
    i = amp + 1;
  }
  if (!changed) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::string> substitute_authorization(std::string_view field,
                                                    std::string_view placeholder,
                                                    std::string_view value) {
  constexpr std::string_view kBasic = "Basic";
  if (field.size() > kBasic.size() && iequals(field.substr(0, kBasic.size()), kBasic) &&
      (field[kBasic.size()] == ' ' || field[kBasic.size()] == '\t')) {
    size_t start = field.find_first_not_of(" \t", kBasic.size());
    if (start == std::string_view::npos) return std::nullopt;
    size_t end = field.find_last_not_of(" \t") + 1;
    auto decoded = base64_decode(field.substr(start, end - start));
    if (!decoded || replace_all(*decoded, placeholder, value) == 0) return std::nullopt;
    return std::string(field.substr(0, start)) + base64_encode(*decoded) +
           std::string(field.substr(end));
  }
  std::string out(field);
  if (replace_all(out, placeholder, value) == 0) return std::nullopt;
  return out;
}

void inject(http::request_header<>& req, const SecretDef& def, std::string_view placeholder,
            std::string_view value) {
  if (!def.header.empty()) {
    std::string v = def.format;
    replace_all(v, "{}", value);
    req.set(def.header, v);
  }
  for (const auto& name : def.placeholder_headers) {
    const bool authorization = iequals(name, "Authorization");
    std::vector<std::string> values;
    bool changed = false;
    auto [from, to] = req.equal_range(name);
    for (auto it = from; it != to; ++it) {
      std::string_view v(it->value().data(), it->value().size());
      std::optional<std::string> replaced;
      if (authorization) {
        replaced = substitute_authorization(v, placeholder, value);
      } else {
        std::string s(v);
        if (replace_all(s, placeholder, value) > 0) replaced = std::move(s);
      }
      changed |= replaced.has_value();
      values.push_back(replaced ? std::move(*replaced) : std::string(v));
    }
    if (!changed) continue;
    req.erase(name);
    for (auto& v : values) req.insert(name, v);
  }
  if (def.placeholder_query.empty()) return;
  std::string_view target(req.target().data(), req.target().size());
  if (auto t = substitute_query(target, def.placeholder_query, placeholder, value)) req.target(*t);
}

}  // namespace space::egress
