// File-system and encoding helpers of the snapshot store. The trees the store reads belong to
// untrusted sandboxes, so every open here is relative to a directory fd and never follows a
// symlink; xattrs of inodes that cannot be opened for reading (symlinks, whiteouts, fifos) are
// reached through the O_PATH fd's /proc/self/fd entry, which names the inode itself.
#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/openat2.h"
#include "snapshot/internal.h"

namespace space::snapshot::detail {

bool g_force_component_walk = false;

namespace {

// XATTR_LIST_MAX and XATTR_SIZE_MAX of the kernel.
constexpr size_t kXattrListMax = 65536;
constexpr size_t kXattrSizeMax = 65536;

std::vector<std::string> split_path(const std::string& rel) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t slash = rel.find('/', start);
    if (slash == std::string::npos) slash = rel.size();
    parts.push_back(rel.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

Result<UniqueFd> walk_components(int root, const std::string& rel, int flags) {
  std::vector<std::string> parts = split_path(rel);
  UniqueFd cur;
  int at = root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    int f =
        last ? (flags | O_NOFOLLOW | O_CLOEXEC) : (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = ::openat(at, parts[i].c_str(), f);
    if (fd < 0) return fail_sys("openat", "\"" + rel + "\"");
    cur.reset(fd);
    at = cur.get();
  }
  return cur;
}

}  // namespace

Result<UniqueFd> open_beneath(int root, const std::string& rel, int flags) {
  if (rel.empty()) {
    int fd = ::openat(root, ".", flags | O_CLOEXEC);
    if (fd < 0) return fail_sys("openat", "\".\"");
    return UniqueFd(fd);
  }
  if (!g_force_component_walk) {
    int fd = sys_openat2(
        root, rel.c_str(), flags | O_NOFOLLOW | O_CLOEXEC,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != ENOSYS && errno != EPERM) return fail_sys("openat2", "\"" + rel + "\"");
    // ENOSYS: an older kernel; EPERM: a seccomp policy that blocks openat2.
  }
  return walk_components(root, rel, flags);
}

std::string proc_fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

bool kept_xattr(std::string_view name) {
  return name.starts_with("user.") || name.starts_with("trusted.") ||
         name == "security.capability" || name == "system.posix_acl_access" ||
         name == "system.posix_acl_default";
}

// Calls `get` (a listxattr or getxattr) with a buffer of the size it reports, so the common
// case (no xattrs) allocates nothing; a value that grows in between gets the kernel's maximum.
template <class Get>
Result<std::optional<std::string>> fetch_xattr(Get get, size_t max, std::string_view what) {
  ssize_t n = get(nullptr, 0);
  for (int attempt = 0;; ++attempt) {
    if (n < 0) {
      if (errno == ENOTSUP || errno == ENODATA) return std::nullopt;  // none, or just removed
      return fail_sys(what);
    }
    std::string buf(attempt == 0 ? static_cast<size_t>(n) : max, '\0');
    if (buf.empty()) return buf;
    n = get(buf.data(), buf.size());
    if (n >= 0) {
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
    if (errno != ERANGE || attempt > 0) return fail_sys(what);
    n = 0;
  }
}

Result<std::map<std::string, std::string>> read_xattrs(int fd, bool o_path) {
  std::map<std::string, std::string> out;
  const std::string proc = o_path ? proc_fd_path(fd) : std::string();
  auto names = TRY(fetch_xattr(
      [&](char* buf, size_t size) {
        return o_path ? ::listxattr(proc.c_str(), buf, size) : ::flistxattr(fd, buf, size);
      },
      kXattrListMax, "listxattr"));
  if (!names) return out;
  for (size_t pos = 0; pos < names->size();) {
    size_t end = names->find('\0', pos);
    if (end == std::string::npos) end = names->size();
    std::string name = names->substr(pos, end - pos);
    pos = end + 1;
    if (name.empty() || !kept_xattr(name)) continue;
    auto value = TRY(fetch_xattr(
        [&](char* buf, size_t size) {
          return o_path ? ::getxattr(proc.c_str(), name.c_str(), buf, size)
                        : ::fgetxattr(fd, name.c_str(), buf, size);
        },
        kXattrSizeMax, "getxattr " + name));
    if (value) out[name] = std::move(*value);
  }
  return out;
}

Result<void> write_xattrs(int fd, bool o_path, const std::map<std::string, std::string>& xattrs) {
  const std::string proc = o_path ? proc_fd_path(fd) : std::string();
  for (const auto& [name, value] : xattrs) {
    int r = o_path ? ::setxattr(proc.c_str(), name.c_str(), value.data(), value.size(), 0)
                   : ::fsetxattr(fd, name.c_str(), value.data(), value.size(), 0);
    if (r < 0) return fail_sys("setxattr", name);
  }
  return {};
}

Result<void> write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return fail_sys("write");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

Result<std::string> read_bounded(int fd, size_t limit) {
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0 && static_cast<uint64_t>(st.st_size) <= limit)
    out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      return fail_sys("read");
    }
    if (r == 0) break;
    if (out.size() + static_cast<size_t>(r) > limit)
      return fail(Code::kProtocol, "larger than " + std::to_string(limit) + " bytes");
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

Result<void> fsync_fd(int fd, std::string_view what) {
  if (::fsync(fd) < 0) return fail_sys("fsync", what);
  return {};
}

Result<std::vector<std::string>> list_dir(int dir_fd) {
  int dup = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return fail_sys("openat", "\".\"");
  DIR* d = ::fdopendir(dup);
  if (!d) {
    int err = errno;
    ::close(dup);
    return fail_sys("fdopendir", {}, err);
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* de = ::readdir(d)) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0)
      names.emplace_back(de->d_name);
    errno = 0;
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return fail_sys("readdir", {}, err);
  return names;
}

std::string random_suffix() {
  uint8_t b[8];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t r = ::getrandom(b + got, sizeof b - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      // getrandom cannot fail otherwise on a kernel that has it; fall back to something unique.
      uint64_t v = static_cast<uint64_t>(::getpid()) << 32 ^ static_cast<uint64_t>(::gettid());
      std::memcpy(b, &v, sizeof b);
      break;
    }
    got += static_cast<size_t>(r);
  }
  return to_hex(b, sizeof b);
}

Result<void> check_path(const std::string& path, const StoreOptions& options) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kProtocol, "path \"" + path.substr(0, 200) + "\" " + std::string(why));
  };
  if (path.empty()) return {};  // the root
  if (path.size() > options.max_path)
    return bad("is longer than " + std::to_string(options.max_path) + " bytes");
  if (path.find('\0') != std::string::npos) return bad("contains NUL");
  size_t depth = 0;
  for (const std::string& c : split_path(path)) {
    if (c.empty()) return bad("has an empty component (absolute, or '//')");
    if (c == "." || c == "..") return bad("has a '.' or '..' component");
    if (c.size() > 255) return bad("has a component longer than 255 bytes");
    ++depth;
  }
  if (depth > options.max_depth)
    return bad("is deeper than " + std::to_string(options.max_depth) + " components");
  return {};
}

size_t path_depth(const std::string& path) {
  if (path.empty()) return 0;
  size_t d = 1;
  for (char c : path) d += c == '/';
  return d;
}

std::string parent_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool is_chunk_id(std::string_view s) { return s.size() == 64 && is_lower_hex(s); }

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<uint8_t>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

int64_t to_ns(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct timespec from_ns(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1'000'000'000;
    ts.tv_sec -= 1;
  }
  return ts;
}

}  // namespace space::snapshot::detail
