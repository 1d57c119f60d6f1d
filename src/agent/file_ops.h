// File operations the daemon asks of the agent (`stat`, `walk`, `read`, `write`, `mkdir`,
// `symlink`, `remove`), all inside a PathResolver's root. Nothing here follows a symlink as
// the last component of a modifying operation, and walks never follow symlinks at all.
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "agent/path_resolver.h"
#include "common/error.h"
#include "common/fd.h"

namespace space::agent {

inline constexpr uint64_t kMaxWalkEntries = 1'000'000;
inline constexpr size_t kMaxWalkDepth = 256;    // directories open at once during a walk
inline constexpr size_t kMaxRemoveDepth = 256;  // nesting a recursive remove descends

// {"type","mode","size","uid","gid","mtime","target"?} for an lstat result. `dir`/`name` give
// the symlink target where st is a link.
nlohmann::json stat_json(const struct stat& st, int dir, const char* name);

// lstat semantics on the last component ("/" itself stats the root).
Result<nlohmann::json> stat_path(const PathResolver& r, std::string_view path);

Result<void> make_dir(const PathResolver& r, std::string_view path, mode_t mode, bool parents);
Result<void> make_symlink(const PathResolver& r, std::string_view path, std::string_view target);
Result<void> remove_path(const PathResolver& r, std::string_view path, bool recursive);

// Opens a regular file for reading (symlinks followed inside the root). Other file types are
// refused, so reading a FIFO or a device can never block the agent.
Result<UniqueFd> open_for_read(const PathResolver& r, std::string_view path);

// Creates or truncates a regular file for writing. A symlink as the last component is refused
// (ELOOP), as is anything that is not a regular file. `mode` applies when the file is created.
Result<UniqueFd> open_for_write(const PathResolver& r, std::string_view path, mode_t mode,
                                bool parents);

// An incremental, depth-first (parents before children) walk of a directory that never follows
// symlinks. Entries are newline-terminated JSON objects, paths relative to the walk's root.
class Walker {
 public:
  // depth: how many directory levels to list (1: the directory's own entries only).
  static Result<Walker> open(const PathResolver& r, std::string_view path,
                             size_t depth = kMaxWalkDepth);
  Walker(Walker&&) = default;
  Walker& operator=(Walker&&) = delete;
  ~Walker();

  // Appends entries to out until it holds at least `budget` bytes or the walk ends. Returns
  // true while more entries may follow.
  bool next(std::string& out, size_t budget);
  uint64_t count() const { return count_; }
  // Set when the walk stopped early (entry limit, depth limit or unreadable directories).
  bool truncated() const { return truncated_; }

 private:
  struct Level {
    DIR* dir;
    std::string prefix;  // relative path of this directory with a trailing '/', "" at the top
  };
  Walker() = default;
  void push(int fd, std::string prefix);

  std::vector<Level> stack_;
  size_t depth_ = kMaxWalkDepth;
  uint64_t count_ = 0;
  bool truncated_ = false;
};

}  // namespace space::agent
