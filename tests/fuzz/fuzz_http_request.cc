// libFuzzer target: the egress HTTP proxy's request parsing (src/egress/http_rules.cc, the head
// as proxy.cc reads it with Beast, and the credential substitution of inject.cc). The input is
// a request head as a sandbox sends it (request line, fields, CRLF CRLF), parsed with the same
// parser settings as the gateway; then every rule the gateway applies to a request runs on it.
// Properties checked besides "no crash":
//  - the head size the gateway counts never exceeds the bytes the parser consumed by more than
//    one per field (": " for ":") and a head over the header limit is never accepted;
//  - framing_problem_of agrees with a count of Content-Length and Transfer-Encoding fields;
//  - after strip_hop_by_hop_fields no fixed hop-by-hop field and no field a Connection element
//    named is left, and every other field is, in order with its value;
//  - a WebSocket upgrade is only ever a GET;
//  - an absolute-form target splits into an authority with no '/', '?' or '#' and a path that
//    starts with '/'; "http://" + authority + path gives the target back (but for the '/' put
//    before a bare query and the fragment, cut off); an authority parse_authority accepts has
//    a normalized host;
//  - the placeholder of an Authorization field is replaced (inside a Basic credential when it is
//    one) and never survives in what substitute_authorization returns, and inject() puts the
//    value into the query parameter whose whole value was the placeholder.
#include <algorithm>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/base64.h"
#include "egress/ascii.h"
#include "egress/credentials.h"
#include "egress/http_rules.h"
#include "egress/inject.h"
#include "egress/mask.h"
#include "egress/policy.h"

namespace eg = space::egress;
namespace http = boost::beast::http;

