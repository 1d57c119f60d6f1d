// The HTTP parsing rules the gateway applies to what a sandbox sends, whatever the protocol it
// speaks: the codecs (proxy.cc for HTTP/1.1, h2_server.cc for HTTP/2, whose stream header list
// is turned into the same Beast header first) and the request stage (request_stage.h) share
// them.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::egress {

// The request header section limit (both protocols).
inline constexpr size_t kRequestHeaderLimit = 16 * 1024;

// The request parsing pieces below live in http_rules.cc (no sockets, no gateway state), so
// that tests/fuzz/fuzz_http_request.cc reaches them without the rest of the gateway.

// The size of a parsed request head as it was sent, counted from what the parser kept (the
// request line and each field line with its CRLF). Beast bounds each parse window, and the
// byte count read_header returns missed some heads of many short lines depending on how they
// were split into reads (seen through a microVM's relay), so the limit is checked on this too.
size_t request_head_size(const boost::beast::http::request_header<>& h);
// The elements of a comma-separated field value (RFC 9110 §5.6.1), trimmed of spaces and tabs;
// empty elements are left out.
std::vector<std::string_view> list_elements(std::string_view list);
// A WebSocket opening handshake (RFC 6455 §4.1): GET with Upgrade: websocket and the
// "upgrade" token in Connection.
bool websocket_upgrade_requested(const boost::beast::http::request_header<>& req);
// The plain proxy's absolute-form target ("http://host[:port]/path?query", scheme in any case):
// the authority as sent (not yet parsed: parse_authority) and the origin-form path the upstream
// gets ("/" when there is none, "/?q" for "http://h?q"), without any fragment ("#..."). Anything
// but http:// is kInvalidArgument with the message the client gets.
struct AbsoluteTarget {
  std::string authority;
  std::string path;
};
Result<AbsoluteTarget> split_absolute_target(std::string_view target);

// Ambiguous framing (request smuggling): Content-Length with Transfer-Encoding, two
// Content-Lengths, a transfer coding other than chunked. The reason, or nothing.
std::optional<std::string> framing_problem_of(const boost::beast::http::fields& f);
// Removes hop-by-hop fields (RFC 9110 §7.6.1), including those named in Connection.
void strip_hop_by_hop_fields(boost::beast::http::fields& f);
// (Credentials go in with inject(), inject.h; the decision on a request and the response's
// checks and masking are request_stage.h's.)

}  // namespace space::egress
