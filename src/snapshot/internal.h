// Internals of the snapshot store, shared by its files and its tests: safe file-system helpers
// (fs.cc), the content-defined chunker (chunker.cc), the chunk files (chunks.cc), the manifest's
// JSON form, validation and seal (manifest.cc), and walking / restoring trees (tree.cc). Nothing
// here is part of the store's interface (cas.h).
#pragma once

#include <sys/types.h>
#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "common/hex.h"
#include "snapshot/cas.h"
#include "tls/digest.h"

namespace space::snapshot::detail {

// --- chunking (chunker.cc)
inline constexpr size_t kMinChunk = 256 << 10;
inline constexpr size_t kAvgChunk = 1 << 20;
inline constexpr size_t kMaxChunk = 4 << 20;

// Length of the first chunk of `data[0, n)`. The caller passes at least kMaxChunk bytes unless
// they are the last bytes of the file. Content-defined: the cut depends only on the bytes around
// it (a gear hash over a 64-byte window), so an edit moves at most the cuts next to it.
size_t cut_point(const uint8_t* data, size_t n);

// The chunk that a run of at least kMaxChunk zero bytes starting at a cut point begins with:
// its length and id. A hole in a sparse file is recorded as a sequence of it without being
// read or hashed, and restored as a hole without being read (its content is known).
struct ZeroChunk {
  size_t length;
  std::string id;
};
const ZeroChunk& zero_chunk();

// --- file-system helpers (fs.cc)
// Opens `rel` (relative, validated) beneath `root` without following any symlink or leaving the
// tree: openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV),
// or, where the kernel has no openat2, a walk of openat(O_NOFOLLOW) one component at a time.
// "" opens root itself.
Result<UniqueFd> open_beneath(int root, const std::string& rel, int flags);
// Tests set this to exercise the component walk.
extern bool g_force_component_walk;

std::string proc_fd_path(int fd);  // "/proc/self/fd/N": reaches an O_PATH fd's own inode
// The xattrs the store keeps (user.*, trusted.*, security.capability, POSIX ACLs) of the inode
// behind `fd`; `o_path` says the fd is O_PATH (then read through proc_fd_path, which acts on the
// inode itself even for a symlink).
Result<std::map<std::string, std::string>> read_xattrs(int fd, bool o_path);
Result<void> write_xattrs(int fd, bool o_path, const std::map<std::string, std::string>& xattrs);
bool kept_xattr(std::string_view name);

Result<void> write_all(int fd, const void* data, size_t n);
// Reads at most `limit` bytes of an open file; more is an error (kProtocol).
Result<std::string> read_bounded(int fd, size_t limit);
Result<void> fsync_fd(int fd, std::string_view what);
// Lists a directory (names other than . and ..), unsorted.
Result<std::vector<std::string>> list_dir(int dir_fd);
std::string random_suffix();  // 16 hex characters from getrandom()

// Paths: relative, '/'-separated, no empty, "." or ".." component, no NUL; within the limits.
Result<void> check_path(const std::string& path, const StoreOptions& options);
size_t path_depth(const std::string& path);
std::string parent_of(const std::string& path);  // "a/b" -> "a"; "a" -> ""
std::string base_of(const std::string& path);    // "a/b" -> "b"
bool valid_id(const std::string& id);            // [A-Za-z0-9_.-]{1,128}, no leading '.'

using space::from_hex;  // lowercase only (common/hex.h)
using space::to_hex;
bool is_chunk_id(std::string_view s);  // 64 lowercase hex digits
using tls::hmac_sha256_hex;
using tls::sha256_hex;
bool valid_utf8(std::string_view s);

int64_t to_ns(const struct timespec& ts);
struct timespec from_ns(int64_t ns);

// --- chunk files (chunks.cc): chunks/ab/<62 more hex>, zstd level 3, each written atomically.
class ChunkWriter {
 public:
  explicit ChunkWriter(int chunks_dir);
  ~ChunkWriter();  // removes the temporary files of chunks never committed
  ChunkWriter(const ChunkWriter&) = delete;
  ChunkWriter& operator=(const ChunkWriter&) = delete;
  // Stores one chunk unless a chunk with the same id is there (or pending); returns its id.
  Result<std::string> put(const uint8_t* data, size_t n);
  // Stores a chunk file received as it is (zstd bytes, e.g. from another node's store) under
  // `id`, unless present. The caller has checked it with check_chunk_file().
  Result<void> put_file(const std::string& id, std::string_view file);
  Result<bool> has(const std::string& id) const;
  // Commits every pending chunk and makes it durable: call before writing the manifest.
  Result<void> sync();
  uint64_t new_bytes() const { return new_bytes_; }
  // Chunks are written to temporary files and committed in batches: one syncfs() makes a whole
  // batch durable, then each is renamed into place, so a chunk under its final name is always
  // complete (dedup trusts names) without an fsync per chunk. Tests lower the batch size.
  static inline size_t batch_chunks = 4096;
  static inline uint64_t batch_bytes = uint64_t{256} << 20;
  // Test hook: put() fails after this many new chunks (simulates dying mid-snapshot).
  static inline uint64_t fail_after_for_test = UINT64_MAX;

