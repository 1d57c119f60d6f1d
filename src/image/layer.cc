// apply_layer(): a layer blob decoded by libarchive in two stages — the outer reader undoes the
// compression (gzip or zstd, recognised by magic; plain passes through) and hands the plain tar
// stream to the inner reader, which parses tar headers. Every byte passes through one of the two
// read callbacks, which hash it (the blob's digest outside, the diff_id inside) and count it
// against the limits, so a bomb stops at the first callback past a limit, not after it was
// written. The entries themselves are written by Tree (tree.cc); this file decides what each
// entry is and whether it is allowed (the rules are in layer.h).
#include "image/layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <locale.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <clocale>
#include <optional>

#include "image/sha256.h"
#include "image/tree.h"
#include "image/utf8_locale.h"

namespace space::image {

namespace {

using detail::Meta;
using detail::Tree;

constexpr size_t kBlock = 64 << 10;
constexpr uint64_t kRatioGrace = 1 << 20;  // uncompressed bytes before the ratio is checked
constexpr std::string_view kWhiteout = ".wh.";
constexpr std::string_view kOpaque = ".wh..wh..opq";

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

// What both callbacks share.
struct Stream {
  int fd = -1;
  const Limits* limits = nullptr;
  uint64_t before = 0;  // totals.bytes when this layer began
  Sha256 compressed, plain;
  uint64_t compressed_bytes = 0, plain_bytes = 0, data_bytes = 0;
  archive* outer = nullptr;
  std::optional<Error> error;  // why a callback stopped the stream
  char in_buf[kBlock];
  char out_buf[kBlock];
  char data_buf[kBlock];  // a file's data on its way to the tree

