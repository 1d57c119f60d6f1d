// The build's layer writer (layer_writer.h): a sorted, depth-first walk of a directory tree that
// opens every name relative to its parent's fd and never follows a symlink, and a tar writer
// (libarchive, pax restricted) that counts what it writes against the limits. upper_layer()
// turns an overlay upper directory into a layer (whiteouts, opaque directories, owners shifted
// back); copy_layer() and copy_sources_digest() share one resolver of COPY sources (globs per
// component, openat2 RESOLVE_BENEATH from the context's fd) and one walk of what they name, so
// the cache digest describes exactly what the layer would hold.
#include "image/layer_writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <locale.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "common/fd.h"
#include "common/openat2.h"
#include "image/sha256.h"
#include "image/utf8_locale.h"

namespace space::image {

namespace {
// A named namespace too: space_image is built as one unity translation unit, where layer.cc's
// anonymous namespace is this one.
namespace layer_writer {

namespace fs = std::filesystem;

constexpr size_t kBlock = 64 << 10;
constexpr uint32_t kNobody = 65534;
constexpr uint32_t kIdRange = 65536;  // ids a sandbox's user namespace maps from uid_base
constexpr std::string_view kWhiteout = ".wh.";
constexpr const char* kOpaqueMarker = ".wh..wh..opq";
constexpr uint64_t kBeneath = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// "a/b" -> "b"; "b" -> "b".
std::string basename(const std::string& rel) { return rel.substr(rel.rfind('/') + 1); }

std::string shown(const std::string& s) { return "\"" + s.substr(0, 256) + "\""; }

// The names in a directory (not "." or ".."), in byte order: the same tree gives the same tar.
Result<std::vector<std::string>> list_sorted(int dirfd, const std::string& rel) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail_sys("openat", shown(rel));
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int err = errno;
    ::close(fd);
    return fail_sys("fdopendir", shown(rel), err);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(d, ::closedir);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
    errno = 0;
  }
  if (errno != 0) return fail_sys("readdir", shown(rel));
  std::sort(names.begin(), names.end());
  return names;
}

// One name met by walk().
struct Node {
  std::string rel;  // relative to the walk's start ("" for the start itself)
  std::string name;
  struct stat st {};
  UniqueFd fd;         // regular files and directories: open for reading
  std::string target;  // symlinks
};

// What to do with a node: whether to descend into it (directories only).
using Visit = std::function<Result<bool>(Node&)>;

Result<std::string> read_link(int dirfd, const std::string& name, const std::string& rel) {
  std::string target(PATH_MAX, '\0');
  ssize_t n = ::readlinkat(dirfd, name.c_str(), target.data(), target.size());
  if (n < 0) return fail_sys("readlinkat", shown(rel));
  if (static_cast<size_t>(n) >= target.size())
    return fail(Code::kInvalidArgument, shown(rel) + ": a symlink target longer than PATH_MAX");
  target.resize(static_cast<size_t>(n));
  return target;
}

// Visits what is in `dirfd`, parents before children, each directory's names sorted. Every
// name is opened with *at calls that do not follow it; a name that vanishes meanwhile is left
// out. `depth` is the number of components of `prefix`.
Result<void> walk(int dirfd, const std::string& prefix, size_t depth, const Visit& visit) {
  if (depth >= kMaxDepth)
    return fail(Code::kInvalidArgument, shown(prefix) + ": the tree is nested more than " +
                                            std::to_string(kMaxDepth) + " levels deep");
  auto names = TRY(list_sorted(dirfd, prefix));
  for (const std::string& name : names) {
    Node n;
    n.rel = join(prefix, name);
    n.name = name;
    if (::fstatat(dirfd, name.c_str(), &n.st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return fail_sys("fstatat", shown(n.rel));
    }
    if (S_ISREG(n.st.st_mode) || S_ISDIR(n.st.st_mode)) {
      int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
      if (S_ISDIR(n.st.st_mode)) flags |= O_DIRECTORY;
      n.fd = UniqueFd(::openat(dirfd, name.c_str(), flags));
      if (!n.fd) {
        if (errno == ENOENT) continue;
        return fail_sys("openat", shown(n.rel));
      }
      struct stat now {};
      if (::fstat(n.fd.get(), &now) != 0) return fail_sys("fstat", shown(n.rel));
      // Replaced by something else between the two calls: what is there now counts.
      if ((now.st_mode & S_IFMT) != (n.st.st_mode & S_IFMT)) continue;
      n.st = now;
    } else if (S_ISLNK(n.st.st_mode)) {
      auto target = read_link(dirfd, name, n.rel);
      if (!target && target.error().sys_errno() == ENOENT) continue;
      if (!target) return fail(std::move(target.error()));
      n.target = std::move(*target);
    }
    bool descend = TRY(visit(n));
    if (descend && S_ISDIR(n.st.st_mode)) TRY_VOID(walk(n.fd.get(), n.rel, depth + 1, visit));
  }
  return {};
}

// One tar entry.
struct Entry {
  std::string name;       // relative, clean
  mode_t type = S_IFREG;  // S_IFREG, S_IFDIR, S_IFLNK, S_IFIFO
  mode_t perm = 0644;
  uint32_t uid = 0, gid = 0;
  timespec mtime{};
  uint64_t size = 0;     // regular files: bytes read from the fd
  std::string symlink;   // S_IFLNK
  std::string hardlink;  // a hard link (type S_IFREG, no data) to this earlier entry
};

// The tar being written, with its limits. Removes the file unless finish() succeeded.
class TarWriter {
 public:
  // `too_big`/`too_many`: the messages when max_layer_bytes / max_entries are passed.
  TarWriter(const Limits& limits, std::string too_big, std::string too_many)
      : limits_(limits), too_big_(std::move(too_big)), too_many_(std::move(too_many)) {}
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;
  ~TarWriter() {
    if (a_) archive_write_free(a_);
    if (!path_.empty() && !finished_) ::unlink(path_.c_str());
  }

  Result<void> open(const fs::path& path) {
    fd_ =
        UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd_) return fail_sys("open", shown(path.string()));
    path_ = path;
    a_ = archive_write_new();
    if (!a_) return fail(Code::kInternal, "archive_write_new: out of memory");
    if (archive_write_set_format_pax_restricted(a_) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a_, 1) != ARCHIVE_OK ||
        archive_write_open_fd(a_, fd_.get()) != ARCHIVE_OK)
      return fail(Code::kInternal, std::string("starting the tar: ") + archive_error_string(a_));
    buf_ = std::make_unique<char[]>(kBlock);
    return {};
  }

