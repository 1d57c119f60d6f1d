// The image config (the "config" object SPACE honours and rootfs.diff_ids), its stored form,
// and the host's platform in OCI's spelling. Every field comes from an upload: types are
// checked before any get<>(), strings that reach execve (env, argv, user, cwd) may not hold NUL,
// and counts are bounded.
#include <sys/utsname.h>

#include <string_view>

#include "image/oci.h"
#include "image/oci_parse.h"

namespace space::image {

using nlohmann::json;

namespace {

constexpr size_t kMaxListItems = 4096;  // Env, Entrypoint, Cmd, Labels, diff_ids
constexpr size_t kMaxString = 64 << 10;

Result<void> check_string(const std::string& s, const std::string& what) {
  if (s.size() > kMaxString)
    return fail(Code::kInvalidArgument, what + ": longer than " + std::to_string(kMaxString));
  if (s.find('\0') != std::string::npos)
    return fail(Code::kInvalidArgument, what + ": holds a NUL byte");
  return {};
}

// The value under `key` or, failing that, `oci_key`; nullptr when both are absent or null.
const json* field(const json& j, const char* key, const char* oci_key) {
  for (const char* k : {key, oci_key}) {
    auto it = j.find(k);
    if (it != j.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

Result<std::string> string_field(const json& j, const char* key, const char* oci_key) {
  const json* v = field(j, key, oci_key);
  if (!v) return std::string();
  if (!v->is_string()) return fail(Code::kInvalidArgument, std::string(oci_key) + ": not a string");
  std::string s = v->get<std::string>();
  TRY_VOID(check_string(s, oci_key));
  return s;
}

Result<std::vector<std::string>> list_field(const json& j, const char* key, const char* oci_key) {
  std::vector<std::string> out;
  const json* v = field(j, key, oci_key);
  if (!v) return out;
  if (!v->is_array())
    return fail(Code::kInvalidArgument, std::string(oci_key) + ": not an array of strings");
  if (v->size() > kMaxListItems)
    return fail(Code::kInvalidArgument,
                std::string(oci_key) + ": more than " + std::to_string(kMaxListItems) + " items");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    std::string what = std::string(oci_key) + "[" + std::to_string(i) + "]";
    if (!item.is_string()) return fail(Code::kInvalidArgument, what + ": not a string");
    std::string s = item.get<std::string>();
    TRY_VOID(check_string(s, what));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

json ImageConfig::to_json() const {
  json j = json::object();
  if (!env.empty()) j["env"] = env;
  if (!working_dir.empty()) j["working_dir"] = working_dir;
  if (!user.empty()) j["user"] = user;
  if (!entrypoint.empty()) j["entrypoint"] = entrypoint;
  if (!cmd.empty()) j["cmd"] = cmd;
  if (!labels.empty()) j["labels"] = labels;
  return j;
}

Result<ImageConfig> ImageConfig::from_json(const json& j) {
  ImageConfig c;
  if (j.is_null()) return c;
  if (!j.is_object()) return fail(Code::kInvalidArgument, "config: not an object");
  c.env = TRY(list_field(j, "env", "Env"));
  for (size_t i = 0; i < c.env.size(); ++i) {
    auto eq = c.env[i].find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(Code::kInvalidArgument, "Env[" + std::to_string(i) + "]: not NAME=VALUE");
  }
  c.working_dir = TRY(string_field(j, "working_dir", "WorkingDir"));
  if (!c.working_dir.empty() && c.working_dir[0] != '/')
    return fail(Code::kInvalidArgument, "WorkingDir: not an absolute path");
  c.user = TRY(string_field(j, "user", "User"));
  c.entrypoint = TRY(list_field(j, "entrypoint", "Entrypoint"));
  c.cmd = TRY(list_field(j, "cmd", "Cmd"));
  if (const json* l = field(j, "labels", "Labels")) {
    if (!l->is_object()) return fail(Code::kInvalidArgument, "Labels: not an object");
    if (l->size() > kMaxListItems)
      return fail(Code::kInvalidArgument,
                  "Labels: more than " + std::to_string(kMaxListItems) + " labels");
    for (const auto& [k, v] : l->items()) {
      if (!v.is_string())
        return fail(Code::kInvalidArgument, "Labels[\"" + k.substr(0, 64) + "\"]: not a string");
      TRY_VOID(check_string(k, "a label's name"));
      std::string value = v.get<std::string>();
      TRY_VOID(check_string(value, "Labels[\"" + k.substr(0, 64) + "\"]"));
      c.labels.emplace(k, std::move(value));
    }
  }
  return c;
}

bool valid_sha256_digest(std::string_view s) {
  constexpr std::string_view kPrefix = "sha256:";
  if (s.size() != kPrefix.size() + 64 || !s.starts_with(kPrefix)) return false;
  for (char c : s.substr(kPrefix.size()))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

Result<ParsedConfig> parse_config_blob(std::string_view text) {
  json j = TRY(detail::parse_json(text));  // bounded in size and nesting (oci_parse.h)
  if (!j.is_object()) return fail(Code::kInvalidArgument, "not a JSON object");
  ParsedConfig out;
  auto cfg = j.find("config");
  if (cfg != j.end()) {
    auto c = ImageConfig::from_json(*cfg);
    if (!c) return fail(std::move(c.error()).wrap("config"));
    out.config = std::move(*c);
  }
  for (const char* k : {"os", "architecture"}) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) return fail(Code::kInvalidArgument, std::string(k) + ": not a string");
    (k[0] == 'o' ? out.os : out.architecture) = it->get<std::string>();
  }
  auto rootfs = j.find("rootfs");
  if (rootfs == j.end() || !rootfs->is_object())
    return fail(Code::kInvalidArgument, "rootfs: missing or not an object");
  auto type = rootfs->find("type");
  if (type == rootfs->end() || !type->is_string() || type->get<std::string>() != "layers")
    return fail(Code::kInvalidArgument, "rootfs.type: not \"layers\"");
  auto ids = rootfs->find("diff_ids");
  if (ids == rootfs->end() || !ids->is_array())
    return fail(Code::kInvalidArgument, "rootfs.diff_ids: missing or not an array");
  if (ids->size() > kMaxLayers)
    return fail(Code::kInvalidArgument,
                "rootfs.diff_ids: more than " + std::to_string(kMaxLayers) + " layers");
  for (size_t i = 0; i < ids->size(); ++i) {
    const json& id = (*ids)[i];
    if (!id.is_string() || !valid_sha256_digest(id.get<std::string>()))
      return fail(Code::kInvalidArgument,
                  "rootfs.diff_ids[" + std::to_string(i) + "]: not a sha256 digest");
    out.diff_ids.push_back(id.get<std::string>());
  }
  return out;
}

Platform Platform::host() {
  Platform p;
#if defined(__x86_64__)
  p.architecture = "amd64";
#elif defined(__aarch64__)
  p.architecture = "arm64";
#elif defined(__riscv) && __riscv_xlen == 64
  p.architecture = "riscv64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  p.architecture = "ppc64le";
#elif defined(__s390x__)
  p.architecture = "s390x";
#else
  utsname u{};
  if (::uname(&u) == 0) p.architecture = u.machine;
#endif
  return p;
}

}  // namespace space::image
