// Writing the layers an image build makes, as plain tar files that image::apply_layer (layer.h)
// then applies onto the tree being built: one writer of untrusted trees, one applier.
//
//  * upper_layer: what a build step's RUN changed: the overlayfs upper directory of its sandbox
//    (the linux runtime's writable layer), as an OCI layer, entries in sorted order (parents
//    first) with the mtimes found. A whiteout (a character device 0:0) becomes ".wh.NAME"; a
//    directory with the opaque xattr (user.overlay.opaque or trusted.overlay.opaque = "y") is
//    written followed by "DIR/.wh..wh..opq"; owners are shifted back from the sandbox's host ids
//    (uid_base + id, id < 65536) to the ids the image means (an id outside that range becomes
//    65534). Files seen twice (same inode) become tar hard links to the first name. Every name
//    is opened relative to its parent's fd, never following a symlink (O_NOFOLLOW, *at calls);
//    the sandbox wrote this tree, so a file may change while it is read: sizes are taken from
//    the open fd, and a file that shrinks is padded with zeros (the caller has stopped the
//    sandbox anyway). Device nodes other than whiteouts and sockets are left out; no extended
//    attributes are written (apply_layer would not apply them). A file whose name starts with
//    ".wh." (it would read as a whiteout), an overlayfs metacopy file or a redirected directory
//    (overlay features the build's overlay must not use: their data is elsewhere) fail the
//    layer. `skip` lists relative paths (and everything under them) that are not part of the
//    layer (what spaced itself put into the writable layer: the sandbox's CA files).
//  * copy_layer: a COPY/ADD step: `sources` (relative to the build context, with * ? [..]
//    globs matched per component by fnmatch(3), where '*' matches a leading '.' as Docker's
//    does; "." is the context itself) copied to `dest` (absolute in the image), as Docker's
//    COPY does:
//      - "into" mode when dest ends in '/' (or "/."), dest_is_dir, several sources are given or
//        the sources match several paths: a file or symlink lands at dest/BASENAME;
//      - a directory source copies its contents (not itself) to dest/..., whatever the mode;
//      - otherwise a single file source is written at dest itself.
//    A source is cleaned and re-rooted at the context first, as Docker does ("../x" and "/x"
//    both mean "x" of the context). Symlinks met while resolving a source, including a source
//    that is itself a symlink (Docker's COPY follows the source path, BuildKit's
//    FollowSymlinks), are followed only while they stay beneath the context's root (openat2
//    RESOLVE_BENEATH): one that leads out (absolute, or ".." above the root) is refused
//    ("COPY: \"x\" goes through a symlink that leads out of the build context"), where
//    BuildKit would silently re-root it; a refusal is clearer than a copy of some other file.
//    Symlinks found inside a copied directory are copied as links (their target is data).
//    Sockets and devices are left out. Every entry gets uid/gid (COPY --chown, already resolved
//    to numbers) and, with `chmod`, that mode (directories and files alike, as Docker);
//    otherwise the source's permission bits; mtimes are the sources'. Parent directories of
//    `dest` are not written (apply_layer makes missing ones 0755 root:root and leaves existing
//    ones as they are); dest itself, when the image lacks it (!dest_is_dir) and something is
//    copied into it, is written with uid/gid and mode 0755 (`chmod` if given), or the source
//    directory's mode when a single directory is copied to it. A source that matches nothing
//    is an error naming it ("COPY: no file matches \"src/*.py\" in the build context"); so is
//    a name starting with ".wh." (a whiteout in a layer).
//
// Both return what they wrote (entries, bytes of file data) and are bounded by `limits`
// (layer.h): a layer bigger than max_layer_bytes or with more than max_entries entries stops
// with kPayloadTooLarge, its message naming the limit and its key in spaced's config
// (images.max_layer, images.max_entries). The tar is written with libarchive (pax restricted
// format; long and non-ASCII names in pax headers); on any error out_tar is removed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "image/layer.h"

namespace space::image {

struct LayerStats {
  uint64_t entries = 0, bytes = 0;
};

// upper_fd: the overlay upper directory, opened O_RDONLY|O_DIRECTORY (or O_PATH|O_DIRECTORY).
Result<LayerStats> upper_layer(int upper_fd, uint32_t uid_base, const std::set<std::string>& skip,
                               const std::filesystem::path& out_tar, const Limits& limits);

struct CopySpec {
  std::vector<std::string> sources;  // as the Dockerfile step gives them
  std::string dest;                  // absolute; a trailing '/' means "into"
  bool dest_is_dir = false;          // the image has a directory at dest already: "into" too
  uint32_t uid = 0, gid = 0;
  std::optional<uint32_t> chmod;
};
// context_fd: the build context's root directory, opened O_RDONLY|O_DIRECTORY.
Result<LayerStats> copy_layer(int context_fd, const CopySpec& spec,
                              const std::filesystem::path& out_tar, const Limits& limits);

// A digest of what copy_layer would copy, for the build cache: names, types, modes, sizes,
// symlink targets and the SHA-256 of every file's content, in a stable order ("sha256:<hex>").
// Owners and mtimes of the sources are not part of it (copy_layer replaces the one and Docker's
// cache ignores the other). Same errors as copy_layer (no match, a symlink leading out).
Result<std::string> copy_sources_digest(int context_fd, const std::vector<std::string>& sources);

}  // namespace space::image