  // Writes `e`; a regular file's data (e.size bytes, fewer if the file shrank: the rest is
  // zeros) is read from `data_fd`.
  Result<void> add(const Entry& e, int data_fd = -1) {
    if (stats_.entries + 1 > limits_.max_entries) return fail(Code::kPayloadTooLarge, too_many_);
    if (stats_.bytes + e.size > limits_.max_layer_bytes)
      return fail(Code::kPayloadTooLarge, too_big_);
    if (e.name.empty() || e.name.size() > PATH_MAX)
      return fail(Code::kInvalidArgument, shown(e.name) + ": a name longer than PATH_MAX");
    if (std::count(e.name.begin(), e.name.end(), '/') + 1 > static_cast<long>(kMaxDepth))
      return fail(Code::kInvalidArgument, shown(e.name) + ": a name of more than " +
                                              std::to_string(kMaxDepth) + " components");
    std::unique_ptr<archive_entry, void (*)(archive_entry*)> ae(archive_entry_new(),
                                                                archive_entry_free);
    if (!ae) return fail(Code::kInternal, "archive_entry_new: out of memory");
    archive_entry_copy_pathname(ae.get(), e.name.c_str());
    archive_entry_set_filetype(ae.get(), e.type);
    archive_entry_set_perm(ae.get(), e.perm & 07777);
    archive_entry_set_uid(ae.get(), e.uid);
    archive_entry_set_gid(ae.get(), e.gid);
    archive_entry_set_mtime(ae.get(), e.mtime.tv_sec, e.mtime.tv_nsec);
    const bool data = e.type == S_IFREG && e.hardlink.empty();
    archive_entry_set_size(ae.get(), data ? static_cast<la_int64_t>(e.size) : 0);
    if (e.type == S_IFLNK) archive_entry_copy_symlink(ae.get(), e.symlink.c_str());
    if (!e.hardlink.empty()) archive_entry_copy_hardlink(ae.get(), e.hardlink.c_str());
    if (archive_write_header(a_, ae.get()) < ARCHIVE_WARN)
      return fail(Code::kInternal,
                  "writing " + shown(e.name) + " to the tar: " + archive_error_string(a_));
    if (data) {
      uint64_t left = e.size;
      while (left > 0) {
        ssize_t n = ::read(data_fd, buf_.get(), std::min<uint64_t>(left, kBlock));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail_sys("read", shown(e.name));
        if (n == 0) break;  // shrank while read: libarchive pads the entry with zeros
        if (archive_write_data(a_, buf_.get(), static_cast<size_t>(n)) != n)
          return fail(Code::kInternal,
                      "writing " + shown(e.name) + " to the tar: " + archive_error_string(a_));
        left -= static_cast<uint64_t>(n);
      }
    }
    if (archive_write_finish_entry(a_) < ARCHIVE_WARN)
      return fail(Code::kInternal,
                  "writing " + shown(e.name) + " to the tar: " + archive_error_string(a_));
    ++stats_.entries;
    if (data) stats_.bytes += e.size;
    return {};
  }

