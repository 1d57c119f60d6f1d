// The shared store that nodes of a cluster push snapshots to and pull them from
// (docs/cluster.md, "Shared snapshot store"): a flat space of keys ("profiles/p/chunks/
// <hex>") holding whole objects, behind one interface with two back ends chosen by URL:
//   file:///abs/dir                       a POSIX directory, local or a shared NFS/CephFS volume
//   s3://bucket/prefix?endpoint=URL&region=R   an S3-compatible service (path-style, SigV4)
// Every put is atomic (a reader sees the old object, the new one or none, never part of one),
// which is what lets snapshot_push.h write a manifest last as its commit point.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::cluster {

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // The store's URL without credentials, for messages.
  virtual const std::string& url() const = 0;

  // Writes the whole object `key`, replacing any object of that key atomically.
  virtual Result<void> put(const std::string& key, std::string_view data) = 0;
  // Whether an object `key` exists.
  virtual Result<bool> exists(const std::string& key) = 0;
  // The whole object: kNotFound if there is none, kPayloadTooLarge if it has more than
  // `max_bytes` bytes (nothing beyond the limit is read into memory).
  virtual Result<std::string> get(const std::string& key, size_t max_bytes) = 0;
  // Every key that starts with `prefix` (any depth below it), sorted.
  virtual Result<std::vector<std::string>> list(const std::string& prefix) = 0;
  // Deletes `key`; a key that does not exist is success.
  virtual Result<void> remove(const std::string& key) = 0;
};

// Keys are '/'-separated components of [A-Za-z0-9._-], none empty, none starting with '.'
// (so no "." or ".." and no hidden files: the POSIX store's temporary names start with '.'),
// at most 1024 bytes. kInvalidArgument naming the key otherwise.
Result<void> check_key(std::string_view key);
// A key prefix for list(): "" or a key, optionally ending with '/'.
Result<void> check_prefix(std::string_view prefix);

struct ObjectStoreOptions {
  // S3: a JSON file {"access_key_id": "...", "secret_access_key": "...", "session_token": "..."
  // (optional)}. Empty: the environment's AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and
  // AWS_SESSION_TOKEN).
  std::string credentials_file;
  // S3 over https: PEM certificates to trust ("" = the system's trust store).
  std::string ca_file;
  int timeout_ms = 30'000;    // S3: per request
  int list_page_keys = 1000;  // S3: keys per ListObjectsV2 page (max-keys; tests lower it)
};

// Opens the store a URL names (see the top of this file). Errors say what is wrong with the URL
// or what to check (the directory's existence and mode, the credentials).
Result<std::unique_ptr<ObjectStore>> open_object_store(const std::string& url,
                                                       const ObjectStoreOptions& options = {});
// The same with only a credentials file ("" = the environment's), as the config names them.
Result<std::unique_ptr<ObjectStore>> open_object_store(const std::string& url,
                                                       const std::string& credentials_file);

}  // namespace space::cluster
