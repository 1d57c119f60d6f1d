// File operations inside the sandbox root; see file_ops.h.
#include "agent/file_ops.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "agent/response.h"

namespace space::agent {
namespace {

std::string quoted(std::string_view p) { return "\"" + std::string(p) + "\""; }

const char* type_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

// Empties and removes `name` under dir_fd, descending at most `depth` levels.
Result<void> remove_tree(int dir_fd, const std::string& name, std::string_view shown,
                         size_t depth) {
  if (::unlinkat(dir_fd, name.c_str(), 0) == 0) return {};
  int unlink_err = errno;
  if (unlink_err != EISDIR && unlink_err != EPERM) return fail_sys("unlink", quoted(shown));
  if (depth == 0) return fail_sys("remove", quoted(shown) + ": tree too deep", ELOOP);
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOTDIR) return fail_sys("unlink", quoted(shown), unlink_err);
    return fail_sys("open", quoted(shown), e);
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    int e = errno;
    ::close(fd);
    return fail_sys("opendir", quoted(shown), e);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> guard(d, ::closedir);
  // Collect names first: unlinking while iterating may skip entries.
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    names.emplace_back(n);
  }
  for (const std::string& n : names)
    TRY_VOID(remove_tree(::dirfd(d), n, std::string(shown) + "/" + n, depth - 1));
  guard.reset();
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) < 0) return fail_sys("rmdir", quoted(shown));
  return {};
}

}  // namespace

nlohmann::json stat_json(const struct stat& st, int dir, const char* name) {
  nlohmann::json j = {
      {"type", type_name(st.st_mode)},
      {"mode", st.st_mode & 07777},
      {"size", static_cast<uint64_t>(st.st_size)},
      {"uid", st.st_uid},
      {"gid", st.st_gid},
      {"mtime", static_cast<int64_t>(st.st_mtim.tv_sec)},
      {"mtime_ns", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec}};
  if (S_ISLNK(st.st_mode)) {
    char buf[kMaxPathBytes + 1];
    ssize_t n = ::readlinkat(dir, name, buf, sizeof(buf));
    if (n >= 0) j["target"] = std::string(buf, static_cast<size_t>(n));
  }
  return j;
}

