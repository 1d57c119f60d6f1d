// The snapshot store: content-addressed, compressed, deduplicated storage of directory trees
// (a sandbox's writable layer). A snapshot is a manifest — every entry of the tree with its
// metadata, and for regular files the list of content chunks — sealed with an HMAC kept by the
// daemon; chunks are stored once, zstd-compressed, named by the SHA-256 of their plain bytes,
// and shared by every snapshot and sandbox that has the same bytes. Taking a snapshot with a
// parent is incremental: files whose (size, mtime, ctime, inode) match the parent's entry are
// neither re-read nor re-stored. Everything read back (manifests, chunks) is untrusted: the
// manifest's MAC and every chunk's hash are checked before use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace space::snapshot {

// One entry of a tree, relative to its root ("etc/hosts"; the root itself is "").
struct Entry {
  enum class Type { kDir, kFile, kSymlink, kWhiteout, kOther } type = Type::kFile;
  std::string path;
  uint32_t mode = 0;          // permission bits incl. setuid/setgid/sticky (kOther: plus the
                              // S_IFIFO or S_IFSOCK type bits)
  uint32_t uid = 0, gid = 0;  // as stored on disk (host ids)
  int64_t mtime_ns = 0;
  uint64_t size = 0;
  std::string target;                         // symlink target
  std::map<std::string, std::string> xattrs;  // all namespaces the store can read (user.,
                                              // trusted.): overlay's opaque markers live here
  std::string hardlink_to;          // set on the 2nd+ path of a hardlinked file: the first path
  std::vector<std::string> chunks;  // hex SHA-256 of each chunk, in order (files only)
  // For incremental snapshots (not restored): identity of the file when it was read.
  int64_t ctime_ns = 0;
  uint64_t ino = 0, dev = 0;
};

struct Manifest {
  std::string id;                             // "snap_<hex>"
  std::string parent;                         // "" = full
  std::map<std::string, std::string> labels;  // sandbox, profile, name, ... (free form)
  double created_at = 0;
  std::vector<Entry> entries;        // sorted by path, parents before children
  uint64_t logical_bytes = 0;        // sum of file sizes
  uint64_t new_bytes = 0;            // compressed bytes this snapshot added to the store
  uint64_t reused_files = 0;         // files taken from the parent without reading them
  std::vector<std::string> skipped;  // what take() left out, with why ("dev/sda: device node")
};

struct StoreStats {
  uint64_t chunks = 0, stored_bytes = 0;
  uint64_t quarantined = 0;  // chunk files found corrupt and moved aside (<name>.corrupt)
};

// Bounds on what take(), scan() and load() accept from a tree or a manifest, and the clock that
// stamps created_at (injectable for tests).
struct StoreOptions {
  uint64_t max_entries = 1'000'000;
  size_t max_path = 4096;         // bytes of a relative path (and of a symlink target)
  size_t max_depth = 256;         // components of a relative path
  std::function<double()> clock;  // seconds since the epoch; empty = the system clock
};