  // Ends the tar; the whole file (headers and padding too, as apply_layer counts it) must be
  // within max_layer_bytes. Not fsynced: the caller applies it at once, and keeps it (or not)
  // as it decides.
  Result<LayerStats> finish() {
    if (archive_write_close(a_) != ARCHIVE_OK)
      return fail(Code::kInternal, std::string("finishing the tar: ") + archive_error_string(a_));
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) return fail_sys("fstat", shown(path_.string()));
    if (static_cast<uint64_t>(st.st_size) > limits_.max_layer_bytes)
      return fail(Code::kPayloadTooLarge, too_big_);
    finished_ = true;
    return stats_;
  }

 private:
  const Limits& limits_;
  std::string too_big_, too_many_;
  UniqueFd fd_;
  fs::path path_;
  archive* a_ = nullptr;
  std::unique_ptr<char[]> buf_;
  LayerStats stats_;
  bool finished_ = false;
};

Error whiteout_name(const std::string& rel) {
  return Error(Code::kInvalidArgument,
               shown(rel) +
                   ": names starting with \".wh.\" mark deletions in image layers; "
                   "such a file cannot be part of an image");
}

// ---- upper_layer ---------------------------------------------------------------------------

// An overlay xattr of the upper directory's entry, in either namespace the overlay may use
// (user.* when mounted with userxattr, as the linux runtime does; trusted.* otherwise).
bool has_overlay_xattr(int fd, const char* what, std::string_view want = {}) {
  for (const char* ns : {"user.overlay.", "trusted.overlay."}) {
    std::string key = std::string(ns) + what;
    char v[8] = {0};
    ssize_t n = ::fgetxattr(fd, key.c_str(), v, sizeof v);
    if (n < 0) continue;
    if (want.empty() || std::string_view(v, static_cast<size_t>(n)) == want) return true;
  }
  return false;
}

uint32_t shift_id(uint32_t host, uint32_t base) {
  return host >= base && host - base < kIdRange ? host - base : kNobody;
}

std::string clean_skip(std::string s) {
  while (s.starts_with('/')) s.erase(0, 1);
  while (s.ends_with('/')) s.pop_back();
  return s;
}

// ---- COPY sources ----------------------------------------------------------------------------

// A source as written, cleaned and re-rooted at the context (Docker: path.Clean then relative
// to the context's root): "/a//./b/../c" -> {"a", "c"}, "../x" -> {"x"}, "." -> {}.
std::vector<std::string> source_components(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find('/', i);
    if (j == std::string_view::npos) j = s.size();
    std::string_view part = s.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.emplace_back(part);
  }
  return out;
}

bool is_glob(const std::string& c) { return c.find_first_of("*?[\\") != std::string::npos; }

Error open_error(int err, const std::string& rel) {
  switch (err) {
    case EXDEV:
      return Error(
          Code::kInvalidArgument,
          "COPY: " + shown(rel) + " goes through a symlink that leads out of the build context",
          err);
    case ELOOP:
      return Error(Code::kInvalidArgument, "COPY: " + shown(rel) + ": too many levels of symlinks",
                   err);
    case ENOSYS:
    case EPERM:
      return Error(Code::kUnavailable, "openat2 is not available (Linux 5.6 or later needed)", err);
    default:
      return Error::sys("openat2", "COPY: " + shown(rel), err);
  }
}

// `rel` in the context, symlinks followed only while they stay beneath its root.
Result<UniqueFd> open_in_context(int context_fd, const std::string& rel, int flags) {
  int fd = sys_openat2(context_fd, rel.empty() ? "." : rel.c_str(), flags | O_CLOEXEC, kBeneath);
  if (fd < 0) return fail(open_error(errno, rel));
  return UniqueFd(fd);
}

