// The shared store's names and the sandbox pointers (store_keys.h).
#include "cluster/store_keys.h"

#include <algorithm>

namespace space::cluster {
namespace {

using nlohmann::json;

constexpr size_t kMaxPointerBytes = 64 << 10;

}  // namespace

bool valid_store_profile(const std::string& p) {
  return !p.empty() && p.size() <= 64 && std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// Snapshot and sandbox ids: [A-Za-z0-9_.-]{1,128}, no leading '.' (the local store's rule).
bool valid_store_id(const std::string& id) {
  return !id.empty() && id.size() <= 128 && id[0] != '.' &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
         });
}

Result<void> check_store_profile(const std::string& profile) {
  if (!valid_store_profile(profile))
    return fail(Code::kInvalidArgument,
                "profile name \"" + profile.substr(0, 64) + "\" must be [a-z0-9_-]{1,64}");
  return {};
}

Result<void> check_store_id(const std::string& what, const std::string& id) {
  if (!valid_store_id(id))
    return fail(Code::kInvalidArgument, "invalid " + what + " id \"" + id.substr(0, 128) + "\"");
  return {};
}

// The ids under `prefix` whose keys are prefix + id + suffix.
std::vector<std::string> ids_under(const std::vector<std::string>& keys, const std::string& prefix,
                                   const std::string& suffix) {
  std::vector<std::string> ids;
  for (const std::string& k : keys) {
    if (!k.starts_with(prefix) || !k.ends_with(suffix)) continue;
    std::string id = k.substr(prefix.size(), k.size() - prefix.size() - suffix.size());
    if (valid_store_id(id) && id.find('/') == std::string::npos) ids.push_back(std::move(id));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Result<std::string> sandbox_pointer_key(const std::string& sandbox_id) {
  TRY_VOID(check_store_id("sandbox", sandbox_id));
  return "sandboxes/" + sandbox_id + ".json";
}

Result<void> write_sandbox_pointer(ObjectStore& remote, const json& pointer) {
  auto bad = [&](const std::string& why) {
    return fail(Code::kInvalidArgument,
                "sandbox pointer " + pointer.dump().substr(0, 300) + ": " + why);
  };
  if (!pointer.is_object()) return bad("not a JSON object");
  for (const char* field : {"sandbox", "snapshot", "profile"})
    if (!pointer.contains(field) || !pointer[field].is_string())
      return bad(std::string("field \"") + field + "\" is missing or not a string");
  const std::string sandbox = pointer["sandbox"].get<std::string>();
  TRY_VOID(check_store_id("sandbox", sandbox));
  TRY_VOID(check_store_id("snapshot", pointer["snapshot"].get<std::string>()));
  TRY_VOID(check_store_profile(pointer["profile"].get<std::string>()));
  for (const char* field : {"node", "runtime", "image"})
    if (pointer.contains(field) && !pointer[field].is_string())
      return bad(std::string("field \"") + field + "\" is not a string");
  if (pointer.contains("created_at") && !pointer["created_at"].is_string() &&
      !pointer["created_at"].is_number())
    return bad("field \"created_at\" is neither a string nor a number");
  const std::string key = TRY(sandbox_pointer_key(sandbox));
  TRY_VOID_CTX(remote.put(key, pointer.dump()), "writing the pointer of sandbox " + sandbox);
  return {};
}

Result<json> read_sandbox_pointer(ObjectStore& remote, const std::string& sandbox_id) {
  const std::string key = TRY(sandbox_pointer_key(sandbox_id));
  const std::string ctx =
      "reading the pointer of sandbox " + sandbox_id + " (" + key + " in " + remote.url() + ")";
  auto text = remote.get(key, kMaxPointerBytes);
  if (!text) {
    if (text.error().code() == Code::kNotFound)
      return fail(Code::kNotFound, ctx + ": the shared store has no snapshot of this sandbox");
    return fail(std::move(text.error()).wrap(ctx));
  }
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) { return fail(Code::kProtocol, ctx + ": " + why); };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  for (const char* field : {"sandbox", "snapshot", "profile"})
    if (!j.contains(field) || !j[field].is_string())
      return bad(std::string("field \"") + field + "\" is missing or not a string");
  if (j["sandbox"] != sandbox_id) return bad("it names another sandbox");
  if (!valid_store_id(j["snapshot"].get<std::string>())) return bad("invalid snapshot id");
  if (!valid_store_profile(j["profile"].get<std::string>())) return bad("invalid profile");
  return j;
}

Result<std::vector<std::string>> list_sandbox_pointers(ObjectStore& remote) {
  auto keys = TRY_CTX(remote.list("sandboxes/"), "listing the sandboxes in " + remote.url());
  return ids_under(keys, "sandboxes/", ".json");
}

}  // namespace space::cluster
