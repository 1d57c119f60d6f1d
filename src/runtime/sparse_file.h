// Sparse files of the microVM runtimes: guest memory files of Firecracker snapshots
// (docs/firecracker-runtime.md) and the templates' disks and RAM (qemu and firecracker). A full
// snapshot's memory file holds all of the guest's RAM; a diff snapshot's holds only the pages
// dirtied since the previous snapshot, at their offsets, with holes in between. A diff is made
// restorable by writing its data extents over the full file it follows (what Firecracker's
// rebase-snap tool does). Holes cost nothing: SEEK_DATA / SEEK_HOLE find the extents.
#pragma once

#include <cstdint>

#include "common/error.h"

namespace space::runtime::vm {

// Writes every data extent of `diff_fd` into `base_fd` at the same offsets; returns the bytes
// written. The diff must not be larger than the base (the same machine's RAM).
Result<uint64_t> apply_diff(int base_fd, int diff_fd);

// Copies `src_fd` into the empty `dst_fd`, keeping holes (a fresh disk or memory file is mostly
// holes): a reflink where the filesystem has them, else its data extents only.
Result<void> copy_sparse(int src_fd, int dst_fd);

// Copies `src_fd` into the empty `dst_fd` writing only its 4 KiB pages that are not all zero
// (a template's RAM, fully allocated in memory, stored on disk): holes everywhere else. Returns
// the bytes written.
Result<uint64_t> copy_nonzero_pages(int src_fd, int dst_fd);

}  // namespace space::runtime::vm
