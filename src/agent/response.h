// JSON payloads the agent sends back: `response` bodies ({"ok":true,...} or
// {"ok":false,"error":{"code","message","errno"}}) with the error codes of
// docs/agent-protocol.md, and safe helpers to read fields of untrusted request JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace space::agent {

using json = nlohmann::json;

// The protocol's error code for e: from its errno when it has one ("not_found", "exists",
// "not_dir", ...), otherwise from its Code.
std::string_view protocol_error_code(const Error& e);
json error_object(const Error& e);  // {"code","message","errno"?}

// Serializes without throwing: invalid UTF-8 (file names are bytes) is replaced.
std::string dump_json(const json& j);

std::string ok_payload(json body = json::object());  // adds "ok": true
std::string error_payload(const Error& e);           // {"ok":false,"error":{...}}

// Parses an untrusted JSON object (bounded nesting depth; never throws).
Result<json> parse_object(std::string_view text);

// Typed field access on untrusted objects: absent -> fallback/nullopt, wrong type -> error.
Result<std::optional<std::string>> opt_string(const json& o, const char* key);
Result<std::string> req_string(const json& o, const char* key);
Result<bool> opt_bool(const json& o, const char* key, bool fallback);
Result<std::optional<int64_t>> opt_int(const json& o, const char* key, int64_t min, int64_t max);

}  // namespace space::agent
