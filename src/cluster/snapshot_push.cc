// Pushing snapshots to the shared store and pulling them back (snapshot_push.h). The local
// store (snapshot::Store) does every check on what arrives: the manifest's MAC and each chunk's
// hash, in Store::import().
#include "cluster/snapshot_push.h"

#include <algorithm>

#include "common/hex.h"

namespace space::cluster {
namespace {

using nlohmann::json;

constexpr size_t kPushMaxPointerBytes = 64 << 10;

bool push_valid_profile(const std::string& p) {
  return !p.empty() && p.size() <= 64 && std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// Snapshot and sandbox ids: [A-Za-z0-9_.-]{1,128}, no leading '.' (the local store's rule).
bool push_valid_id(const std::string& id) {
  return !id.empty() && id.size() <= 128 && id[0] != '.' &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
         });
}

bool push_chunk_id(const std::string& id) { return id.size() == 64 && is_lower_hex(id); }

Result<void> push_check_profile(const std::string& profile) {
  if (!push_valid_profile(profile))
    return fail(Code::kInvalidArgument,
                "profile name \"" + profile.substr(0, 64) + "\" must be [a-z0-9_-]{1,64}");
  return {};
}

Result<void> push_check_id(const std::string& what, const std::string& id) {
  if (!push_valid_id(id))
    return fail(Code::kInvalidArgument, "invalid " + what + " id \"" + id.substr(0, 128) + "\"");
  return {};
}

// The ids under `prefix` whose keys are prefix + id + suffix.
std::vector<std::string> push_ids_under(const std::vector<std::string>& keys,
                                        const std::string& prefix, const std::string& suffix) {
  std::vector<std::string> ids;
  for (const std::string& k : keys) {
    if (!k.starts_with(prefix) || !k.ends_with(suffix)) continue;
    std::string id = k.substr(prefix.size(), k.size() - prefix.size() - suffix.size());
    if (push_valid_id(id) && id.find('/') == std::string::npos) ids.push_back(std::move(id));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

Result<std::string> chunk_key(const std::string& profile, const std::string& chunk_id) {
  TRY_VOID(push_check_profile(profile));
  if (!push_chunk_id(chunk_id))
    return fail(Code::kInvalidArgument, "\"" + chunk_id.substr(0, 80) + "\" is not a chunk id");
  return "profiles/" + profile + "/chunks/" + chunk_id;
}

Result<std::string> manifest_key(const std::string& profile, const std::string& snapshot_id) {
  TRY_VOID(push_check_profile(profile));
  TRY_VOID(push_check_id("snapshot", snapshot_id));
  return "profiles/" + profile + "/manifests/" + snapshot_id;
}

Result<std::string> sandbox_pointer_key(const std::string& sandbox_id) {
  TRY_VOID(push_check_id("sandbox", sandbox_id));
  return "sandboxes/" + sandbox_id + ".json";
}

Result<PushResult> push_snapshot(const snapshot::Store& local, const std::string& profile,
                                 const std::string& id, ObjectStore& remote) {
  const std::string ctx = "pushing snapshot " + id + " to " + remote.url();
  const std::string mkey = TRY_CTX(manifest_key(profile, id), ctx);
  snapshot::Store::Sealed sealed = TRY_CTX(local.load_sealed(id), ctx);
  PushResult out;
  for (const std::string& chunk : snapshot::Store::stored_chunks(sealed.manifest)) {
    const std::string key = TRY_CTX(chunk_key(profile, chunk), ctx);
    if (TRY_CTX(remote.exists(key), ctx)) {
      ++out.chunks_skipped;
      continue;
    }
    std::string file = TRY_CTX(local.chunk_file(chunk), ctx);
    TRY_VOID_CTX(remote.put(key, file), ctx);
    ++out.chunks_uploaded;
    out.bytes_uploaded += file.size();
  }
  // The commit point: every chunk it names is in the shared store before this lands.
  TRY_VOID_CTX(remote.put(mkey, sealed.file), ctx);
  out.bytes_uploaded += sealed.file.size();
  return out;
}

Result<PushResult> push_snapshot(const std::filesystem::path& local_root,
                                 const std::string& profile, const std::string& id,
                                 const std::string& key, ObjectStore& remote) {
  auto store = TRY_CTX(snapshot::Store::open(local_root, key),
                       "pushing snapshot " + id + ": opening " + local_root.string());
  return push_snapshot(*store, profile, id, remote);
}

Result<PullResult> pull_snapshot(ObjectStore& remote, const std::string& profile,
                                 const std::string& id, snapshot::Store& local) {
  const std::string ctx = "pulling snapshot " + id + " from " + remote.url();
  const std::string mkey = TRY_CTX(manifest_key(profile, id), ctx);
  PullResult out;
  // Already here (a node pulling what it pushed, or a retry): nothing to fetch.
  if (auto here = local.load(id); here) {
    out.already_present = true;
    return out;
  }
  auto file = remote.get(mkey, snapshot::Store::kMaxManifestFileBytes);
  if (!file) {
    if (file.error().code() == Code::kNotFound)
      return fail(Code::kNotFound, ctx + ": the shared store has no manifest " + mkey);
    return fail(std::move(file.error()).wrap(ctx));
  }
  out.bytes_downloaded += file->size();
  auto fetch = [&](const std::string& chunk) -> Result<std::string> {
    const std::string key = TRY(chunk_key(profile, chunk));
    auto got = remote.get(key, snapshot::Store::kMaxChunkFileBytes);
    if (!got) {
      if (got.error().code() == Code::kNotFound)
        return fail(Code::kProtocol, "the shared store has no " + key +
                                         " (its manifest names it: a partial or damaged push)");
      if (got.error().code() == Code::kPayloadTooLarge)
        return fail(Code::kProtocol, key + " is larger than any chunk");
      return fail(std::move(got.error()));
    }
    out.bytes_downloaded += got->size();
    return got;
  };
  auto imported = local.import(id, *file, fetch);
  if (!imported) return fail(std::move(imported.error()).wrap(ctx));
  out.chunks_downloaded = imported->chunks_fetched;
  out.chunks_present = imported->chunks_present;
  out.already_present = imported->already_present;
  return out;
}

Result<PullResult> pull_snapshot(ObjectStore& remote, const std::string& profile,
                                 const std::string& id, const std::filesystem::path& local_root,
                                 const std::string& key) {
  auto store = TRY_CTX(snapshot::Store::open(local_root, key),
                       "pulling snapshot " + id + ": opening " + local_root.string());
  return pull_snapshot(remote, profile, id, *store);
}

Result<std::vector<std::string>> list_pushed_snapshots(ObjectStore& remote,
                                                       const std::string& profile) {
  TRY_VOID(push_check_profile(profile));
  const std::string prefix = "profiles/" + profile + "/manifests/";
  auto keys = TRY_CTX(remote.list(prefix), "listing the snapshots in " + remote.url());
  return push_ids_under(keys, prefix, "");
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
  TRY_VOID(push_check_id("sandbox", sandbox));
  TRY_VOID(push_check_id("snapshot", pointer["snapshot"].get<std::string>()));
  TRY_VOID(push_check_profile(pointer["profile"].get<std::string>()));
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
  auto text = remote.get(key, kPushMaxPointerBytes);
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
  if (!push_valid_id(j["snapshot"].get<std::string>())) return bad("invalid snapshot id");
  if (!push_valid_profile(j["profile"].get<std::string>())) return bad("invalid profile");
  return j;
}

Result<std::vector<std::string>> list_sandbox_pointers(ObjectStore& remote) {
  auto keys = TRY_CTX(remote.list("sandboxes/"), "listing the sandboxes in " + remote.url());
  return push_ids_under(keys, "sandboxes/", ".json");
}

}  // namespace space::cluster
