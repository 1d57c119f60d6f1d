// The sandbox's writable layer: a size-capped tmpfs holding overlayfs's `upper/` and `work/`,
// made by the daemon (not by the sandbox's child) as a detached mount, optionally filled by
// SandboxSpec::populate_upper, and handed to the child, which attaches it at `layer` in its own
// mount namespace and mounts the overlay over it (launcher.cc, mounts.cc).
//
// Why the daemon makes it. A tmpfs mounted inside the sandbox's user namespace belongs to that
// namespace, and the kernel refuses to create files in it for any id the namespace does not map
// (EOVERFLOW): host root, the daemon, could not fill it; it would have to borrow the sandbox's
// ids and lose its capabilities on the way. A tmpfs made by host root with fsopen/fsconfig/
// fsmount belongs to the host user namespace instead, so the daemon can create entries there
// with any owner, mode, xattr or whiteout, and the size and inode caps are the tmpfs's own,
// whoever writes. Inside, nothing changes for the sandbox: its root holds capabilities over
// every inode whose owner its id map covers (all of them, once chowned into the range), the
// overlay is mounted in its namespace with userxattr as before, and the tmpfs root, `upper`
// and `work` belong to sandbox root. What the sandbox loses is only what it never needed: it
// cannot set security.* xattrs other than namespaced file capabilities on the layer.
#pragma once

#include <cstdint>
#include <functional>

#include "common/error.h"
#include "common/fd.h"
#include "runtime/runtime.h"

namespace space::runtime::linux {

// A new tmpfs (size = disk_bytes, nr_inodes = host::layer_inodes, nosuid, nodev) as a detached
// mount: the O_PATH fd fsmount returns, which is the layer's root directory. Its root (0755),
// `upper` (0755) and `work` (0700) belong to host uid/gid `owner` (the sandbox's uid_base). Closing
// the fd before anything attached the mount unmounts and frees the tmpfs.
Result<UniqueFd> make_writable_layer(const Limits& limits, uint32_t owner);

// Calls `populate` with `upper` of the layer at `layer_fd` (O_RDONLY|O_DIRECTORY|O_NOFOLLOW),
// the SandboxSpec::populate_upper contract. Its error comes back wrapped.
Result<void> populate_writable_layer(int layer_fd,
                                     const std::function<Result<void>(int)>& populate);

}  // namespace space::runtime::linux
