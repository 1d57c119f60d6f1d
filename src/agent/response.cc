// Response payloads and untrusted-JSON helpers for the agent.
#include "agent/response.h"

#include <cerrno>

#include "common/json_nesting.h"

namespace space::agent {

std::string_view protocol_error_code(const Error& e) {
  switch (e.sys_errno()) {
    case 0:
      break;
    case ENOENT:
      return "not_found";
    case EACCES:
    case EPERM:
    case EROFS:
      return "permission_denied";
    case EEXIST:
      return "exists";
    case ENOTDIR:
      return "not_dir";
    case EISDIR:
      return "is_dir";
    case ENOSPC:
    case EDQUOT:
      return "no_space";
    case EINVAL:
    case ELOOP:
    case ENAMETOOLONG:
    case ENOTEMPTY:
    case EXDEV:
      return "invalid_argument";
    case ESRCH:
      return "not_found";
    default:
      return "internal";
  }
  switch (e.code()) {
    case Code::kInvalidArgument:
    case Code::kProtocol:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kAlreadyExists:
      return "exists";
    case Code::kPermissionDenied:
      return "permission_denied";
    default:
      return "internal";
  }
}

json error_object(const Error& e) {
  json o = {{"code", protocol_error_code(e)}, {"message", e.message()}};
  if (e.sys_errno() != 0) o["errno"] = e.sys_errno();
  return o;
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ok_payload(json body) {
  if (!body.is_object()) body = json::object();
  body["ok"] = true;
  return dump_json(body);
}

std::string error_payload(const Error& e) {
  return dump_json(json{{"ok", false}, {"error", error_object(e)}});
}

Result<json> parse_object(std::string_view text) {
  // nlohmann's DOM is built recursively; refuse absurd nesting before handing it untrusted text.
  if (!json_nesting_within(text, 32)) return fail(Code::kInvalidArgument, "JSON nested too deeply");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(Code::kInvalidArgument, "malformed JSON");
  if (!j.is_object()) return fail(Code::kInvalidArgument, "expected a JSON object");
  return j;
}

Result<std::optional<std::string>> opt_string(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::optional<std::string>{};
  if (!it->is_string())
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be a string");
  return std::optional<std::string>(it->get_ref<const std::string&>());
}

Result<std::string> req_string(const json& o, const char* key) {
  auto v = TRY(opt_string(o, key));
  if (!v) return fail(Code::kInvalidArgument, std::string("\"") + key + "\" is required");
  return std::move(*v);
}

Result<bool> opt_bool(const json& o, const char* key, bool fallback) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be a boolean");
  return it->get<bool>();
}

Result<std::optional<int64_t>> opt_int(const json& o, const char* key, int64_t min, int64_t max) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::optional<int64_t>{};
  int64_t v = 0;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      v = INT64_MAX;
    else
      v = it->get<int64_t>();
  } else {
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be an integer");
  }
  if (v < min || v > max)
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be in [" +
                                            std::to_string(min) + ", " + std::to_string(max) + "]");
  return std::optional<int64_t>(v);
}

}  // namespace space::agent
