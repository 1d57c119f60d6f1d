// Writing a layer's entries into the image tree (see tree.h): every path resolved beneath the
// root fd by the kernel, the last component never followed.
#include "image/tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ranges>

#include "common/openat2.h"
#include "image/layer.h"

namespace space::image::detail {

namespace {

constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

Error resolve_error(int err, const std::string& rel) {
  switch (err) {
    case EXDEV:
      return Error(Code::kInvalidArgument,
                   "\"" + rel + "\" goes through a symlink that leads out of the image's root",
                   err);
    case ELOOP:
      return Error(Code::kInvalidArgument, "\"" + rel + "\": too many levels of symlinks", err);
    case ENOTDIR:
      return Error(Code::kInvalidArgument, "\"" + rel + "\": a parent is not a directory", err);
    case ENOENT:
      return Error(Code::kInvalidArgument, "\"" + rel + "\": no such directory", err);
    case ENAMETOOLONG:
      return Error(Code::kInvalidArgument, "\"" + rel + "\": name too long", err);
    case ENOSYS:
    case EPERM:
      return Error(Code::kUnavailable, "openat2 is not available (Linux 5.6 or later needed)", err);
    default:
      return Error::sys("openat2", "\"" + rel + "\"", err);
  }
}

timespec times_of(const Meta& m) { return timespec{m.mtime_s, m.mtime_ns}; }

// The names in a directory (not "." or "..").
Result<std::vector<std::string>> list_dir(int dirfd) {
  int fd = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return fail_sys("fcntl", "F_DUPFD_CLOEXEC");
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int err = errno;
    ::close(fd);
    return fail_sys("fdopendir", "", err);
  }
  ::rewinddir(d);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return fail_sys("readdir", "", err);
  return names;
}

}  // namespace

std::pair<std::string, std::string> split_path(const std::string& rel) {
  auto slash = rel.rfind('/');
  if (slash == std::string::npos) return {"", rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

Result<void> remove_tree_at(int dirfd, const std::string& name, size_t depth) {
  if (depth > kMaxDepth)
    return fail(Code::kInvalidArgument,
                "the tree is nested more than " + std::to_string(kMaxDepth) + " levels deep");
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return fail_sys("fstatat", "\"" + name + "\"");
  }
  if (S_ISDIR(st.st_mode)) {
    UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return fail_sys("openat", "\"" + name + "\"");
    auto names = TRY(list_dir(sub.get()));
    for (const auto& n : names) TRY_VOID(remove_tree_at(sub.get(), n, depth + 1));
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return fail_sys("rmdir", "\"" + name + "\"");
    return {};
  }
  if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT)
    return fail_sys("unlink", "\"" + name + "\"");
  return {};
}

void Tree::begin_layer() {
  made_.clear();
  parents_.clear();
  dir_times_.clear();
}

void Tree::record(const std::string& rel) {
  made_.insert(rel);
  for (std::string p = split_path(rel).first; !p.empty(); p = split_path(p).first)
    if (!parents_.insert(p).second) break;
}

Result<UniqueFd> Tree::open_dir(const std::string& rel, bool create) {
  if (rel.empty()) {
    int fd = ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return fail_sys("fcntl", "F_DUPFD_CLOEXEC");
    return UniqueFd(fd);
  }
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  int fd = sys_openat2(root_fd_, rel.c_str(), kFlags, kResolve);
  if (fd >= 0) return UniqueFd(fd);
  if (errno != ENOENT || !create) return fail(resolve_error(errno, rel));
  // Make the missing components one at a time, each resolved from the root again.
  UniqueFd cur = TRY(open_dir("", false));
  std::string prefix;
  size_t i = 0;
  while (i < rel.size()) {
    size_t j = rel.find('/', i);
    if (j == std::string::npos) j = rel.size();
    std::string comp = rel.substr(i, j - i);
    i = j + 1;
    prefix = join(prefix, comp);
    fd = sys_openat2(root_fd_, prefix.c_str(), kFlags, kResolve);
    if (fd < 0 && errno == ENOENT) {
      if (::mkdirat(cur.get(), comp.c_str(), 0755) != 0 && errno != EEXIST)
        return fail_sys("mkdirat", "\"" + prefix + "\"");
      record(prefix);
      fd = sys_openat2(root_fd_, prefix.c_str(), kFlags, kResolve);
    }
    if (fd < 0) return fail(resolve_error(errno, prefix));
    cur = UniqueFd(fd);
  }
  return cur;
}