class Store {
 public:
  // `root` holds chunks/ and manifests/ (created, mode 0700). `key` is the HMAC key (at least
  // 32 bytes) that seals manifests.
  // Thread-safe: take() and gc() exclude each other with flock() on root/lock (takes share it,
  // gc holds it alone), across processes too; everything else only reads or is atomic.
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& root, std::string key,
                                             StoreOptions options = {});

  // Snapshots the tree under `dir` (opened O_DIRECTORY; never follows symlinks, never leaves
  // the tree: every path is resolved with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS). With a
  // parent manifest, unchanged files reuse its chunk lists. The manifest is written (sealed)
  // before returning; chunks are written before the manifest, each atomically, so a crash at
  // any point leaves earlier snapshots intact (and at worst unreferenced chunks for gc()).
  // `progress` (optional) is called with bytes read so far.
  Result<Manifest> take(int dir_fd, const std::string& id, const Manifest* parent,
                        std::map<std::string, std::string> labels,
                        const std::function<void(uint64_t)>& progress = {});

  // Loads and verifies a manifest: kNotFound if absent, kProtocol with a clear message if its
  // MAC does not match (tampered) or it does not parse (truncated).
  Result<Manifest> load(const std::string& id) const;
  std::vector<std::string> list() const;       // ids of stored manifests
  Result<void> remove(const std::string& id);  // the manifest only; chunks go at gc()

  // Materializes a manifest into the empty directory `dir_fd`: directories, files (every
  // chunk's hash verified; kProtocol on mismatch or a missing/truncated chunk), symlinks,
  // hardlinks, whiteouts (character device 0:0), owners (lchown), modes, xattrs, mtimes. Paths
  // are created beneath dir_fd only. The manifest is validated first (kProtocol); a non-empty
  // target is kConflict; after a failure the target holds a partial tree for the caller to drop.
  Result<void> restore(const Manifest& m, int dir_fd) const;

  // Reads every chunk the manifest references and checks its hash, without writing anything:
  // kProtocol naming the first missing, truncated or altered chunk. For callers that must know
  // a restore will not fail on the data before they destroy what it replaces (rollback).
  Result<void> verify(const Manifest& m) const;

  // --- Copying snapshots between stores (src/cluster/snapshot_push.h: a shared store that
  // nodes push to and pull from). What travels is the files as this store keeps them: the
  // sealed manifest byte for byte and each chunk's zstd file, so a store with the same key
  // verifies them as its own.

  // Bounds on the files a store accepts from elsewhere.
  static constexpr size_t kMaxManifestFileBytes = size_t{1} << 30;
  static constexpr size_t kMaxChunkFileBytes = (size_t{4} << 20) + (size_t{64} << 10);

  // A manifest (loaded and verified as load() does) with the exact bytes of its sealed file.
  struct Sealed {
    Manifest manifest;
    std::string file;
  };
  Result<Sealed> load_sealed(const std::string& id) const;
  // The distinct chunks a manifest needs from a store, in order of first use: every chunk it
  // references but the all-zero chunk of sparse files, which restore() and verify() never read.
  static std::vector<std::string> stored_chunks(const Manifest& m);
  // The file of chunk `chunk_id` as stored, checked (decompressed, hashed) before it is
  // returned: kNotFound if absent, kProtocol if corrupt.
  Result<std::string> chunk_file(const std::string& chunk_id) const;
  Result<bool> has_chunk(const std::string& chunk_id) const;

  // Installs a snapshot sealed elsewhere with this store's key: checks the MAC of
  // `sealed_file` before parsing anything (kProtocol naming the manifest: altered, or sealed
  // with another key), then fetches each chunk it needs that this store lacks, checks it
  // (kProtocol naming the chunk) before keeping it, makes the chunks durable, and writes the
  // manifest last, atomically. Nothing is visible unless everything arrived intact (chunks
  // kept before a failure are unreferenced: gc() frees them). Idempotent: a manifest already
  // here with the same bytes is success with `already_present`; different bytes are
  // kAlreadyExists.
  struct ImportResult {
    uint64_t chunks_fetched = 0, chunks_present = 0, bytes_fetched = 0;
    bool already_present = false;
  };
  using ChunkFetcher = std::function<Result<std::string>(const std::string& chunk_id)>;
  Result<ImportResult> import(const std::string& id, const std::string& sealed_file,
                              const ChunkFetcher& fetch);

  // Deletes chunks no stored manifest references (and stray temporary files). Returns the
  // number of chunks and bytes freed. If some manifest does not load (tampered, truncated), no
  // chunk is deleted and the result is kProtocol naming it: one bad file never costs data.
  struct GcResult {
    uint64_t chunks = 0, bytes = 0;
  };
  Result<GcResult> gc();
  StoreStats stats() const;

  // The tree's entries with metadata only (no chunks, nothing stored): for `space diff
  // --since SNAP`, compared by diff() on metadata (type, size, mtime, mode, owner, target,
  // xattrs).
  static Result<Manifest> scan(int dir_fd, const StoreOptions& options = {});

  // Differences between two manifests (or a manifest and nothing): {"added","changed",
  // "deleted"} of absolute paths, sorted, like `space diff`.
  static nlohmann::json diff(const Manifest* from, const Manifest& to);

 private:
  Store(UniqueFd root, UniqueFd chunks, UniqueFd manifests, std::string key, StoreOptions options);
  Result<UniqueFd> lock(bool exclusive) const;
  Result<void> write_manifest(const Manifest& m);
  Result<void> write_manifest_file(const std::string& id, const std::string& text);
  Result<std::string> read_manifest_file(const std::string& id) const;

  UniqueFd root_, chunks_, manifests_;  // O_RDONLY|O_DIRECTORY
  std::string key_;
  StoreOptions options_;
};

}  // namespace space::snapshot