namespace {

constexpr std::string_view kPlaceholder = "SPACE_PLACEHOLDER_0123456789abcdef";
constexpr std::string_view kValue = "s3cr3t/v@lue=+&";

bool is_hop_by_hop(http::field f) {
  for (auto h : {http::field::connection, http::field::keep_alive, http::field::proxy_connection,
                 http::field::proxy_authorization, http::field::proxy_authenticate, http::field::te,
                 http::field::trailer, http::field::upgrade})
    if (f == h) return true;
  return false;
}

void check_strip(const http::request_header<>& req) {
  std::vector<std::string> named;
  for (auto& f : req)
    if (f.name() == http::field::connection)
      for (auto t : eg::list_elements(std::string_view(f.value().data(), f.value().size()))) {
        if (t.empty() || t.front() == ' ' || t.front() == '\t' || t.back() == ' ' ||
            t.back() == '\t' || t.find(',') != std::string_view::npos)
          std::abort();
        named.emplace_back(t);
      }
  auto is_named = [&](std::string_view name) {
    return std::ranges::any_of(named, [&](const std::string& n) { return eg::iequals(n, name); });
  };
  http::request_header<> copy = req;
  eg::strip_hop_by_hop_fields(copy);
  std::vector<std::pair<std::string, std::string>> kept, expected;
  for (auto& f : copy) {
    std::string_view name(f.name_string().data(), f.name_string().size());
    if (is_hop_by_hop(f.name()) || is_named(name)) std::abort();
    kept.emplace_back(name, std::string_view(f.value().data(), f.value().size()));
  }
  for (auto& f : req) {
    std::string_view name(f.name_string().data(), f.name_string().size());
    if (!is_hop_by_hop(f.name()) && !is_named(name))
      expected.emplace_back(name, std::string_view(f.value().data(), f.value().size()));
  }
  if (kept != expected) std::abort();
}

void check_framing(const http::request_header<>& req) {
  size_t cl = req.count(http::field::content_length);
  size_t te = req.count(http::field::transfer_encoding);
  bool fine = cl <= 1 && te <= 1 && !(cl && te);
  if (fine && te) {
    auto v = req[http::field::transfer_encoding];
    fine = eg::iequals(std::string_view(v.data(), v.size()), "chunked");
  }
  if (fine == eg::framing_problem_of(req).has_value()) std::abort();
}

void check_target(std::string_view target) {
  auto t = eg::split_absolute_target(target);
  if (!t) return;
  if (t->authority.find_first_of("/?#") != std::string::npos) std::abort();
  if (t->path.empty() || t->path[0] != '/') std::abort();
  // The authority is what follows the scheme; the path the rest, or "/" for none.
  std::string_view rest = target.substr(7);
  rest = rest.substr(0, rest.find('#'));  // the fragment is cut off
  if (!rest.starts_with(t->authority)) std::abort();
  std::string_view tail = rest.substr(t->authority.size());
  if (!(tail.empty() ? t->path == "/"
                     : t->path == tail || (tail[0] == '?' && t->path == "/" + std::string(tail))))
    std::abort();
  if (auto a = eg::parse_authority(t->authority, 80)) {
    if (a->port == 0) std::abort();
    auto again = eg::normalize_host(a->host.name);
    if (!again || !(*again == a->host)) std::abort();
  }
}

void check_credentials(const http::request_header<>& req) {
  for (auto& f : req) {
    if (f.name() != http::field::authorization) continue;
    std::string_view v(f.value().data(), f.value().size());
    auto r = eg::substitute_authorization(v, kPlaceholder, kValue);
    if (!r) continue;
    if (r->find(kPlaceholder) != std::string::npos) std::abort();
    if (v.size() > 6 && eg::iequals(v.substr(0, 5), "Basic") && (v[5] == ' ' || v[5] == '\t')) {
      size_t start = r->find_first_not_of(" \t", 5);
      size_t end = r->find_last_not_of(" \t") + 1;
      auto decoded = space::base64_decode(std::string_view(*r).substr(start, end - start));
      if (!decoded || decoded->find(kPlaceholder) != std::string::npos ||
          decoded->find(kValue) == std::string::npos)
        std::abort();
    } else if (r->find(kValue) == std::string::npos) {
      std::abort();
    }
  }
  eg::SecretDef def;
  def.placeholder_headers = {"Authorization", "X-Api-Key"};
  def.placeholder_query = {"key", "token"};
  http::request_header<> copy = req;
  eg::inject(copy, def, kPlaceholder, kValue);
  std::string_view target(copy.target().data(), copy.target().size());
  std::string_view before(req.target().data(), req.target().size());
  std::string token = "token=" + std::string(kPlaceholder);
  if (before.find('?') != std::string_view::npos) {
    std::string query(before.substr(before.find('?') + 1));
    bool whole = false;
    for (size_t i = 0; i <= query.size();) {
      size_t amp = std::min(query.find('&', i), query.size());
      if (std::string_view(query).substr(i, amp - i) == token) whole = true;
      i = amp + 1;
    }
    if (whole && target.find("token=" + eg::percent_encode(kValue)) == std::string_view::npos)
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::empty_body> p;
  p.header_limit(eg::kRequestHeaderLimit);
  p.eager(false);
  boost::system::error_code ec;
  size_t used = p.put(boost::asio::const_buffer(data, size), ec);
  if (ec || !p.is_header_done()) return 0;
  auto& req = p.get();
  size_t fields = static_cast<size_t>(std::distance(req.begin(), req.end()));
  if (used > eg::kRequestHeaderLimit) std::abort();
  if (eg::request_head_size(req) > used + fields) std::abort();
  check_framing(req);
  check_strip(req);
  if (eg::websocket_upgrade_requested(req) && req.method() != http::verb::get) std::abort();
  std::string_view target(req.target().data(), req.target().size());
  check_target(target);
  if (req.count(http::field::host) == 1) {
    auto host = req[http::field::host];
    if (auto a = eg::parse_authority(std::string_view(host.data(), host.size()), 80)) {
      auto again = eg::normalize_host(a->host.name);
      if (!again || !(*again == a->host)) std::abort();
    }
  }
  check_credentials(req);
  return 0;
}
