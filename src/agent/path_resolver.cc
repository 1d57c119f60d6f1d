// Path resolution inside a root fd: openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), with a
// userspace component walk as the fallback where openat2 is unavailable.
#include "agent/path_resolver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <deque>
#include <vector>

#include "common/openat2.h"

namespace space::agent {
namespace {

constexpr int kMaxSymlinks = 40;  // as the kernel's MAXSYMLINKS

std::string quote_path(std::string_view p) { return "\"" + std::string(p) + "\""; }

void split_components(std::string_view path, std::deque<std::string>& out, bool front) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) parts.emplace_back(path.substr(i, j - i));
    i = j + 1;
  }
  if (front)
    out.insert(out.begin(), parts.begin(), parts.end());
  else
    out.insert(out.end(), parts.begin(), parts.end());
}

}  // namespace

Result<void> check_sandbox_path(std::string_view path) {
  if (path.empty() || path[0] != '/')
    return fail(Code::kInvalidArgument, "path " + quote_path(path) + " is not absolute", EINVAL);
  if (path.find('\0') != std::string_view::npos)
    return fail(Code::kInvalidArgument, "path contains a NUL byte", EINVAL);
  if (path.size() > kMaxPathBytes)
    return fail(Code::kInvalidArgument,
                "path is longer than " + std::to_string(kMaxPathBytes) + " bytes", ENAMETOOLONG);
  return {};
}

Result<std::pair<std::string, std::string>> split_parent(std::string_view path) {
  TRY_VOID(check_sandbox_path(path));
  std::string_view p = path;
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  if (p == "/") return fail(Code::kInvalidArgument, "the root directory has no parent", EINVAL);
  size_t slash = p.rfind('/');
  std::string name(p.substr(slash + 1));
  if (name == "." || name == "..")
    return fail(Code::kInvalidArgument, "path " + quote_path(path) + " ends in \"" + name + "\"",
                EINVAL);
  std::string parent(slash == 0 ? std::string_view("/") : p.substr(0, slash));
  return std::pair{std::move(parent), std::move(name)};
}

Result<UniqueFd> PathResolver::open(std::string_view path, int flags, mode_t mode) const {
  TRY_VOID(check_sandbox_path(path));
  if (mode_ != ResolveMode::kUserspace) {
    auto r = open_openat2(path, flags, mode);
    if (r || r.error().sys_errno() != ENOSYS || mode_ == ResolveMode::kOpenat2) return r;
    mode_ = ResolveMode::kUserspace;  // remembered: this kernel or policy has no openat2
  }
  return open_userspace(path, flags, mode);
}

Result<UniqueFd> PathResolver::open_openat2(std::string_view path, int flags, mode_t mode) const {
  const mode_t m = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  std::string p(path);
  int fd;
  do {
    fd = sys_openat2(root_fd_, p.c_str(), flags | O_CLOEXEC,
                     RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, m);
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  if (fd < 0) return fail_sys("openat2", quote_path(path));
  return UniqueFd(fd);
}

// The fallback walk. `dirs` is the chain of directories from the root to the current one, so
// ".." pops (and never goes above the root) and an absolute symlink target restarts at the root.
Result<UniqueFd> PathResolver::open_userspace(std::string_view path, int flags, mode_t mode) const {
  std::vector<UniqueFd> dirs;
  {
    int r = ::openat(root_fd_, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r < 0) return fail_sys("open", "root");
    dirs.emplace_back(r);
  }
  std::deque<std::string> comps;
  split_components(path, comps, false);
  int links = 0;
  const bool follow_final = !(flags & O_NOFOLLOW);
  while (!comps.empty()) {
    std::string name = std::move(comps.front());
    comps.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (dirs.size() > 1) dirs.pop_back();
      continue;
    }
    int cur = dirs.back().get();
    const bool last = comps.empty();
    struct stat st;
    bool exists = ::fstatat(cur, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!exists && errno != ENOENT) return fail_sys("stat", quote_path(path));
    if (exists && S_ISLNK(st.st_mode) && (!last || follow_final)) {
      if (++links > kMaxSymlinks) return fail_sys("open", quote_path(path), ELOOP);
      char target[kMaxPathBytes + 1];
      ssize_t n = ::readlinkat(cur, name.c_str(), target, sizeof(target));
      if (n < 0) return fail_sys("readlink", quote_path(path));
      if (n == 0 || static_cast<size_t>(n) > kMaxPathBytes)
        return fail_sys("readlink", quote_path(path), ENAMETOOLONG);
      std::string_view t(target, static_cast<size_t>(n));
      if (t[0] == '/') dirs.resize(1);
      split_components(t, comps, true);
      if (comps.empty()) comps.emplace_back(".");  // a link to "/" names the root itself
      continue;
    }
    if (last) {
      int fd = ::openat(cur, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
      if (fd < 0) return fail_sys("open", quote_path(path));
      return UniqueFd(fd);
    }
    if (!exists) return fail_sys("open", quote_path(path), ENOENT);
    if (!S_ISDIR(st.st_mode)) return fail_sys("open", quote_path(path), ENOTDIR);
    int fd = ::openat(cur, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return fail_sys("open", quote_path(path));
    dirs.emplace_back(fd);
  }
  // The path named a directory on the chain itself ("/", "/a/..").
  if (flags & O_CREAT && !(flags & O_DIRECTORY)) return fail_sys("open", quote_path(path), EISDIR);
  int fd = ::openat(dirs.back().get(), ".", (flags & ~(O_CREAT | O_EXCL)) | O_CLOEXEC);
  if (fd < 0) return fail_sys("open", quote_path(path));
  return UniqueFd(fd);
}

Result<ParentRef> PathResolver::open_parent(std::string_view path) const {
  auto [parent, name] = TRY(split_parent(path));
  UniqueFd dir = TRY(open(parent, O_PATH | O_DIRECTORY));
  return ParentRef{std::move(dir), std::move(name)};
}

Result<ParentRef> PathResolver::open_parent_creating(std::string_view path, mode_t dir_mode) const {
  auto [parent, name] = TRY(split_parent(path));
  // Walk down from the root, creating each missing directory with mkdirat on an fd that was
  // itself resolved inside the root; existing components (including symlinks) are resolved by
  // open(), so they stay inside too.
  std::string prefix;
  std::deque<std::string> comps;
  split_components(parent, comps, false);
  for (const std::string& c : comps) {
    std::string next = prefix + "/" + c;
    auto r = open(next, O_PATH | O_DIRECTORY);
    if (!r) {
      if (r.error().sys_errno() != ENOENT) return std::unexpected(std::move(r.error()));
      UniqueFd base = TRY(open(prefix.empty() ? "/" : prefix, O_PATH | O_DIRECTORY));
      if (c == "." || c == "..") return std::unexpected(std::move(r.error()));
      if (::mkdirat(base.get(), c.c_str(), dir_mode) < 0 && errno != EEXIST)
        return fail_sys("mkdir", quote_path(next));
    }
    prefix = std::move(next);
  }
  UniqueFd dir = TRY(open(parent, O_PATH | O_DIRECTORY));
  return ParentRef{std::move(dir), std::move(name)};
}

}  // namespace space::agent
