// Applying one image layer (a tar stream, plain, gzip or zstd) onto a root-filesystem tree that
// is being built, the way an OCI runtime's unpacker would but with every byte of the layer
// untrusted. Every path is opened with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) relative
// to root_fd, and the final component of every entry is created with O_NOFOLLOW / *at calls that
// never follow a link, so no entry (nor a symlink an earlier entry left) can write outside the
// tree. libarchive only decodes the stream; nothing is written by archive_write_disk.
//
// Rules (docs/images.md repeats them for users):
// - Names: a "./" prefix, "//" and "." components are dropped; an absolute name ("/etc/x"), ".."
//   anywhere, a name longer than PATH_MAX, a component longer than NAME_MAX or more than
//   kMaxDepth components are refused (the whole layer fails). Hard link targets likewise.
// - Parents: a relative symlink met on the way that stays inside the tree is followed (Debian's
//   lib -> usr/lib); one that leads out as the host would read it (an absolute target, or ".."
//   above the root) refuses the entry, even though RESOLVE_IN_ROOT could have kept it inside:
//   a layer that writes through such a link is hostile or broken. The last component is never
//   followed: an entry replaces a symlink at its path, it does not write through it.
// - Whiteouts: ".wh.NAME" removes NAME (and everything under it) from what the earlier layers
//   made; ".wh..wh..opq" in a directory empties that directory of what the earlier layers put
//   there (entries of this same layer are kept, wherever the marker stands in the stream).
//   Whiteout names are not created as files; other ".wh..wh." names (aufs) are skipped.
// - Hard links: only to a regular file already in the tree (made by this or an earlier layer),
//   resolved inside the root; a link to a missing path, to a non-file, or that escapes is refused.
// - Symlinks are stored as written (their target is data, never followed while writing).
// - Device nodes (char/block) are refused; fifos are created (they are harmless inside a tree);
//   sockets are skipped. Extended attributes are not applied (security.capability would be a
//   privilege like setuid).
// - setuid/setgid bits of non-directories are stripped unless keep_setuid (setgid on a directory,
//   a group-inheritance rule, is kept); owners (uid/gid) are kept when the process may chown
//   (root), else files are owned by the importer.
// - Limits are enforced as the stream is read: the uncompressed bytes of this layer, of all
//   layers so far (totals), the entry count, and the ratio of uncompressed to compressed bytes
//   (checked after the first MiB, so a gzip/zstd bomb stops early).
// - The uncompressed stream's sha256 is checked against layer.diff_id (when it is set), and the
//   blob's sha256 against layer.digest (when set) — a layer that fails either is refused after
//   its entries were written: the caller discards the whole tree on any error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "image/oci.h"

namespace space::image {

struct Limits {
  uint64_t max_layer_bytes;  // uncompressed bytes of one layer (file data + headers)
  uint64_t max_total_bytes;  // uncompressed bytes of all layers together
  uint64_t max_entries;      // tar entries of all layers together
  uint64_t max_ratio;        // uncompressed / compressed bytes of one layer
};
inline constexpr Limits kDefaultLimits{
    .max_layer_bytes = 16ull << 30,
    .max_total_bytes = 32ull << 30,
    .max_entries = 1'000'000,
    .max_ratio = 200,
};

// Components of an entry's name, and levels of the tree walked when removing (whiteouts).
inline constexpr size_t kMaxDepth = 256;

struct Totals {
  uint64_t bytes = 0, entries = 0;
};

// Applies one layer (tar, gzip or zstd, by media type or magic) onto the tree under root_fd.
// See the rules above. Errors say which entry and why ("layer sha256:ab..: entry
// \"../etc/passwd\": path leaves the root"), kInvalidArgument for a refused input,
// kPayloadTooLarge for a limit, kInternal for a host failure.
Result<void> apply_layer(const std::filesystem::path& blob, const Layer& layer, int root_fd,
                         const Limits& limits, Totals& totals, bool keep_setuid = false);

// Whether a media type names a layer this reader accepts (tar, tar+gzip, tar+zstd, in their OCI
// and Docker spellings, including the non-distributable variants). "" is accepted (by magic).
bool known_layer_media_type(std::string_view media_type);

}  // namespace space::image