// One path a source names.
struct Match {
  std::string rel;  // in the context ("" for the context itself)
  struct stat st {};
  UniqueFd fd;  // regular files and directories: open for reading
};

// The candidates of one source: its glob components expanded against the directories that
// exist (names starting with '.' match '*' too, as in Docker), in sorted order.
Result<std::vector<std::string>> expand(int context_fd, const std::vector<std::string>& comps) {
  std::vector<std::string> cur = {""};
  for (const std::string& comp : comps) {
    std::vector<std::string> next;
    for (const std::string& base : cur) {
      if (!is_glob(comp)) {
        next.push_back(join(base, comp));
        continue;
      }
      auto dir = open_in_context(context_fd, base, O_RDONLY | O_DIRECTORY);
      if (!dir) {
        int err = dir.error().sys_errno();
        if (err == ENOENT || err == ENOTDIR) continue;
        return fail(std::move(dir.error()));
      }
      auto names = TRY(list_sorted(dir->get(), base));
      for (const std::string& n : names)
        if (::fnmatch(comp.c_str(), n.c_str(), 0) == 0) next.push_back(join(base, n));
    }
    cur = std::move(next);
  }
  return cur;
}

// Every path the sources name, in their order. A source is followed where it is a symlink
// (staying inside the context); one that matches nothing is an error.
Result<std::vector<Match>> resolve_sources(int context_fd, const std::vector<std::string>& sources,
                                           const Limits& limits) {
  if (sources.empty()) return fail(Code::kInvalidArgument, "COPY: no source given");
  std::vector<Match> out;
  for (const std::string& source : sources) {
    auto candidates = TRY(expand(context_fd, source_components(source)));
    size_t found = 0;
    for (std::string& rel : candidates) {
      auto path = open_in_context(context_fd, rel, O_PATH);
      if (!path) {
        int err = path.error().sys_errno();
        if (err == ENOENT || err == ENOTDIR) continue;
        return fail(std::move(path.error()));
      }
      Match m;
      m.rel = std::move(rel);
      if (::fstat(path->get(), &m.st) != 0) return fail_sys("fstat", "COPY: " + shown(m.rel));
      if (S_ISREG(m.st.st_mode) || S_ISDIR(m.st.st_mode)) {
        int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY;
        if (S_ISDIR(m.st.st_mode)) flags |= O_DIRECTORY;
        m.fd = TRY(open_in_context(context_fd, m.rel, flags));
        struct stat now {};
        if (::fstat(m.fd.get(), &now) != 0) return fail_sys("fstat", "COPY: " + shown(m.rel));
        if (now.st_dev != m.st.st_dev || now.st_ino != m.st.st_ino)
          return fail(Code::kConflict, "COPY: " + shown(m.rel) + " changed while it was read");
      } else if (!S_ISFIFO(m.st.st_mode)) {
        continue;  // sockets and devices are not copied
      }
      if (basename(m.rel).starts_with(kWhiteout)) return fail(whiteout_name(m.rel).wrap("COPY"));
      out.push_back(std::move(m));
      ++found;
      if (out.size() > limits.max_entries)
        return fail(Code::kPayloadTooLarge, "COPY: the sources name more than " +
                                                std::to_string(limits.max_entries) +
                                                " paths (images.max_entries in spaced's config)");
    }
    if (found == 0)
      return fail(Code::kInvalidArgument,
                  "COPY: no file matches " + shown(source) + " in the build context");
  }
  return out;
}

// Walks what a match holds below it (a directory's contents); nodes of kinds COPY does not copy
// (sockets, devices) are left out, and a ".wh." name is refused.
Result<void> walk_match(Match& m, const Visit& visit) {
  if (!S_ISDIR(m.st.st_mode)) return {};
  return walk(m.fd.get(), "", 0, [&](Node& n) -> Result<bool> {
    mode_t t = n.st.st_mode & S_IFMT;
    if (t != S_IFREG && t != S_IFDIR && t != S_IFLNK && t != S_IFIFO) return false;
    if (n.name.starts_with(kWhiteout)) return fail(whiteout_name(join(m.rel, n.rel)).wrap("COPY"));
    return visit(n);
  });
}

// The destination, relative to the image's root, and whether it names a directory to copy into
// by its spelling ("/app/", "/app/.", "/").
std::pair<std::string, bool> clean_dest(std::string_view dest) {
  auto comps = source_components(dest);
  std::string out;
  for (const auto& c : comps) out = join(out, c);
  bool into = dest.empty() || dest.ends_with('/') || dest.ends_with("/.") ||
              dest.ends_with("/..") || dest == "." || dest == ".." || out.empty();
  return {out, into};
}

