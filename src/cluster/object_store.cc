// The object store's key rules and the URL that picks a back end (object_store.h).
#include "cluster/object_store.h"

#include "cluster/posix_store.h"
#include "cluster/s3_store.h"

namespace space::cluster {
namespace {

constexpr size_t kStoreMaxKeyBytes = 1024;
constexpr size_t kStoreMaxKeyComponent = 255;

bool store_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// The reason `key` (a key, or with `prefix` a prefix) is refused, "" if it is not.
std::string store_key_problem(std::string_view key, bool prefix) {
  if (key.empty()) return prefix ? "" : "it is empty";
  if (key.size() > kStoreMaxKeyBytes) return "it is longer than 1024 bytes";
  if (key.front() == '/') return "it is absolute";
  size_t start = 0;
  while (start < key.size()) {
    size_t slash = key.find('/', start);
    if (slash == std::string_view::npos) slash = key.size();
    std::string_view part = key.substr(start, slash - start);
    const bool last = slash == key.size();
    if (part.empty()) return "it has an empty component";
    if (part == "." || part == "..") return "it has a \".\" or \"..\" component";
    if (part.front() == '.') return "a component starts with '.'";
    if (part.size() > kStoreMaxKeyComponent) return "a component is longer than 255 bytes";
    for (char c : part)
      if (!store_key_char(c)) return "it has a character outside [A-Za-z0-9._-] and '/'";
    start = slash + 1;
    if (!last && start == key.size()) {
      if (!prefix) return "it ends with '/'";
      break;
    }
  }
  return "";
}

Result<void> store_key_result(std::string_view key, bool prefix) {
  std::string why = store_key_problem(key, prefix);
  if (why.empty()) return {};
  std::string shown(key.substr(0, 200));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return fail(Code::kInvalidArgument, std::string(prefix ? "store key prefix" : "store key") +
                                          " \"" + shown + "\" is refused: " + why);
}

}  // namespace

Result<void> check_key(std::string_view key) { return store_key_result(key, false); }
Result<void> check_prefix(std::string_view prefix) { return store_key_result(prefix, true); }

Result<std::unique_ptr<ObjectStore>> open_object_store(const std::string& url,
                                                       const ObjectStoreOptions& options) {
  if (url.starts_with("file://")) {
    std::string path = url.substr(7);
    if (!path.starts_with("/"))
      return fail(Code::kInvalidArgument, "store URL \"" + url +
                                              "\": a file URL names an absolute directory, "
                                              "file:///abs/dir (three slashes)");
    if (path.find_first_of("?#") != std::string::npos)
      return fail(Code::kInvalidArgument,
                  "store URL \"" + url + "\": a file URL takes no query or fragment");
    while (path.size() > 1 && path.ends_with("/")) path.pop_back();
    return open_posix_store(path, url);
  }
  if (url.starts_with("s3://")) return open_s3_store(url, options);
  return fail(Code::kInvalidArgument, "store URL \"" + url.substr(0, 200) +
                                          "\": use file:///abs/dir (a shared volume) or "
                                          "s3://bucket/prefix?endpoint=URL&region=REGION");
}

Result<std::unique_ptr<ObjectStore>> open_object_store(const std::string& url,
                                                       const std::string& credentials_file) {
  ObjectStoreOptions options;
  options.credentials_file = credentials_file;
  return open_object_store(url, options);
}

}  // namespace space::cluster
