// Snapshots that move between nodes (docs/cluster.md, "Shared snapshot store"): a node
// pushes a snapshot of its local store (src/snapshot) to the shared object store, and any node
// with the same sealing key pulls it into its own local store and restores it there. Keys:
//   profiles/<profile>/chunks/<64 hex>     each chunk file exactly as the local store keeps it
//   profiles/<profile>/manifests/<snap>    the sealed manifest file, byte for byte
//   sandboxes/<sandbox>.json               the sandbox's latest pushed snapshot
// Order is the protocol: chunks first, then the manifest (the commit point: a snapshot is
// visible once its manifest is, and by then every chunk it names is there), then the sandbox
// pointer. Chunks are content-addressed, so a chunk another node already pushed is not sent
// again. Nothing read back is trusted: pull checks the manifest's MAC with the local key before
// it uses any of it, and each chunk's hash before it keeps it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/object_store.h"
#include "cluster/store_keys.h"  // the sandbox pointers, and the rules for names
#include "common/error.h"
#include "snapshot/cas.h"

namespace space::cluster {

// Keys of the shared store (the profile and ids are checked: kInvalidArgument).
Result<std::string> chunk_key(const std::string& profile, const std::string& chunk_id);
Result<std::string> manifest_key(const std::string& profile, const std::string& snapshot_id);

struct PushResult {
  uint64_t chunks_uploaded = 0, chunks_skipped = 0;  // skipped: already in the shared store
  uint64_t bytes_uploaded = 0;                       // chunk and manifest files
};

// Pushes snapshot `id` of `local` (the store of `profile`): loads and verifies its manifest,
// uploads each chunk it needs that the shared store lacks (each checked against its hash as it
// is read), then the manifest file last. Pushing again is harmless (nothing but the manifest is
// sent again).
Result<PushResult> push_snapshot(const snapshot::Store& local, const std::string& profile,
                                 const std::string& id, ObjectStore& remote);
// The same, opening the local store at `local_root` with `key` (the profile's sealing key).
Result<PushResult> push_snapshot(const std::filesystem::path& local_root,
                                 const std::string& profile, const std::string& id,
                                 const std::string& key, ObjectStore& remote);

struct PullResult {
  uint64_t chunks_downloaded = 0, chunks_present = 0;  // present: already in the local store
  uint64_t bytes_downloaded = 0;                       // chunk and manifest files
  bool already_present = false;  // the local store had the snapshot: nothing was fetched
};

// Pulls snapshot `id` of `profile` from the shared store into `local`: fetches the manifest
// file, checks its MAC with the local key (kProtocol naming the manifest if it was altered or
// sealed with another key) before using anything in it, fetches each chunk the local store
// lacks and checks its hash before keeping it (kProtocol naming the chunk), then installs the
// manifest last. kNotFound if the shared store has no such snapshot. Idempotent.
Result<PullResult> pull_snapshot(ObjectStore& remote, const std::string& profile,
                                 const std::string& id, snapshot::Store& local);
Result<PullResult> pull_snapshot(ObjectStore& remote, const std::string& profile,
                                 const std::string& id, const std::filesystem::path& local_root,
                                 const std::string& key);

// Snapshot ids of `profile` in the shared store (those whose manifest landed), sorted.
Result<std::vector<std::string>> list_pushed_snapshots(ObjectStore& remote,
                                                       const std::string& profile);

}  // namespace space::cluster
