// The snapshot stores of a spaced, one per profile (snapshot_stores.h).
#include "daemon/snapshot_stores.h"

#include <sys/stat.h>

#include "tls/digest.h"

namespace space::daemon {
namespace fs = std::filesystem;

namespace {

// The key that seals one profile's manifests: HMAC(master, profile).
std::string profile_key(const std::string& master, const std::string& profile) {
  return tls::hmac_sha256(master, "space snapshot store v1: " + profile);
}

}  // namespace

Result<snapshot::Store*> SnapshotStores::get(const std::string& profile) {
  std::lock_guard lock(mu_);
  if (auto it = stores_.find(profile); it != stores_.end()) return it->second.get();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return fail(Code::kUnavailable, "creating " + dir_.string() + ": " + ec.message());
  ::chmod(dir_.c_str(), 0700);
  fs::path root = dir_ / profile;
  if (::mkdir(root.c_str(), 0700) < 0 && errno != EEXIST) return fail_sys("mkdir", root.string());
  snapshot::StoreOptions options;
  options.max_entries = kMaxEntries;
  auto store = TRY_CTX(snapshot::Store::open(root, profile_key(key_, profile), options),
                       "opening the snapshot store of profile " + profile);
  auto* p = store.get();
  stores_[profile] = std::move(store);
  return p;
}

std::map<std::string, snapshot::Store*> SnapshotStores::opened() {
  std::lock_guard lock(mu_);
  std::map<std::string, snapshot::Store*> out;
  for (auto& [profile, store] : stores_) out[profile] = store.get();
  return out;
}

void SnapshotStores::set_gc_blocked(const std::string& profile, std::string why) {
  std::lock_guard lock(mu_);
  gc_blocked_[profile] = std::move(why);
}

std::map<std::string, SnapshotStores::Status> SnapshotStores::status() {
  std::map<std::string, Status> out;
  std::map<std::string, std::string> blocked;
  {
    std::lock_guard lock(mu_);
    blocked = gc_blocked_;
  }
  for (auto& [profile, store] : opened()) {
    auto it = blocked.find(profile);
    out[profile] = Status{store->stats(), it == blocked.end() ? "" : it->second};
  }
  return out;
}

std::map<std::string, bool> SnapshotStores::gc_blocked() {
  std::lock_guard lock(mu_);
  std::map<std::string, bool> out;
  for (auto& [profile, why] : gc_blocked_) out[profile] = !why.empty();
  return out;
}

}  // namespace space::daemon
