// The sandbox's file-system view as a list of mount operations, built in the parent (all
// strings prepared up front) and executed by the child between clone and exec without
// allocating. Two phases:
//  * before pivot_root, relative to the staging directory (the child's cwd), where `layer`
//    holds the writable tmpfs (upper/ and work/ inside; made by the daemon and attached there
//    by the launcher, see writable_layer.h) and the empty mount point `root` gets the overlay
//    of the image over it;
//  * after pivot_root into `root`, with absolute paths inside the new root, where symlinks in
//    the image can only resolve inside the new root; host sources are reached through the old
//    root, still mounted at kOldRoot until the launcher detaches it.
// Every mount lives in the child's own mount namespace; nothing is mounted on the host.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/runtime.h"

namespace space::runtime::linux {

// Where the host's root stays reachable between pivot_root and its detach.
inline constexpr char kOldRoot[] = "/.space-old-root";

struct FsOp {
  enum class Kind : unsigned char {
    kMount,     // mount(source, target, fstype, flags, data)
    kReadOnly,  // make the mount at target (recursively) read-only, nosuid, nodev (+noexec)
    kMkdirs,    // mkdir -p target, mode for created directories
    kTouch,     // create an empty file (bind mount target), mode
    kSymlink,   // symlink(source, target)
    kChmod,     // chmod(target, mode)
  };
  Kind kind = Kind::kMount;
  bool optional = false;  // ENOENT (a /proc file this kernel lacks) is not an error
  const char* source = nullptr;
  const char* target = nullptr;
  const char* fstype = nullptr;
  unsigned long flags = 0;
  const char* data = nullptr;
  unsigned mode = 0;
  const char* what = "";  // step name in error messages: "mount overlay", "bind /usr"
};

struct FsPlan {
  std::vector<FsOp> before_pivot;
  std::vector<FsOp> after_pivot;
  std::deque<std::string> strings;  // owns every const char* above (stable addresses)
  const char* keep(std::string s) { return strings.emplace_back(std::move(s)).c_str(); }
};

// Builds the plan for `spec`. `lower_fd` is the fd number at which the child holds the image
// rootfs open (the overlay's lowerdir is /proc/self/fd/<lower_fd>: the child opens the image
// while it still has host root's fs identity, so the image path and its parents need not be
// reachable by the sandbox's uid).
Result<FsPlan> make_fs_plan(const SandboxSpec& spec, int lower_fd);

// Child side, async-signal-safe: runs ops in order. Returns 0, or the errno of the op whose
// index is stored in *failed.
int run_fs_ops(const std::vector<FsOp>& ops, size_t* failed);

}  // namespace space::runtime::linux
