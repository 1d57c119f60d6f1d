// The tree an image is unpacked into, written one layer entry at a time (layer.cc decodes the
// stream and decides what each entry is; this file touches the file system). Every path is
// resolved from the root fd with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): a relative
// symlink that stays inside the tree (Debian's lib -> usr/lib) is followed, one that leads out
// (an absolute target, or ".." above the root) fails with EXDEV and the entry is refused. The
// last component is always created or changed with calls that do not follow it (O_NOFOLLOW,
// AT_SYMLINK_NOFOLLOW, mkdirat, symlinkat, linkat without AT_SYMLINK_FOLLOW), so a symlink an
// entry left behind is never written through.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace space::image::detail {

// Metadata of an entry as it will be set (mode already filtered by the setuid rule).
struct Meta {
  mode_t mode = 0;  // permission bits (07777)
  uint32_t uid = 0, gid = 0;
  int64_t mtime_s = 0;
  long mtime_ns = 0;
};

class Tree {
 public:
  // `chown`: whether owners are set (only root may).
  Tree(int root_fd, bool chown) : root_fd_(root_fd), chown_(chown) {}

  // Called at the start of each layer: what the previous layer wrote is now "lower".
  void begin_layer();

  // The directory `rel` ("" = the root), opened for *at calls; with `create`, missing
  // components are made (0755, owned by the importer) and counted as this layer's.
  Result<UniqueFd> open_dir(const std::string& rel, bool create);

  // Entries. `rel` is a clean relative path (no "", ".", ".." components); `parent`/`name`
  // are its split. Each replaces what is at the path (a directory only by a non-directory).
  Result<UniqueFd> create_file(const std::string& rel, const Meta& m);  // open for writing
  Result<void> finish_file(int fd, const Meta& m);                      // owner, mode, time
  Result<void> make_dir(const std::string& rel, const Meta& m);
  Result<void> make_symlink(const std::string& rel, const std::string& target, const Meta& m);
  Result<void> make_fifo(const std::string& rel, const Meta& m);
  // A hard link at `rel` to the regular file at `target` (already in the tree).
  Result<void> make_hardlink(const std::string& rel, const std::string& target);

  // ".wh.NAME" in `dir`: NAME and what is under it go, unless this layer made it.
  Result<void> whiteout(const std::string& dir, const std::string& name);
  // ".wh..wh..opq" in `dir`: everything in it that this layer did not make goes.
  Result<void> opaque(const std::string& dir);

  // Directory times, set last (entries made inside a directory change its mtime).
  void finish_layer();

 private:
  void record(const std::string& rel);  // `rel` and its parents are this layer's
  Result<void> clear_for(int dirfd, const std::string& name, bool keep_dir);
  // opaque(): keeps this layer's entries only; `depth` levels below the marker's directory.
  Result<void> prune(int dirfd, const std::string& rel, size_t depth);
  Result<void> set_meta_at(int dirfd, const std::string& name, const Meta& m, bool symlink);

  int root_fd_;
  bool chown_;
  std::unordered_set<std::string> made_;     // paths this layer wrote
  std::unordered_set<std::string> parents_;  // their ancestors
  std::vector<std::pair<std::string, Meta>> dir_times_;
};

// Removes `name` in `dirfd` and, for a directory, everything under it, never following a
// symlink; refused beyond kMaxDepth levels (`depth` is the level of `name`). ENOENT is success.
Result<void> remove_tree_at(int dirfd, const std::string& name, size_t depth = 0);

// "a/b/c" -> {"a/b", "c"}; "c" -> {"", "c"}.
std::pair<std::string, std::string> split_path(const std::string& rel);

}  // namespace space::image::detail