Result<LayerStats> upper(int upper_fd, uint32_t uid_base, const std::set<std::string>& skip,
                         const std::filesystem::path& out_tar, const Limits& limits) {
  std::set<std::string> skipped;
  for (const auto& s : skip) skipped.insert(clean_skip(s));
  Utf8Locale utf8;
  TarWriter w(limits,
              "the step's changes are larger than " + std::to_string(limits.max_layer_bytes) +
                  " bytes (images.max_layer in spaced's config)",
              "the step's changes have more than " + std::to_string(limits.max_entries) +
                  " entries (images.max_entries in spaced's config)");
  TRY_VOID(w.open(out_tar));
  std::map<std::pair<dev_t, ino_t>, std::string> links;  // files with st_nlink > 1, first name
  auto visit = [&](Node& n) -> Result<bool> {
    if (skipped.contains(n.rel)) return false;
    const struct stat& st = n.st;
    Entry e{.name = n.rel,
            .type = st.st_mode & S_IFMT,
            .perm = st.st_mode & 07777,
            .uid = shift_id(st.st_uid, uid_base),
            .gid = shift_id(st.st_gid, uid_base),
            .mtime = st.st_mtim};
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
      std::string dir = n.rel.substr(0, n.rel.size() - n.name.size());  // "" or "a/b/"
      e = Entry{.name = dir + std::string(kWhiteout) + n.name, .perm = 0, .mtime = st.st_mtim};
      TRY_VOID(w.add(e));
      return false;
    }
    if (n.name.starts_with(kWhiteout)) return fail(whiteout_name(n.rel));
    switch (st.st_mode & S_IFMT) {
      case S_IFDIR: {
        if (has_overlay_xattr(n.fd.get(), "redirect"))
          return fail(Code::kUnavailable,
                      shown(n.rel) +
                          ": a renamed directory (overlayfs redirect_dir) cannot be "
                          "made into a layer; mount the build's overlay without it");
        TRY_VOID(w.add(e));
        if (has_overlay_xattr(n.fd.get(), "opaque", "y"))
          TRY_VOID(w.add(Entry{.name = n.rel + "/" + kOpaqueMarker, .mtime = st.st_mtim}));
        return true;
      }
      case S_IFREG: {
        if (has_overlay_xattr(n.fd.get(), "metacopy"))
          return fail(Code::kUnavailable,
                      shown(n.rel) +
                          ": an overlayfs metacopy file (its data is in the lower "
                          "layer) cannot be made into a layer; mount the build's "
                          "overlay without metacopy");
        if (st.st_nlink > 1) {
          auto [it, first] = links.try_emplace({st.st_dev, st.st_ino}, n.rel);
          if (!first) {
            e.hardlink = it->second;
            TRY_VOID(w.add(e));
            return false;
          }
        }
        e.size = static_cast<uint64_t>(st.st_size);
        TRY_VOID(w.add(e, n.fd.get()));
        return false;
      }
      case S_IFLNK:
        e.perm = 0777;
        e.symlink = n.target;
        TRY_VOID(w.add(e));
        return false;
      case S_IFIFO:
        TRY_VOID(w.add(e));
        return false;
      default:
        return false;  // other devices, sockets: not part of an image
    }
  };
  TRY_VOID(walk(upper_fd, "", 0, visit));
  return w.finish();
}