Result<nlohmann::json> stat_path(const PathResolver& r, std::string_view path) {
  auto split = split_parent(path);
  struct stat st;
  if (!split) {
    // "/" or a path ending in "." / "..": stat the directory it names.
    if (split.error().sys_errno() != EINVAL) return std::unexpected(std::move(split.error()));
    TRY_VOID(check_sandbox_path(path));
    UniqueFd fd = TRY(r.open(path, O_PATH | O_DIRECTORY));
    if (::fstat(fd.get(), &st) < 0) return fail_sys("stat", quoted(path));
    return stat_json(st, fd.get(), "");
  }
  ParentRef p = TRY(r.open_parent(path));
  if (::fstatat(p.dir.get(), p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0)
    return fail_sys("stat", quoted(path));
  return stat_json(st, p.dir.get(), p.name.c_str());
}

Result<void> make_dir(const PathResolver& r, std::string_view path, mode_t mode, bool parents) {
  mode &= 07777;
  ParentRef p = parents ? TRY(r.open_parent_creating(path, 0755)) : TRY(r.open_parent(path));
  if (::mkdirat(p.dir.get(), p.name.c_str(), mode) == 0) return {};
  int e = errno;
  if (e == EEXIST && parents) {
    struct stat st;
    if (::fstatat(p.dir.get(), p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode))
      return {};
  }
  return fail_sys("mkdir", quoted(path), e);
}

Result<void> make_symlink(const PathResolver& r, std::string_view path, std::string_view target) {
  if (target.empty() || target.size() > kMaxPathBytes ||
      target.find('\0') != std::string_view::npos)
    return fail(Code::kInvalidArgument,
                "symlink target must be 1.." + std::to_string(kMaxPathBytes) + " bytes without NUL",
                EINVAL);
  ParentRef p = TRY(r.open_parent(path));
  if (::symlinkat(std::string(target).c_str(), p.dir.get(), p.name.c_str()) < 0)
    return fail_sys("symlink", quoted(path));
  return {};
}

Result<void> remove_path(const PathResolver& r, std::string_view path, bool recursive) {
  ParentRef p = TRY(r.open_parent(path));
  if (!recursive) {
    if (::unlinkat(p.dir.get(), p.name.c_str(), 0) == 0) return {};
    int unlink_err = errno;
    if (unlink_err != EISDIR && unlink_err != EPERM) return fail_sys("unlink", quoted(path));
    if (::unlinkat(p.dir.get(), p.name.c_str(), AT_REMOVEDIR) < 0) {
      if (errno == ENOTDIR) return fail_sys("unlink", quoted(path), unlink_err);
      return fail_sys("rmdir", quoted(path));
    }
    return {};
  }
  // unlinkat works on the parent's O_PATH fd; the tree below is opened O_NOFOLLOW.
  return remove_tree(p.dir.get(), p.name, path, kMaxRemoveDepth);
}

Result<UniqueFd> open_for_read(const PathResolver& r, std::string_view path) {
  UniqueFd fd = TRY(r.open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  struct stat st;
  if (::fstat(fd.get(), &st) < 0) return fail_sys("stat", quoted(path));
  if (S_ISDIR(st.st_mode)) return fail_sys("read", quoted(path), EISDIR);
  if (!S_ISREG(st.st_mode))
    return fail(Code::kInvalidArgument, "read " + quoted(path) + ": not a regular file", EINVAL);
  return fd;
}

Result<UniqueFd> open_for_write(const PathResolver& r, std::string_view path, mode_t mode,
                                bool parents) {
  mode &= 07777;
  ParentRef p = parents ? TRY(r.open_parent_creating(path, 0755)) : TRY(r.open_parent(path));
  // The parent is an O_PATH fd; openat accepts it as a directory fd. O_NONBLOCK: opening a FIFO
  // for writing must not wait for a reader (it is refused below anyway).
  int fd = ::openat(p.dir.get(), p.name.c_str(),
                    O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == ELOOP)
      return fail(Code::kInvalidArgument,
                  "write " + quoted(path) + ": the last component is a symlink", ELOOP);
    return fail_sys("open", quoted(path));
  }
  UniqueFd f(fd);
  struct stat st;
  if (::fstat(f.get(), &st) < 0) return fail_sys("stat", quoted(path));
  if (!S_ISREG(st.st_mode))
    return fail(Code::kInvalidArgument, "write " + quoted(path) + ": not a regular file", EINVAL);
  if (::ftruncate(f.get(), 0) < 0) return fail_sys("truncate", quoted(path));
  int fl = ::fcntl(f.get(), F_GETFL);
  if (fl >= 0) ::fcntl(f.get(), F_SETFL, fl & ~O_NONBLOCK);
  return f;
}

Result<Walker> Walker::open(const PathResolver& r, std::string_view path, size_t depth) {
  UniqueFd fd = TRY(r.open(path, O_RDONLY | O_DIRECTORY));
  Walker w;
  w.depth_ = std::clamp<size_t>(depth, 1, kMaxWalkDepth);
  w.push(fd.release(), "");
  if (w.stack_.empty()) return fail_sys("opendir", quoted(path));
  return w;
}

Walker::~Walker() {
  for (Level& l : stack_) ::closedir(l.dir);
}

void Walker::push(int fd, std::string prefix) {
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    truncated_ = true;
    return;
  }
  stack_.push_back(Level{d, std::move(prefix)});
}

bool Walker::next(std::string& out, size_t budget) {
  while (!stack_.empty() && out.size() < budget) {
    if (count_ >= kMaxWalkEntries) {
      truncated_ = true;
      for (Level& l : stack_) ::closedir(l.dir);
      stack_.clear();
      break;
    }
    Level& top = stack_.back();
    errno = 0;
    dirent* e = ::readdir(top.dir);
    if (e == nullptr) {
      if (errno != 0) truncated_ = true;
      ::closedir(top.dir);
      stack_.pop_back();
      continue;
    }
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    int dfd = ::dirfd(top.dir);
    struct stat st;
    if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;  // raced away
    std::string rel = top.prefix + std::string(n);
    nlohmann::json j = stat_json(st, dfd, e->d_name);
    j["path"] = rel;
    out += dump_json(j);
    out += '\n';
    ++count_;
    if (S_ISDIR(st.st_mode)) {
      if (stack_.size() >= depth_) {
        if (depth_ == kMaxWalkDepth) truncated_ = true;  // a requested depth is no truncation
        continue;
      }
      int fd = ::openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) {
        truncated_ = true;
        continue;
      }
      push(fd, rel + "/");  // invalidates `top`
    }
  }
  return !stack_.empty();
}

}  // namespace space::agent
