// Connect RPC (connectrpc.com/docs/protocol) over HTTP/1.1 with the JSON codec, as E2B's envd
// speaks it and its SDKs call it (connect-web, useBinaryFormat false):
//   - unary: POST /<package>.<Service>/<Method>, Content-Type application/json, the request
//     message as the body; the answer is 200 application/json with the response message, or an
//     error status with {"code": "not_found", "message": "..."};
//   - server streaming: Content-Type application/connect+json, the request as one envelope
//     (1 flag byte, 4-byte big-endian length, the JSON message); the answer is 200
//     application/connect+json, one envelope per message, and an end-of-stream envelope (flag
//     0x02) carrying {} or {"error": {"code", "message"}}.
// Compressed envelopes (flag 0x01, Connect-Content-Encoding) are refused: the SDKs send none.
// Messages follow proto3's JSON mapping (int64 as strings, bytes as base64, enums by name);
// each service's file does its own fields.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "api/exchange.h"
#include "common/error.h"
#include "e2b/wire.h"

namespace space::e2b::connect {

inline constexpr size_t kMaxMessage = kMaxConnectMessage;  // one request message

enum class Kind { kUnary, kServerStream };

// The Connect error code of a SPACE error ("not_found", "invalid_argument", ...).
std::string_view code_of(Code c);
// The HTTP status of a unary Connect error with that code.
int status_of(std::string_view connect_code);

using e2b::envelope;  // wire.h
using e2b::parse_envelope;

// The request of the RPC `ex` carries: its kind (by Content-Type) and its message, parsed. A
// wrong Content-Type, a malformed envelope or JSON that is not an object is an invalid_argument
// error that says what was expected.
struct Request {
  Kind kind = Kind::kUnary;
  nlohmann::json message;
};
Result<Request> read_request(api::Exchange& ex);
// The kind of RPC the request's Content-Type says it is (application/connect+json: a server
// stream; anything else is answered as unary).
Kind kind_of(const api::Exchange& ex);

// Answers a unary RPC.
Result<void> respond(api::Exchange& ex, const nlohmann::json& message);
// Answers an RPC with an error, as its kind wants it (a unary status and body, or a stream of
// just the end-of-stream envelope).
Result<void> respond_error(api::Exchange& ex, Kind kind, const Error& e);

// A server stream's answer: begin() sends the headers, send() one message, end() the
// end-of-stream envelope (with the error, if any). Not thread-safe: one writer.
class Stream {
 public:
  explicit Stream(api::Exchange& ex) : ex_(ex) {}
  Result<void> begin();
  Result<void> send(const nlohmann::json& message);
  Result<void> end(const Error* error = nullptr);
  bool begun() const { return begun_; }

 private:
  api::Exchange& ex_;
  bool begun_ = false;
};

// The keepalive interval a streaming call asked for (Keepalive-Ping-Interval, seconds), if
// any; bounded to [1, 3600].
std::optional<int> keepalive_interval(const api::Exchange& ex);

}  // namespace space::e2b::connect