Result<LayerStats> copy(int context_fd, const CopySpec& spec, const std::filesystem::path& out_tar,
                        const Limits& limits) {
  auto matches = TRY(resolve_sources(context_fd, spec.sources, limits));
  auto [dest, into_by_name] = clean_dest(spec.dest);
  const bool into =
      into_by_name || spec.dest_is_dir || spec.sources.size() > 1 || matches.size() > 1;
  Utf8Locale utf8;
  TarWriter w(limits,
              "COPY: the sources are larger than " + std::to_string(limits.max_layer_bytes) +
                  " bytes (images.max_layer in spaced's config)",
              "COPY: the sources have more than " + std::to_string(limits.max_entries) +
                  " entries (images.max_entries in spaced's config)");
  TRY_VOID(w.open(out_tar));

  auto perm_of = [&](const struct stat& st) -> mode_t {
    if (S_ISLNK(st.st_mode)) return 0777;
    return spec.chmod ? static_cast<mode_t>(*spec.chmod & 07777) : st.st_mode & 07777;
  };
  auto entry = [&](std::string name, const struct stat& st) {
    return Entry{.name = std::move(name),
                 .type = st.st_mode & S_IFMT,
                 .perm = perm_of(st),
                 .uid = spec.uid,
                 .gid = spec.gid,
                 .mtime = st.st_mtim,
                 .size = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0};
  };
  // The destination directory itself, once, unless the image has it already (then its
  // metadata stays) or it is the root: from `src` (a single directory source copied to a new
  // path) or, copying into a new directory, 0755 (with --chmod, that mode) and the newest
  // source's time.
  bool dest_done = spec.dest_is_dir || dest.empty();
  auto dest_dir = [&](const struct stat* src) -> Result<void> {
    if (dest_done) return {};
    dest_done = true;
    Entry e{.name = dest,
            .type = S_IFDIR,
            .perm = spec.chmod ? static_cast<mode_t>(*spec.chmod & 07777) : mode_t{0755},
            .uid = spec.uid,
            .gid = spec.gid};
    for (const Match& m : matches)
      if (m.st.st_mtim.tv_sec > e.mtime.tv_sec) e.mtime = m.st.st_mtim;
    if (src) e = entry(dest, *src);
    return w.add(e);
  };

  for (Match& m : matches) {
    if (S_ISDIR(m.st.st_mode)) {
      TRY_VOID(dest_dir(into ? nullptr : &m.st));
      TRY_VOID(walk_match(m, [&](Node& n) -> Result<bool> {
        Entry e = entry(join(dest, n.rel), n.st);
        if (S_ISLNK(n.st.st_mode)) e.symlink = n.target;
        TRY_VOID(w.add(e, n.fd.get()));
        return true;
      }));
      continue;
    }
    std::string name = dest;
    if (into) {
      TRY_VOID(dest_dir(nullptr));
      name = join(dest, basename(m.rel));
    }
    TRY_VOID(w.add(entry(name, m.st), m.fd.get()));
  }
  return w.finish();
}

Result<std::string> digest(int context_fd, const std::vector<std::string>& sources) {
  auto matches = TRY(resolve_sources(context_fd, sources, kDefaultLimits));
  Sha256 h;
  auto buf = std::make_unique<char[]>(kBlock);
  // One line per path: NUL-separated fields, so no name can pass for another.
  auto describe = [&](const std::string& rel, const struct stat& st, int fd,
                      const std::string& target) -> Result<void> {
    std::string line = rel;
    line += '\0';
    line += S_ISDIR(st.st_mode)    ? 'd'
            : S_ISLNK(st.st_mode)  ? 'l'
            : S_ISFIFO(st.st_mode) ? 'p'
                                   : 'f';
    line += '\0' + std::to_string(st.st_mode & 07777) + '\0';
    if (S_ISREG(st.st_mode)) {
      Sha256 content;
      uint64_t size = 0;
      for (;;) {
        ssize_t n = ::read(fd, buf.get(), kBlock);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail_sys("read", "COPY: " + shown(rel));
        if (n == 0) break;
        content.update(buf.get(), static_cast<size_t>(n));
        size += static_cast<uint64_t>(n);
      }
      line += std::to_string(size) + '\0' + content.digest();
    }
    line += '\0' + target + '\n';
    h.update(line);
    return {};
  };
  for (Match& m : matches) {
    h.update("source\0", 7);
    TRY_VOID(describe(m.rel, m.st, m.fd.get(), ""));
    TRY_VOID(walk_match(m, [&](Node& n) -> Result<bool> {
      TRY_VOID(describe(n.rel, n.st, n.fd.get(), n.target));
      return true;
    }));
  }
  return h.digest();
}

}  // namespace layer_writer
}  // namespace

Result<LayerStats> upper_layer(int upper_fd, uint32_t uid_base, const std::set<std::string>& skip,
                               const std::filesystem::path& out_tar, const Limits& limits) {
  return layer_writer::upper(upper_fd, uid_base, skip, out_tar, limits);
}

Result<LayerStats> copy_layer(int context_fd, const CopySpec& spec,
                              const std::filesystem::path& out_tar, const Limits& limits) {
  return layer_writer::copy(context_fd, spec, out_tar, limits);
}

Result<std::string> copy_sources_digest(int context_fd, const std::vector<std::string>& sources) {
  return layer_writer::digest(context_fd, sources);
}

}  // namespace space::image
