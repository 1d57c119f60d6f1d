// Request parsing and validation for the REST API: request targets (path segments and query
// parameters, percent-decoded), JSON bodies (size, nesting depth, syntax), and the typed
// requests of src/daemon/service.h built from them. Everything here is pure (no I/O), so each
// rule is unit-tested directly; every rejection is a kInvalidArgument (400) or
// kPayloadTooLarge (413) whose message says what a valid request looks like.
//
// Text is UTF-8. Every field the API reads — path segments, query parameter names and values,
// JSON bodies, the headers it uses — must be well-formed UTF-8 (RFC 3629: no overlong forms,
// no UTF-16 surrogates, nothing past U+10FFFF), checked here before anything acts on it: the
// daemon keeps such text in JSON (agent frames, the audit log), whose serializer throws on
// anything else. A field that is not is a 400 naming the field.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/utf8.h"  // invalid_utf8_at, utf8_lossy
#include "daemon/service.h"

namespace space::api {

inline constexpr size_t kMaxJsonBody = 1 << 20;  // 1 MiB
inline constexpr size_t kMaxJsonDepth = 64;
inline constexpr size_t kMaxSandboxPath = 4096;  // PATH_MAX

// "/v1/sandboxes/sb_1/files?path=%2Fetc&stat=true" -> segments {"v1","sandboxes","sb_1","files"},
// query {"path": "/etc", "stat": "true"}. Segments and query values are percent-decoded
// ('+' is a space in the query); a segment may not decode to something containing '/' or NUL,
// and every segment, query name and value must decode to UTF-8.
struct Target {
  std::string path;  // as sent, without the query
  std::vector<std::string> segments;
  std::map<std::string, std::string> query;  // a repeated key keeps its last value
};
Result<Target> parse_target(std::string_view target);

// Finds where the first top-level JSON value of a stream ends, fed incrementally. Used by exec,
// whose body is a JSON object, "\n", then raw stdin bytes. Tracks nesting depth (refusing more
// than kMaxJsonDepth) and strings with escapes; it does not validate the JSON (the parser does).
class JsonValueScanner {
 public:
  enum class State { kIncomplete, kComplete, kTooDeep, kNotAnObject };
  // Scans bytes [scanned(), buffer.size()) of `buffer`, which must extend what was fed before.
  State feed(std::string_view buffer);
  // Valid after kComplete: the offset just past the value's closing '}'.
  size_t end() const { return end_; }

 private:
  size_t pos_ = 0;
  size_t depth_ = 0;
  size_t end_ = 0;
  bool started_ = false;
  bool in_string_ = false;
  bool escape_ = false;
  State state_ = State::kIncomplete;
};

// Parses a whole JSON body: too deep or malformed -> kInvalidArgument with the parser's
// position; text that is not UTF-8 (or a \u escape of an unpaired surrogate) -> one naming the
// field ("field env.A of the JSON body ..."). Does not check the size (the reader enforces
// kMaxJsonBody).
Result<nlohmann::json> parse_json(std::string_view body);

// kInvalidArgument naming `what` ("query parameter path", "header Content-Type") unless `s`
// is well-formed UTF-8.
Result<void> check_utf8(std::string_view s, std::string_view what);
// Which field of a JSON text byte `offset` lies in, for messages: "field env.A of the JSON
// body", "field cmd[1] of ...", "a key in field env of ...". Reads only text[0, offset).
std::string json_field_at(std::string_view text, size_t offset);

// Body of POST /v1/sandboxes (all keys optional; unknown keys are refused, to catch typos).
Result<daemon::CreateRequest> parse_create_request(const nlohmann::json& body);
// A duration in a JSON body: seconds (a positive number) or a string such as "30m".
Result<double> parse_duration_value(const nlohmann::json& v, std::string_view key);
// JSON part of POST /v1/sandboxes/{id}/exec.
Result<daemon::ExecRequest> parse_exec_request(const nlohmann::json& body);

// Snapshots (docs/snapshots.md). Body of POST /v1/sandboxes/{id}/snapshots: {"name"?: str}.
Result<daemon::SnapshotRequest> parse_snapshot_request(const nlohmann::json& body);
// Body of POST /v1/sandboxes/{id}/rollback: {"snapshot": SNAP}; returns SNAP.
Result<std::string> parse_rollback_request(const nlohmann::json& body);
// Body of POST /v1/snapshots/{snap}/restore: {"profile"?: str}.
Result<std::optional<std::string>> parse_restore_request(const nlohmann::json& body);
// A snapshot name: 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit, and not
// starting with "snap_" (that prefix is for ids).
Result<void> check_snapshot_name(std::string_view name);
// A SNAP argument (path segment, query value, body field): a snapshot id ("snap_<hex>") or a
// name. `what` names it in messages.
Result<void> check_snapshot_ref(std::string_view ref, std::string_view what = "snapshot");

// Identifiers that appear in paths: [A-Za-z0-9][A-Za-z0-9_.-]{0,127}.
Result<void> check_sandbox_id(std::string_view id);
Result<void> check_image_name(std::string_view name);
// A path inside a sandbox: absolute, no NUL, at most kMaxSandboxPath bytes. `what` names the
// parameter in messages.
Result<void> check_sandbox_path(std::string_view path, std::string_view what = "path");

// Query parameters.
Result<bool> parse_bool_param(const Target& t, std::string_view key, bool fallback);
Result<uint32_t> parse_mode_param(const Target& t, std::string_view key, uint32_t fallback);
Result<int> parse_signal_param(const Target& t, std::string_view key, int fallback);
Result<int> parse_pid(std::string_view text);

}  // namespace space::api
