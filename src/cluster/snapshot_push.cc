// Pushing snapshots to the shared store and pulling them back (snapshot_push.h). The local
// store (snapshot::Store) does every check on what arrives: the manifest's MAC and each chunk's
// hash, in Store::import().
#include "cluster/snapshot_push.h"

#include <algorithm>

#include "cluster/store_keys.h"
#include "common/hex.h"

namespace space::cluster {
namespace {

using nlohmann::json;

bool push_chunk_id(const std::string& id) { return id.size() == 64 && is_lower_hex(id); }

}  // namespace

Result<std::string> chunk_key(const std::string& profile, const std::string& chunk_id) {
  TRY_VOID(check_store_profile(profile));
  if (!push_chunk_id(chunk_id))
    return fail(Code::kInvalidArgument, "\"" + chunk_id.substr(0, 80) + "\" is not a chunk id");
  return "profiles/" + profile + "/chunks/" + chunk_id;
}

Result<std::string> manifest_key(const std::string& profile, const std::string& snapshot_id) {
  TRY_VOID(check_store_profile(profile));
  TRY_VOID(check_store_id("snapshot", snapshot_id));
  return "profiles/" + profile + "/manifests/" + snapshot_id;
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
  TRY_VOID(check_store_profile(profile));
  const std::string prefix = "profiles/" + profile + "/manifests/";
  auto keys = TRY_CTX(remote.list(prefix), "listing the snapshots in " + remote.url());
  return ids_under(keys, prefix, "");
}

}  // namespace space::cluster
