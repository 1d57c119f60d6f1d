// The snapshot stores of a spaced, one per profile (<state>/snapshots/<profile>), each sealed
// with its own key derived from the snapshot key, opened on first use and kept; and what their
// last garbage collection found (doctor and /metrics say where a bad manifest blocked it).
// One lock, a leaf: it guards the map and the gc results, never a store's work (a Store is
// safe to use from several threads, and is never closed while spaced runs).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "snapshot/cas.h"

namespace space::daemon {

class SnapshotStores {
 public:
  // A manifest costs spaced about 1-2 KiB of memory per entry while a snapshot is taken (one
  // at a time): this bounds it (docs/snapshots.md).
  static constexpr uint64_t kMaxEntries = 500'000;

  explicit SnapshotStores(std::filesystem::path dir) : dir_(std::move(dir)) {}
  // The 32-byte key every profile's key derives from; set once, before the first get().
  void set_key(std::string key) { key_ = std::move(key); }
  Result<snapshot::Store*> get(const std::string& profile);
  // Every store opened so far.
  std::map<std::string, snapshot::Store*> opened();
  // What the profile's last gc found: "" when it ran, else why it freed nothing.
  void set_gc_blocked(const std::string& profile, std::string why);

  struct Status {
    snapshot::StoreStats stats;
    std::string gc_blocked;  // "" = not blocked
  };
  // Per opened profile: its chunks and bytes, chunks quarantined, gc blocked. Walks each
  // store's chunks outside the lock.
  std::map<std::string, Status> status();
  // Per profile whose gc ran: whether it was blocked (for /metrics; no store is walked).
  std::map<std::string, bool> gc_blocked();

 private:
  const std::filesystem::path dir_;
  std::string key_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<snapshot::Store>> stores_;
  std::map<std::string, std::string> gc_blocked_;
};

}  // namespace space::daemon
