#include "e2b/connect.h"

#include <cstdint>

namespace space::e2b::connect {

namespace http = boost::beast::http;

std::string_view code_of(Code c) {
  switch (c) {
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kAlreadyExists:
      return "already_exists";
    case Code::kConflict:
      return "failed_precondition";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kUnauthenticated:
      return "unauthenticated";
    case Code::kPayloadTooLarge:
    case Code::kResourceExhausted:
      return "resource_exhausted";
    case Code::kTimeout:
      return "deadline_exceeded";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kUnimplemented:
      return "unimplemented";
    case Code::kProtocol:
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

int status_of(std::string_view code) {
  if (code == "canceled") return 499;
  if (code == "invalid_argument" || code == "failed_precondition" || code == "out_of_range")
    return 400;
  if (code == "deadline_exceeded") return 504;
  if (code == "not_found") return 404;
  if (code == "already_exists" || code == "aborted") return 409;
  if (code == "permission_denied") return 403;
  if (code == "resource_exhausted") return 429;
  if (code == "unimplemented") return 501;
  if (code == "unavailable") return 503;
  if (code == "unauthenticated") return 401;
  return 500;
}

namespace {

Result<nlohmann::json> parse_object(std::string_view text) {
  if (text.empty()) return nlohmann::json::object();
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(Code::kInvalidArgument, "the Connect request message is not a JSON object");
  return j;
}

nlohmann::json error_json(const Error& e) {
  return {{"code", std::string(code_of(e.code()))}, {"message", e.message()}};
}

}  // namespace

Result<Request> read_request(api::Exchange& ex) {
  if (ex.method() != http::verb::post)
    return fail(Code::kInvalidArgument, "Connect RPCs are POST requests");
  if (!ex.header("Connect-Content-Encoding").empty() &&
      ex.header("Connect-Content-Encoding") != "identity")
    return fail(Code::kUnimplemented, "Connect-Content-Encoding " +
                                          std::string(ex.header("Connect-Content-Encoding")) +
                                          " is not accepted: send messages uncompressed");
  std::string_view type = media_type(ex.header(http::field::content_type));
  Request req;
  if (type == "application/json") {
    req.kind = Kind::kUnary;
    std::string body = TRY(ex.read_body(kMaxMessage));
    req.message = TRY(parse_object(body));
    return req;
  }
  if (type == "application/connect+json") {
    req.kind = Kind::kServerStream;
    std::string body = TRY(ex.read_body(kMaxMessage + 5));
    size_t used = 0;
    uint8_t flags = 0;
    auto msg = TRY(parse_envelope(body, &used, &flags));
    if (!msg || used != body.size() || (flags & 0x02))
      return fail(Code::kInvalidArgument,
                  "a streaming Connect request's body must be exactly one message envelope");
    req.message = TRY(parse_object(*msg));
    return req;
  }
  return fail(Code::kInvalidArgument,
              "Content-Type \"" + std::string(type) +
                  "\": Connect RPCs here take application/json (unary) or "
                  "application/connect+json (server streams); binary protobuf is not served");
}

Kind kind_of(const api::Exchange& ex) {
  return media_type(ex.header(http::field::content_type)) == "application/connect+json"
             ? Kind::kServerStream
             : Kind::kUnary;
}

Result<void> respond(api::Exchange& ex, const nlohmann::json& message) {
  return ex.respond(http::status::ok, "application/json", api::json_text(message));
}

Result<void> respond_error(api::Exchange& ex, Kind kind, const Error& e) {
  if (kind == Kind::kServerStream) {
    Stream s(ex);
    TRY_VOID(s.begin());
    return s.end(&e);
  }
  std::string code(code_of(e.code()));
  return ex.respond(http::int_to_status(unsigned(status_of(code))), "application/json",
                    api::json_text(error_json(e)));
}

Result<void> Stream::begin() {
  begun_ = true;
  return ex_.begin_chunked(http::status::ok, "application/connect+json");
}

Result<void> Stream::send(const nlohmann::json& message) {
  return ex_.write_chunk(envelope(0, api::json_text(message)));
}

Result<void> Stream::end(const Error* error) {
  nlohmann::json end = nlohmann::json::object();
  if (error) end["error"] = error_json(*error);
  TRY_VOID(ex_.write_chunk(envelope(0x02, api::json_text(end))));
  return ex_.end_chunked();
}

std::optional<int> keepalive_interval(const api::Exchange& ex) {
  std::string_view v = ex.header("Keepalive-Ping-Interval");
  if (v.empty() || v.size() > 6) return std::nullopt;
  int n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < 1) n = 1;
  if (n > 3600) n = 3600;
  return n;
}

}  // namespace space::e2b::connect
