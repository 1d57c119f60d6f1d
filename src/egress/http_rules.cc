// The HTTP request rules of http_rules.h that parse what a sandbox sent: the head's size, the
// framing checks, comma-separated lists, the hop-by-hop strip, the WebSocket upgrade check and
// the plain proxy's absolute-form target. Shared by proxy.cc (HTTP/1.1) and h2_server.cc
// (HTTP/2), and fuzzed on their own (tests/fuzz/fuzz_http_request.cc).
#include "egress/http_rules.h"

#include <algorithm>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include "egress/ascii.h"

namespace space::egress {

namespace http = boost::beast::http;

size_t request_head_size(const http::request_header<>& h) {
  size_t n = h.method_string().size() + 1 + h.target().size() + 1 + 8 + 2 + 2;
  for (const auto& f : h) n += f.name_string().size() + 2 + f.value().size() + 2;
  return n;
}

// Refuses ambiguous framing (request smuggling): Content-Length together with
// Transfer-Encoding, more than one Content-Length, or any transfer coding but "chunked".
std::optional<std::string> framing_problem_of(const http::fields& f) {
  size_t cl = 0, te = 0;
  std::string te_value;
  for (auto& field : f) {
    if (field.name() == http::field::content_length) ++cl;
    if (field.name() == http::field::transfer_encoding) {
      ++te;
      te_value = std::string(field.value());
    }
  }
  if (cl > 1) return "more than one Content-Length";
  if (cl && te) return "both Content-Length and Transfer-Encoding";
  if (te > 1) return "more than one Transfer-Encoding";
  if (te && !iequals(te_value, "chunked")) return "Transfer-Encoding other than chunked";
  return std::nullopt;
}

std::vector<std::string_view> list_elements(std::string_view list) {
  std::vector<std::string_view> out;
  for (;;) {
    size_t comma = list.find(',');
    std::string_view t = list.substr(0, comma);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (!t.empty()) out.push_back(t);
    if (comma == std::string_view::npos) return out;
    list.remove_prefix(comma + 1);
  }
}

void strip_hop_by_hop_fields(http::fields& f) {
  std::vector<std::string> named;
  for (auto& field : f)
    if (field.name() == http::field::connection)
      for (std::string_view tok :
           list_elements(std::string_view(field.value().data(), field.value().size())))
        named.emplace_back(tok);
  for (auto& n : named) f.erase(n);
  for (auto name : {http::field::connection, http::field::keep_alive, http::field::proxy_connection,
                    http::field::proxy_authorization, http::field::proxy_authenticate,
                    http::field::te, http::field::trailer, http::field::upgrade})
    f.erase(name);
}

bool websocket_upgrade_requested(const http::request_header<>& req) {
  if (req.method() != http::verb::get) return false;
  auto has_token = [](std::string_view list, std::string_view token) {
    return std::ranges::any_of(list_elements(list),
                               [&](std::string_view t) { return iequals(t, token); });
  };
  bool upgrade = false, connection = false;
  for (auto& f : req) {
    std::string_view v(f.value().data(), f.value().size());
    if (f.name() == http::field::upgrade) upgrade |= has_token(v, "websocket");
    if (f.name() == http::field::connection) connection |= has_token(v, "upgrade");
  }
  return upgrade && connection;
}

Result<AbsoluteTarget> split_absolute_target(std::string_view t) {
  if (t.size() < 7 || !iequals(t.substr(0, 7), "http://")) {
    return fail(Code::kInvalidArgument, t.size() >= 8 && iequals(t.substr(0, 8), "https://")
                                            ? "https:// URLs go through CONNECT (set HTTPS_PROXY)"
                                            : "the proxy takes absolute http:// URLs only");
  }
  t.remove_prefix(7);
  // A fragment is the client's business (RFC 9110 §4.2.5): it is cut off, so that what the
  // policy checks is what the upstream routes on ("http://host#x" was the path "#x").
  t = t.substr(0, t.find('#'));
  size_t end = t.find_first_of("/?");
  AbsoluteTarget out;
  out.authority = std::string(t.substr(0, end));
  out.path = end == std::string_view::npos ? "/" : std::string(t.substr(end));
  if (out.path[0] == '?') out.path = "/" + out.path;
  return out;
}

}  // namespace space::egress