  uint64_t used() const { return std::max(plain_bytes, data_bytes); }
  // The limits, after `used()` grew.
  bool within_limits() {
    if (used() > limits->max_layer_bytes) {
      error = Error(Code::kPayloadTooLarge, "the layer is larger than " +
                                                std::to_string(limits->max_layer_bytes) +
                                                " bytes uncompressed");
      return false;
    }
    if (before + used() > limits->max_total_bytes) {
      error = Error(Code::kPayloadTooLarge, "the image is larger than " +
                                                std::to_string(limits->max_total_bytes) +
                                                " bytes uncompressed");
      return false;
    }
    if (plain_bytes > kRatioGrace &&
        plain_bytes / std::max<uint64_t>(compressed_bytes, 1) >= limits->max_ratio) {
      error = Error(Code::kPayloadTooLarge,
                    "the layer expands more than " + std::to_string(limits->max_ratio) +
                        " times its compressed size (a decompression bomb?)");
      return false;
    }
    return true;
  }
};

// The blob's bytes, to the outer (decompressing) reader.
la_ssize_t pull_blob(archive*, void* ctx, const void** buf) {
  auto* s = static_cast<Stream*>(ctx);
  for (;;) {
    ssize_t n = ::read(s->fd, s->in_buf, sizeof s->in_buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s->error = Error::sys("read", "layer blob");
      return -1;
    }
    s->compressed.update(s->in_buf, static_cast<size_t>(n));
    s->compressed_bytes += static_cast<uint64_t>(n);
    *buf = s->in_buf;
    return n;
  }
}

// The plain tar stream, to the inner (tar) reader.
la_ssize_t pull_plain(archive*, void* ctx, const void** buf) {
  auto* s = static_cast<Stream*>(ctx);
  la_ssize_t n = archive_read_data(s->outer, s->out_buf, sizeof s->out_buf);
  if (n < 0) {
    if (!s->error)
      s->error = Error(Code::kInvalidArgument,
                       std::string("decompressing: ") + archive_error_string(s->outer));
    return -1;
  }
  s->plain.update(s->out_buf, static_cast<size_t>(n));
  s->plain_bytes += static_cast<uint64_t>(n);
  if (!s->within_limits()) return -1;
  *buf = s->out_buf;
  return n;
}

// An entry's name: "./" and "/"-runs collapsed and "." dropped; "..", absolute names, empty
// ones and overlong ones refused.
Result<std::string> clean_name(const char* raw) {
  if (!raw) return fail(Code::kInvalidArgument, "an entry whose name cannot be read");
  std::string_view p = raw;
  if (p.size() > PATH_MAX) return fail(Code::kInvalidArgument, "a name longer than PATH_MAX");
  if (p.starts_with('/')) return fail(Code::kInvalidArgument, "absolute name");
  std::string out;
  size_t depth = 0;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string_view part = p.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return fail(Code::kInvalidArgument, "path leaves the root (\"..\")");
    if (part.size() > NAME_MAX)
      return fail(Code::kInvalidArgument, "a name component longer than NAME_MAX");
    if (++depth > kMaxDepth)
      return fail(Code::kInvalidArgument,
                  "a name of more than " + std::to_string(kMaxDepth) + " components");
    if (!out.empty()) out += '/';
    out += part;
  }
  return out;
}

Result<Meta> meta_of(archive_entry* e, bool keep_setuid, bool is_dir) {
  Meta m;
  m.mode = archive_entry_perm(e) & 07777;
  // setuid/setgid on files are privilege; setgid on a directory only picks new files' group.
  if (!keep_setuid) m.mode &= is_dir ? ~mode_t{S_ISUID} : ~mode_t{S_ISUID | S_ISGID};
  la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
  if (uid < 0 || gid < 0 || uid >= UINT32_MAX || gid >= UINT32_MAX)
    return fail(Code::kInvalidArgument, "owner out of range");
  m.uid = static_cast<uint32_t>(uid);
  m.gid = static_cast<uint32_t>(gid);
  // Times outside year 0..9999 are clamped: the kernel's answer to them varies by file system.
  constexpr int64_t kMaxTime = 253'402'300'799;
  m.mtime_s =
      archive_entry_mtime_is_set(e) ? std::clamp<int64_t>(archive_entry_mtime(e), 0, kMaxTime) : 0;
  m.mtime_ns = archive_entry_mtime_is_set(e) ? archive_entry_mtime_nsec(e) : 0;
  if (m.mtime_ns < 0 || m.mtime_ns > 999'999'999) m.mtime_ns = 0;
  return m;
}

// A regular file's data, from the inner reader into `fd`.
Result<void> copy_data(archive* in, Stream& s, int fd) {
  char* buf = s.data_buf;
  for (;;) {
    la_ssize_t n = archive_read_data(in, buf, kBlock);
    if (n == 0) return {};
    if (n < 0) {
      if (s.error) return fail(*s.error);
      return fail(Code::kInvalidArgument, std::string("reading: ") + archive_error_string(in));
    }
    s.data_bytes += static_cast<uint64_t>(n);
    if (!s.within_limits()) return fail(*s.error);
    for (la_ssize_t off = 0; off < n;) {
      ssize_t w = ::write(fd, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return fail_sys("write");
      off += w;
    }
  }
}

// One entry onto the tree.
Result<void> apply_entry(archive* in, archive_entry* e, Stream& s, Tree& tree, bool keep_setuid) {
  std::string rel = TRY(clean_name(archive_entry_pathname(e)));
  if (rel.empty()) return {};  // the root itself: its metadata is the importer's
  auto [dir, base] = detail::split_path(rel);
  if (base.starts_with(kWhiteout)) {
    if (base == kOpaque) return tree.opaque(dir);
    if (base.starts_with(".wh..wh.")) return {};  // aufs bookkeeping (.wh..wh.plnk, ...)
    std::string name = base.substr(kWhiteout.size());
    if (name.empty() || name == "." || name == "..")
      return fail(Code::kInvalidArgument, "a whiteout that names nothing");
    return tree.whiteout(dir, name);
  }
  if (const char* hl = archive_entry_hardlink(e)) {
    auto target = clean_name(hl);
    if (!target)
      return fail(std::move(target.error())
                      .wrap("hard link target \"" + std::string(hl).substr(0, 256) + "\""));
    if (target->empty()) return fail(Code::kInvalidArgument, "hard link to the root");
    return tree.make_hardlink(rel, *target);
  }
  switch (archive_entry_filetype(e)) {
    case AE_IFREG: {
      Meta m = TRY(meta_of(e, keep_setuid, false));
      UniqueFd fd = TRY(tree.create_file(rel, m));
      TRY_VOID(copy_data(in, s, fd.get()));
      return tree.finish_file(fd.get(), m);
    }
    case AE_IFDIR: {
      Meta m = TRY(meta_of(e, keep_setuid, true));
      return tree.make_dir(rel, m);
    }
    case AE_IFLNK: {
      const char* t = archive_entry_symlink(e);
      if (!t || !*t) return fail(Code::kInvalidArgument, "a symlink without a target");
      if (std::string_view(t).size() >= PATH_MAX)
        return fail(Code::kInvalidArgument, "a symlink target longer than PATH_MAX");
      Meta m = TRY(meta_of(e, keep_setuid, false));
      return tree.make_symlink(rel, t, m);
    }
    case AE_IFIFO: {
      Meta m = TRY(meta_of(e, keep_setuid, false));
      return tree.make_fifo(rel, m);
    }
    case AE_IFCHR:
    case AE_IFBLK:
      return fail(Code::kInvalidArgument, "a device node (refused in images)");
    case AE_IFSOCK:
      return {};  // a socket in a tar is a leftover of the build; nothing to make
    default:
      return fail(Code::kInvalidArgument, "an entry of unknown type");
  }
}

std::string short_digest(const Layer& layer, const std::filesystem::path& blob) {
  if (!layer.digest.empty()) return layer.digest.substr(0, 19);
  return blob.filename().string();
}

}  // namespace

bool known_layer_media_type(std::string_view t) {
  static constexpr std::string_view kKnown[] = {
      "application/vnd.oci.image.layer.v1.tar",
      "application/vnd.oci.image.layer.v1.tar+gzip",
      "application/vnd.oci.image.layer.v1.tar+zstd",
      "application/vnd.oci.image.layer.nondistributable.v1.tar",
      "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
      "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
      "application/vnd.docker.image.rootfs.diff.tar",
      "application/vnd.docker.image.rootfs.diff.tar.gzip",
      "application/vnd.docker.image.rootfs.diff.tar.zstd",
      "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
  };
  return t.empty() || std::ranges::find(kKnown, t) != std::end(kKnown);
}

Result<void> apply_layer(const std::filesystem::path& blob, const Layer& layer, int root_fd,
                         const Limits& limits, Totals& totals, bool keep_setuid) {
  std::string what = "layer " + short_digest(layer, blob);
  if (!known_layer_media_type(layer.media_type))
    return fail(Code::kInvalidArgument,
                what + ": unknown media type \"" + layer.media_type.substr(0, 128) + "\"");
  UniqueFd fd(::open(blob.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_sys("open", "\"" + blob.string() + "\"");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_sys("fstat", "\"" + blob.string() + "\"");
  if (!S_ISREG(st.st_mode)) return fail(Code::kInvalidArgument, what + ": not a regular file");
  if (!layer.digest.empty() && layer.size != 0 && static_cast<uint64_t>(st.st_size) != layer.size)
    return fail(Code::kInvalidArgument, what + ": the blob is " + std::to_string(st.st_size) +
                                            " bytes; the manifest says " +
                                            std::to_string(layer.size));

  Utf8Locale utf8;  // outlives the readers below
  auto s = std::make_unique<Stream>();
  s->fd = fd.get();
  s->limits = &limits;
  s->before = totals.bytes;
  ArchivePtr outer(archive_read_new());
  ArchivePtr inner(archive_read_new());
  if (!outer || !inner) return fail(Code::kInternal, "archive_read_new: out of memory");
  s->outer = outer.get();
  // Only in-process decoders: a filter that would run an external program is not wanted.
  if (archive_read_support_filter_gzip(outer.get()) != ARCHIVE_OK ||
      archive_read_support_filter_zstd(outer.get()) != ARCHIVE_OK ||
      archive_read_support_format_raw(outer.get()) != ARCHIVE_OK ||
      archive_read_support_format_tar(inner.get()) != ARCHIVE_OK)
    return fail(Code::kUnavailable, "libarchive lacks built-in gzip/zstd/tar support");
  if (archive_read_open(outer.get(), s.get(), nullptr, pull_blob, nullptr) != ARCHIVE_OK) {
    if (s->error) return fail(std::move(*s->error).wrap(what));
    return fail(Code::kInvalidArgument, what + ": not a tar stream (plain, gzip or zstd): " +
                                            archive_error_string(outer.get()));
  }
  archive_entry* raw = nullptr;
  if (archive_read_next_header(outer.get(), &raw) != ARCHIVE_OK)
    return fail(Code::kInvalidArgument, what + ": not a tar stream (plain, gzip or zstd): " +
                                            archive_error_string(outer.get()));
  if (archive_read_open(inner.get(), s.get(), nullptr, pull_plain, nullptr) != ARCHIVE_OK) {
    if (s->error) return fail(std::move(*s->error).wrap(what));
    return fail(Code::kInvalidArgument, what + ": not a tar stream (plain, gzip or zstd): " +
                                            archive_error_string(inner.get()));
  }

  Tree tree(root_fd, ::geteuid() == 0);
  tree.begin_layer();
  uint64_t entries = 0;
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(inner.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      if (s->error) return fail(std::move(*s->error).wrap(what));
      return fail(Code::kInvalidArgument, what + ": after " + std::to_string(entries) +
                                              " entries: " + archive_error_string(inner.get()));
    }
    if (++entries + totals.entries > limits.max_entries)
      return fail(
          Code::kPayloadTooLarge,
          what + ": more than " + std::to_string(limits.max_entries) + " entries in the image");
    if (auto ok = apply_entry(inner.get(), e, *s, tree, keep_setuid); !ok) {
      const char* name = archive_entry_pathname(e);
      std::string shown = name ? std::string(name).substr(0, 256) : "?";
      return fail(std::move(ok.error()).wrap(what + ": entry \"" + shown + "\""));
    }
  }
  tree.finish_layer();
  // The tar's end-of-archive blocks and padding are part of the diff_id; the blob's tail (after
  // a compressed stream's end) part of its digest.
  for (;;) {
    la_ssize_t n = archive_read_data(outer.get(), s->out_buf, sizeof s->out_buf);
    if (n == 0) break;
    if (n < 0) {
      if (s->error) return fail(std::move(*s->error).wrap(what));
      return fail(Code::kInvalidArgument,
                  what + ": decompressing: " + archive_error_string(outer.get()));
    }
    s->plain.update(s->out_buf, static_cast<size_t>(n));
    s->plain_bytes += static_cast<uint64_t>(n);
    if (!s->within_limits()) return fail(std::move(*s->error).wrap(what));
  }
  for (;;) {
    const void* buf = nullptr;
    la_ssize_t n = pull_blob(nullptr, s.get(), &buf);
    if (n == 0) break;
    if (n < 0) return fail(std::move(*s->error).wrap(what));
  }
  if (!layer.digest.empty()) {
    if (std::string got = s->compressed.digest(); got != layer.digest)
      return fail(Code::kInvalidArgument,
                  what + ": the blob hashes to " + got + ", not its digest " + layer.digest);
  }
  if (!layer.diff_id.empty()) {
    if (std::string got = s->plain.digest(); got != layer.diff_id)
      return fail(Code::kInvalidArgument, what + ": the uncompressed layer hashes to " + got +
                                              ", not the config's diff_id " + layer.diff_id);
  }
  totals.bytes += s->used();
  totals.entries += entries;
  return {};
}

}  // namespace space::image