 private:
  struct Pending {
    std::string id, tmp;  // tmp: "ab/.<62 hex>.<random>.tmp"
    uint64_t bytes;
  };
  Result<void> commit();
  Result<void> stage(const std::string& id, const void* file, size_t z);

  int dir_;
  ZSTD_CCtx* cctx_;
  std::string zbuf_;
  std::vector<Pending> pending_;
  std::set<std::string> pending_ids_;
  std::set<std::string> subdirs_;  // chunks/ab directories known to exist
  uint64_t pending_bytes_ = 0, new_bytes_ = 0, new_chunks_ = 0;
  bool committed_ = false;
};

// Checks a chunk file's bytes (untrusted: from another store) before they are stored as `id`:
// one zstd frame of at most kMaxChunk bytes whose SHA-256 is `id`. kProtocol "chunk <id> is
// corrupt (...)" otherwise.
Result<void> check_chunk_file(const std::string& id, std::string_view file);

// What a corrupt chunk file is renamed to, beside where it was (ChunkReader::get).
inline constexpr std::string_view kQuarantineSuffix = ".corrupt";

class ChunkReader {
 public:
  explicit ChunkReader(int chunks_dir);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;
  // Reads chunk `id` of file `path` into out[0, cap) (cap <= kMaxChunk: what is left of the
  // file) and returns its length, after checking its hash. A missing, truncated, oversized or
  // altered chunk is kProtocol "chunk <id> of <path> is ..."; a chunk file that is there but
  // bad is moved aside first (quarantined), so that the store never hands it out again.
  Result<size_t> get(const std::string& id, const std::string& path, uint8_t* out,
                     size_t cap) const;

 private:
  int dir_;
  ZSTD_DCtx* dctx_;
};

// --- manifests (manifest.cc)
// The manifest's canonical JSON (what the MAC covers) and back. from_json checks every field's
// type and, through validate(), every path, id and cross-reference.
nlohmann::json to_json(const Manifest& m);
// Exactly to_json(m).dump(), built entry by entry (no JSON document of the whole manifest).
std::string canonical_dump(const Manifest& m);
Result<Manifest> from_json(const nlohmann::json& j, const StoreOptions& options);
// What restore() relies on: sorted unique valid paths, root first, every parent an earlier
// directory, hardlinks to earlier files, chunk ids well formed, xattrs in kept namespaces.
Result<void> validate(const Manifest& m, const StoreOptions& options);
// The sealed file: {"mac":"<hex>","manifest":<canonical>} (exactly nlohmann's dump of it).
std::string seal(const Manifest& m, const std::string& key);
// Checks the layout and the MAC over the manifest bytes before parsing anything, then parses
// and validates. Errors name `id`.
Result<Manifest> unseal(const std::string& text, const std::string& id, const std::string& key,
                        const StoreOptions& options);
nlohmann::json diff(const Manifest* from, const Manifest& to);

// --- trees (tree.cc)
struct TakeContext {
  const StoreOptions* options = nullptr;
  ChunkWriter* writer = nullptr;  // null: scan (metadata only)
  const Manifest* parent = nullptr;
  std::function<void(uint64_t)> progress;
};
// Walks the tree under dir_fd into m->entries (sorted), m->logical_bytes, m->reused_files,
// m->skipped. Reads each file it does not reuse and stores its chunks through ctx.writer.
Result<void> walk_tree(int dir_fd, const TakeContext& ctx, Manifest* m);
Result<void> restore_tree(const Manifest& m, int dir_fd, const ChunkReader& reader,
                          const StoreOptions& options);

}  // namespace space::snapshot::detail
