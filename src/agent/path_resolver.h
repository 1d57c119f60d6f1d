// Resolution of sandbox paths relative to a root directory fd, so that no path the daemon sends
// (`..`, absolute or relative symlinks, /proc/self/root and other magic links) can reach
// outside that root. The agent uses "/" opened at start; tests point it at a temporary
// directory.
//
// The primary mechanism is openat2(root, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS). Where
// openat2 is missing (ENOSYS: an old guest kernel, or a seccomp policy that hides it) a
// userspace walk does the same job component by component with O_PATH|O_NOFOLLOW opens,
// splicing symlink targets in and clamping ".." at the root. Magic links are then followed
// only as the text readlink shows, resolved inside the root again.
//
// Creating operations resolve the PARENT this way and then act on the last component with
// *at() calls and O_NOFOLLOW / AT_SYMLINK_NOFOLLOW.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/fd.h"

namespace space::agent {

inline constexpr size_t kMaxPathBytes = 4096;

// A sandbox path is absolute, has no NUL byte and is at most kMaxPathBytes long.
Result<void> check_sandbox_path(std::string_view path);

enum class ResolveMode {
  kAuto,       // openat2, falling back to the userspace walk once it reports ENOSYS
  kOpenat2,    // openat2 only
  kUserspace,  // the userspace walk only (tests exercise it directly)
};

struct ParentRef {
  UniqueFd dir;      // the parent directory, O_PATH|O_DIRECTORY
  std::string name;  // the last component: never empty, ".", ".." and never contains '/'
};

class PathResolver {
 public:
  // root_fd is borrowed and must outlive the resolver.
  explicit PathResolver(int root_fd, ResolveMode mode = ResolveMode::kAuto)
      : root_fd_(root_fd), mode_(mode) {}

  int root_fd() const { return root_fd_; }

  // Opens `path` inside the root with open(2) `flags` (O_CLOEXEC is always added) and, with
  // O_CREAT, `mode`. Symlinks are followed inside the root, including a final one unless
  // flags has O_NOFOLLOW (then a final symlink fails with ELOOP, or with O_PATH opens the link).
  Result<UniqueFd> open(std::string_view path, int flags, mode_t mode = 0) const;

  // Opens the parent directory of `path` and returns its last component. "/" has no parent
  // (kInvalidArgument), nor do paths ending in "." or "..".
  Result<ParentRef> open_parent(std::string_view path) const;

  // Like open_parent, but first creates missing parent directories with `dir_mode` (mkdir -p).
  Result<ParentRef> open_parent_creating(std::string_view path, mode_t dir_mode) const;

 private:
  Result<UniqueFd> open_openat2(std::string_view path, int flags, mode_t mode) const;
  Result<UniqueFd> open_userspace(std::string_view path, int flags, mode_t mode) const;

  int root_fd_;
  mutable ResolveMode mode_;
};

// Splits a checked path into its parent and last component ("/a/b/" -> "/a", "b").
Result<std::pair<std::string, std::string>> split_parent(std::string_view path);

}  // namespace space::agent