// Makes way for an entry at `name`: removes what is there, except a directory when keep_dir.
Result<void> Tree::clear_for(int dirfd, const std::string& name, bool keep_dir) {
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return fail_sys("fstatat", "\"" + name + "\"");
  }
  if (keep_dir && S_ISDIR(st.st_mode)) return {};
  return remove_tree_at(dirfd, name);
}

Result<void> Tree::set_meta_at(int dirfd, const std::string& name, const Meta& m, bool symlink) {
  if (chown_ && ::fchownat(dirfd, name.c_str(), m.uid, m.gid, AT_SYMLINK_NOFOLLOW) != 0)
    return fail_sys("fchownat", "\"" + name + "\"");
  // The entry was just made by this process and is not a symlink: fchmodat follows nothing.
  if (!symlink && ::fchmodat(dirfd, name.c_str(), m.mode, 0) != 0)
    return fail_sys("fchmodat", "\"" + name + "\"");
  timespec ts[2] = {times_of(m), times_of(m)};
  if (::utimensat(dirfd, name.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
    return fail_sys("utimensat", "\"" + name + "\"");
  return {};
}

Result<UniqueFd> Tree::create_file(const std::string& rel, const Meta&) {
  auto [parent, name] = split_path(rel);
  UniqueFd dir = TRY(open_dir(parent, true));
  TRY_VOID(clear_for(dir.get(), name, false));
  UniqueFd fd(::openat(dir.get(), name.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return fail_sys("openat", "\"" + rel + "\"");
  record(rel);
  return fd;
}

Result<void> Tree::finish_file(int fd, const Meta& m) {
  // chown first: it clears setuid/setgid bits that fchmod sets.
  if (chown_ && ::fchown(fd, m.uid, m.gid) != 0) return fail_sys("fchown");
  if (::fchmod(fd, m.mode) != 0) return fail_sys("fchmod");
  timespec ts[2] = {times_of(m), times_of(m)};
  if (::futimens(fd, ts) != 0) return fail_sys("futimens");
  return {};
}

Result<void> Tree::make_dir(const std::string& rel, const Meta& m) {
  auto [parent, name] = split_path(rel);
  UniqueFd dir = TRY(open_dir(parent, true));
  TRY_VOID(clear_for(dir.get(), name, true));
  if (::mkdirat(dir.get(), name.c_str(), 0700) != 0 && errno != EEXIST)
    return fail_sys("mkdirat", "\"" + rel + "\"");
  UniqueFd fd(::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_sys("openat", "\"" + rel + "\"");
  if (chown_ && ::fchown(fd.get(), m.uid, m.gid) != 0) return fail_sys("fchown", "\"" + rel + "\"");
  if (::fchmod(fd.get(), m.mode) != 0) return fail_sys("fchmod", "\"" + rel + "\"");
  record(rel);
  dir_times_.emplace_back(rel, m);
  return {};
}

Result<void> Tree::make_symlink(const std::string& rel, const std::string& target, const Meta& m) {
  auto [parent, name] = split_path(rel);
  UniqueFd dir = TRY(open_dir(parent, true));
  TRY_VOID(clear_for(dir.get(), name, false));
  if (::symlinkat(target.c_str(), dir.get(), name.c_str()) != 0)
    return fail_sys("symlinkat", "\"" + rel + "\"");
  record(rel);
  return set_meta_at(dir.get(), name, m, true);
}

Result<void> Tree::make_fifo(const std::string& rel, const Meta& m) {
  auto [parent, name] = split_path(rel);
  UniqueFd dir = TRY(open_dir(parent, true));
  TRY_VOID(clear_for(dir.get(), name, false));
  if (::mkfifoat(dir.get(), name.c_str(), 0600) != 0)
    return fail_sys("mkfifoat", "\"" + rel + "\"");
  record(rel);
  return set_meta_at(dir.get(), name, m, false);
}

Result<void> Tree::make_hardlink(const std::string& rel, const std::string& target) {
  auto [tparent, tname] = split_path(target);
  auto tdir = open_dir(tparent, false);
  if (!tdir) {
    if (tdir.error().sys_errno() == ENOENT)
      return fail(Code::kInvalidArgument, "hard link to a missing path \"" + target + "\"");
    return fail(std::move(tdir.error()).wrap("hard link target"));
  }
  struct stat st {};
  if (::fstatat(tdir->get(), tname.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT)
      return fail(Code::kInvalidArgument, "hard link to a missing path \"" + target + "\"");
    return fail_sys("fstatat", "\"" + target + "\"");
  }
  if (!S_ISREG(st.st_mode))
    return fail(Code::kInvalidArgument,
                "hard link to \"" + target + "\", which is not a regular file");
  if (target == rel) return {};
  auto [parent, name] = split_path(rel);
  UniqueFd dir = TRY(open_dir(parent, true));
  TRY_VOID(clear_for(dir.get(), name, false));
  if (::linkat(tdir->get(), tname.c_str(), dir.get(), name.c_str(), 0) != 0) {
    if (errno == ENOENT)
      return fail(Code::kInvalidArgument, "hard link to a missing path \"" + target + "\"");
    return fail_sys("linkat", "\"" + rel + "\"");
  }
  record(rel);
  return {};
}

Result<void> Tree::whiteout(const std::string& dir, const std::string& name) {
  if (made_.contains(join(dir, name))) return {};  // this layer's own entry stays
  auto fd = open_dir(dir, false);
  if (!fd) {
    if (fd.error().sys_errno() == ENOENT) return {};
    return fail(std::move(fd.error()));
  }
  return remove_tree_at(fd->get(), name);
}

Result<void> Tree::opaque(const std::string& dir) {
  auto fd = open_dir(dir, false);
  if (!fd) {
    if (fd.error().sys_errno() == ENOENT) return {};
    return fail(std::move(fd.error()));
  }
  return prune(fd->get(), dir, 0);
}

Result<void> Tree::prune(int dirfd, const std::string& rel, size_t depth) {
  if (depth > kMaxDepth)
    return fail(Code::kInvalidArgument,
                "the tree is nested more than " + std::to_string(kMaxDepth) + " levels deep");
  auto names = TRY(list_dir(dirfd));
  for (const auto& n : names) {
    std::string child = join(rel, n);
    if (!made_.contains(child) && !parents_.contains(child)) {
      TRY_VOID(remove_tree_at(dirfd, n, depth + 1));
      continue;
    }
    struct stat st {};
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return fail_sys("fstatat", "\"" + child + "\"");
    if (!S_ISDIR(st.st_mode)) continue;
    UniqueFd sub(::openat(dirfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return fail_sys("openat", "\"" + child + "\"");
    TRY_VOID(prune(sub.get(), child, depth + 1));
  }
  return {};
}

void Tree::finish_layer() {
  for (const auto& [rel, m] : std::views::reverse(dir_times_)) {
    auto fd = open_dir(rel, false);
    if (!fd) continue;  // removed by a later entry of the layer
    timespec ts[2] = {times_of(m), times_of(m)};
    (void)::futimens(fd->get(), ts);
  }
}

}  // namespace space::image::detail
