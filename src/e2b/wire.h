// The E2B door's parsers of untrusted bytes, apart from any connection so that a fuzz target
// (tests/fuzz/fuzz_e2b_wire.cc) drives them directly: Connect envelopes, the Host routing
// "<port>-<sandboxId>.<domain>", API keys in E2B's form, and multipart/form-data bodies (envd's
// POST /files).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace space::e2b {

// --- Connect envelopes: 1 flag byte (0x01 compressed, 0x02 end of stream), a 4-byte
// big-endian length, the message.
inline constexpr size_t kMaxConnectMessage = 16u << 20;
// One envelope at the start of `data`: nullopt while incomplete; an error for a compressed or
// oversized one. On success `*used` is the envelope's length in bytes.
Result<std::optional<std::string>> parse_envelope(std::string_view data, size_t* used,
                                                  uint8_t* flags = nullptr);
std::string envelope(uint8_t flags, std::string_view payload);

// --- Routing by Host: "49983-sb_0123abcd.example.test" under domain "example.test" ->
// {49983, "sb_0123abcd"} (a ":port" suffix ignored); nullopt for anything else.
std::optional<std::pair<uint16_t, std::string>> route_host(std::string_view host,
                                                           std::string_view domain);
// A decimal port 1-65535, nullopt otherwise.
std::optional<uint16_t> parse_port(std::string_view s);

// --- API keys: "e2b_<76 hex>" <-> SPACE's "spt_<12 hex>_<64 hex>".
std::optional<std::string> token_from_e2b_key(std::string_view key);
std::string e2b_key_from_token(std::string_view token);  // "" if `token` is not of that shape

// --- multipart/form-data (RFC 7578): the parts of `body` between "--boundary" lines. Each
// part's filename (Content-Disposition's, with undici's %22/%0D/%0A undone) and its bytes (a
// view into `body`). A body without a part, a part without the blank line ending its headers or
// one never closed is an invalid_argument error.
struct MultipartPart {
  std::string filename;
  std::string_view data;
};
Result<std::vector<MultipartPart>> parse_multipart(std::string_view body,
                                                   std::string_view boundary);
// A Content-Type's media type: what precedes its parameters, trailing spaces dropped, case kept.
std::string_view media_type(std::string_view content_type);
// A parameter of a header value (`boundary` of a Content-Type, `filename` of a
// Content-Disposition), unquoted; nullopt if absent.
std::optional<std::string> header_param(std::string_view value, std::string_view name);

}  // namespace space::e2b
