// Lists the overlay upper layer of a microVM's writable disk: the directory `upper` at the root
// of the ext4 file system that space-vminit mounts as the overlay's upperdir (docs/vm-guest.md),
// read with libext2fs from an already open, read-only fd. The guest wrote every byte of that
// disk, so this runs only inside space-upper-reader after it has confined itself (confine.h);
// the code still bounds everything it is fed: entries, path length, directory cycles.
#pragma once

#include <cstddef>
#include <functional>

#include "common/error.h"
#include "runtime/upper_listing.h"

namespace space::upper_reader {

struct WalkLimits {
  size_t max_entries = 100000;  // more: kResourceExhausted
  size_t max_path = runtime::kMaxUpperPath;
};

// Opens the file system on `disk_fd` read-only (the fd is never written; an fd opened O_RDONLY
// could not be) and calls `emit` for each entry below `upper`, parents before their children.
// Whiteouts are character devices 0:0; a directory is opaque when its xattr
// trusted.overlay.opaque is "y" (the guest mounts its overlay as root, so overlay metadata is in
// trusted.*; user.* xattrs there are the guest's own and mean nothing to the overlay).
// kProtocol for a disk that is not a readable ext4 with an `upper` directory, or whose
// directories are damaged (a cycle, a name with '/', an inode that cannot be read);
// kResourceExhausted past `limits.max_entries`; an error `emit` returns ends the walk with it.
Result<void> walk_upper(int disk_fd, const WalkLimits& limits,
                        const std::function<Result<void>(const runtime::UpperEntry&)>& emit);

// Library set-up that needs the file system (com_err's message tables): call before confining.
void prepare();

}  // namespace space::upper_reader
