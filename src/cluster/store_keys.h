// The shared snapshot store's names (docs/cluster.md, "Shared snapshot store"): the rules for
// profile names and snapshot and sandbox ids in its keys, and the sandbox pointers,
//   sandboxes/<sandbox>.json               the sandbox's latest pushed snapshot
// which the gateway reads to say where a sandbox's last snapshot is. Apart from snapshot_push.h,
// which moves the snapshots themselves, so that what reads only these links no snapshot code.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/object_store.h"
#include "common/error.h"

namespace space::cluster {

// Profile names: [a-z0-9_-]{1,64}.
bool valid_store_profile(const std::string& profile);
// Snapshot and sandbox ids: [A-Za-z0-9_.-]{1,128}, no leading '.' (the local store's rule).
bool valid_store_id(const std::string& id);
// The same as errors (kInvalidArgument); `what` names the id ("snapshot", "sandbox").
Result<void> check_store_profile(const std::string& profile);
Result<void> check_store_id(const std::string& what, const std::string& id);
// The valid ids among `keys` of the form prefix + id + suffix, sorted.
std::vector<std::string> ids_under(const std::vector<std::string>& keys, const std::string& prefix,
                                   const std::string& suffix);

// The key of a sandbox's pointer (the id checked: kInvalidArgument).
Result<std::string> sandbox_pointer_key(const std::string& sandbox_id);

// The pointer to a sandbox's latest pushed snapshot, sandboxes/<sandbox>.json:
//   {"sandbox","snapshot","profile","node","created_at","runtime","image"}
// "sandbox", "snapshot" and "profile" are required (ids checked); the others are strings
// ("created_at" may be a number). Write it after the snapshot's push returned.
Result<void> write_sandbox_pointer(ObjectStore& remote, const nlohmann::json& pointer);
// kNotFound if the sandbox has none; kProtocol if the object is not a valid pointer for it.
Result<nlohmann::json> read_sandbox_pointer(ObjectStore& remote, const std::string& sandbox_id);
// Ids of the sandboxes with a pointer, sorted.
Result<std::vector<std::string>> list_sandbox_pointers(ObjectStore& remote);

}  // namespace space::cluster
