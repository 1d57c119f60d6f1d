// The HTTP rules the gateway applies to every request and response it carries, whatever the
// protocol the sandbox speaks to it: proxy.cc applies them to HTTP/1.1 and exports them here
// so that h2_server.cc applies exactly the same ones to each HTTP/2 stream (the stream's
// header list is turned into the same Beast header first).
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <optional>
#include <string>

#include "egress/credentials.h"
#include "egress/mask.h"

namespace space::egress {

// The request header section limit (both protocols).
inline constexpr size_t kRequestHeaderLimit = 16 * 1024;

// Ambiguous framing (request smuggling): Content-Length with Transfer-Encoding, two
// Content-Lengths, a transfer coding other than chunked. The reason, or nothing.
std::optional<std::string> framing_problem_of(const boost::beast::http::fields& f);
// Removes hop-by-hop fields (RFC 9110 §7.6.1), including those named in Connection.
void strip_hop_by_hop_fields(boost::beast::http::fields& f);
// (Credentials go in with inject(), inject.h, on both protocols.)
// Why a response from a host a granted secret is bound to cannot be masked (206, a content
// coding), or nothing.
std::optional<std::string> unmaskable_response(const boost::beast::http::response_header<>& res);
// Masks secret values out of every header field's name and value (framing fields excepted).
void mask_response_fields(boost::beast::http::response_header<>& res, Redactor& redactor);
// A request target without its query, cut to the length the audit log keeps.
std::string audit_path(std::string_view target);

}  // namespace space::egress
