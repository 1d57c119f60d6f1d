// The POSIX object store (posix_store.h): keys as files beneath a root directory fd, never
// following a symlink, every write a rename of a synced temporary file.
#include "cluster/posix_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/fd.h"

namespace space::cluster {
namespace {

constexpr mode_t kPosixDirMode = 0700;
constexpr mode_t kPosixFileMode = 0600;

std::vector<std::string> posix_split_key(std::string_view key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= key.size()) {
    size_t slash = key.find('/', start);
    if (slash == std::string_view::npos) slash = key.size();
    parts.emplace_back(key.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

std::string posix_random_hex() {
  unsigned char b[8];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  char out[17];
  for (size_t i = 0; i < sizeof b; ++i) std::snprintf(out + 2 * i, 3, "%02x", b[i]);
  return std::string(out, 16);
}

Result<void> posix_write_all(int fd, std::string_view data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_sys("write");
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

class PosixStore final : public ObjectStore {
 public:
  PosixStore(UniqueFd root, std::string url) : root_(std::move(root)), url_(std::move(url)) {}

  const std::string& url() const override { return url_; }

  Result<void> put(const std::string& key, std::string_view data) override {
    TRY_VOID(check_key(key));
    auto r = [&]() -> Result<void> {
      auto parts = posix_split_key(key);
      const std::string name = parts.back();
      parts.pop_back();
      UniqueFd dir = TRY(walk(parts, /*create=*/true));
      const std::string tmp = "." + name + "." + posix_random_hex() + ".tmp";
      int fd = ::openat(dir.get(), tmp.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kPosixFileMode);
      if (fd < 0) return fail_sys("openat", tmp);
      UniqueFd out(fd);
      auto written = [&]() -> Result<void> {
        TRY_VOID(posix_write_all(out.get(), data));
        if (::fsync(out.get()) < 0) return fail_sys("fsync", tmp);
        if (::close(out.release()) < 0) return fail_sys("close", tmp);  // NFS reports here
        if (::renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str()) < 0)
          return fail_sys("renameat", tmp + " -> " + name);
        return {};
      }();
      if (!written) {
        ::unlinkat(dir.get(), tmp.c_str(), 0);
        return written;
      }
      if (::fsync(dir.get()) < 0) return fail_sys("fsync", "its directory");
      return {};
    }();
    if (!r) return fail(std::move(r.error()).wrap(what("writing", key)));
    return {};
  }

  Result<bool> exists(const std::string& key) override {
    TRY_VOID(check_key(key));
    auto parts = posix_split_key(key);
    const std::string name = parts.back();
    parts.pop_back();
    auto dir = walk(parts, false);
    if (!dir) {
      if (dir.error().code() == Code::kNotFound) return false;
      return fail(std::move(dir.error()).wrap(what("looking up", key)));
    }
    struct stat st;
    if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) return false;
      return fail(Error::sys("fstatat", name).wrap(what("looking up", key)));
    }
    return S_ISREG(st.st_mode);
  }

  Result<std::string> get(const std::string& key, size_t max_bytes) override {
    TRY_VOID(check_key(key));
    auto r = [&]() -> Result<std::string> {
      auto parts = posix_split_key(key);
      const std::string name = parts.back();
      parts.pop_back();
      UniqueFd dir = TRY(walk(parts, false));
      // O_NONBLOCK: a FIFO planted under the key must not hang the open.
      int fd = ::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) {
        if (errno == ENOENT) return fail(Code::kNotFound, "no such object");
        if (errno == ELOOP) return fail(Code::kProtocol, "it is a symlink (not followed)");
        return fail_sys("openat", name);
      }
      UniqueFd in(fd);
      struct stat st;
      if (::fstat(in.get(), &st) < 0) return fail_sys("fstat", name);
      if (!S_ISREG(st.st_mode)) return fail(Code::kProtocol, "it is not a regular file");
      if (static_cast<uint64_t>(st.st_size) > max_bytes)
        return fail(Code::kPayloadTooLarge, "it has " + std::to_string(st.st_size) +
                                                " bytes, more than the " +
                                                std::to_string(max_bytes) + " allowed");
      std::string out;
      out.reserve(static_cast<size_t>(st.st_size));
      char buf[65536];
      for (;;) {
        ssize_t n = ::read(in.get(), buf, sizeof buf);
        if (n < 0) {
          if (errno == EINTR) continue;
          return fail_sys("read", name);
        }
        if (n == 0) break;
        if (out.size() + static_cast<size_t>(n) > max_bytes)
          return fail(Code::kPayloadTooLarge,
                      "it grew past the " + std::to_string(max_bytes) + " bytes allowed");
        out.append(buf, static_cast<size_t>(n));
      }
      return out;
    }();
    if (!r) return fail(std::move(r.error()).wrap(what("reading", key)));
    return r;
  }

  Result<std::vector<std::string>> list(const std::string& prefix) override {
    TRY_VOID(check_prefix(prefix));
    // The directory that holds every key with this prefix: its components up to the last '/'.
    const size_t slash = prefix.rfind('/');
    const std::string dir_part = slash == std::string::npos ? "" : prefix.substr(0, slash);
    std::vector<std::string> out;
    std::vector<std::string> parts;
    if (!dir_part.empty()) parts = posix_split_key(dir_part);
    auto dir = walk(parts, false);
    if (!dir) {
      if (dir.error().code() == Code::kNotFound) return out;
      return fail(std::move(dir.error()).wrap(what("listing", prefix)));
    }
    auto r = collect(std::move(*dir), dir_part.empty() ? "" : dir_part + "/", prefix, 0, &out);
    if (!r) return fail(std::move(r.error()).wrap(what("listing", prefix)));
    std::sort(out.begin(), out.end());
    return out;
  }

  Result<void> remove(const std::string& key) override {
    TRY_VOID(check_key(key));
    auto parts = posix_split_key(key);
    const std::string name = parts.back();
    parts.pop_back();
    auto dir = walk(parts, false);
    if (!dir) {
      if (dir.error().code() == Code::kNotFound) return {};
      return fail(std::move(dir.error()).wrap(what("removing", key)));
    }
    if (::unlinkat(dir->get(), name.c_str(), 0) < 0) {
      if (errno == ENOENT) return {};
      return fail(Error::sys("unlinkat", name).wrap(what("removing", key)));
    }
    if (::fsync(dir->get()) < 0)
      return fail(Error::sys("fsync", "its directory").wrap(what("removing", key)));
    return {};
  }

 private:
  std::string what(std::string_view verb, std::string_view key) const {
    return std::string(verb) + " " + std::string(key) + " in " + url_;
  }

  // Opens the directory root/parts..., one component at a time, never following a symlink;
  // with `create`, makes the missing ones (and syncs each parent that got a new entry).
  Result<UniqueFd> walk(const std::vector<std::string>& parts, bool create) const {
    int fd = ::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return fail_sys("fcntl", "F_DUPFD_CLOEXEC");
    UniqueFd cur(fd);
    std::string done;
    for (const std::string& p : parts) {
      done += (done.empty() ? "" : "/") + p;
      int next = ::openat(cur.get(), p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0 && errno == ENOENT && create) {
        if (::mkdirat(cur.get(), p.c_str(), kPosixDirMode) < 0 && errno != EEXIST)
          return fail_sys("mkdirat", done);
        if (::fsync(cur.get()) < 0) return fail_sys("fsync", "the parent of " + done);
        next = ::openat(cur.get(), p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (next < 0) {
        if (errno == ENOENT) return fail(Code::kNotFound, done + " does not exist");
        if (errno == ELOOP || errno == ENOTDIR)
          return fail(Code::kProtocol, done + " is not a directory (symlinks are not followed)");
        return fail_sys("openat", done);
      }
      cur.reset(next);
    }
    return cur;
  }

  // Adds every regular file below `dir` (whose keys start with `base`) that starts with
  // `prefix` to `out`. Symlinks, temporary and other non-key names are skipped.
  Result<void> collect(UniqueFd dir, const std::string& base, const std::string& prefix, int depth,
                       std::vector<std::string>* out) const {
    if (depth > 64) return fail(Code::kProtocol, base + " is nested too deeply");
    int fd = ::dup(dir.get());
    if (fd < 0) return fail_sys("dup");
    DIR* d = ::fdopendir(fd);
    if (!d) {
      ::close(fd);
      return fail_sys("fdopendir", base);
    }
    ::rewinddir(d);  // the dup shares its offset with fds listed before
    std::vector<std::pair<std::string, bool>> names;  // name, is a directory
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.empty() || name[0] == '.') continue;  // ., .., temporary files
      struct stat st;
      if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
      if (S_ISDIR(st.st_mode))
        names.emplace_back(name, true);
      else if (S_ISREG(st.st_mode))
        names.emplace_back(name, false);
    }
    int err = errno;
    ::closedir(d);
    if (err) return fail_sys("readdir", base, err);
    for (const auto& [name, is_dir] : names) {
      const std::string key = base + name;
      if (!check_key(key)) continue;
      if (is_dir) {
        // Descend only where keys below could match the prefix.
        const std::string sub = key + "/";
        if (!(sub.starts_with(prefix) || prefix.starts_with(sub))) continue;
        int next =
            ::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) continue;  // replaced meanwhile
        TRY_VOID(collect(UniqueFd(next), sub, prefix, depth + 1, out));
      } else if (key.starts_with(prefix)) {
        out->push_back(key);
      }
    }
    return {};
  }

  UniqueFd root_;
  std::string url_;
};

}  // namespace

Result<std::unique_ptr<ObjectStore>> open_posix_store(const std::string& dir,
                                                      const std::string& url) {
  if (dir.empty() || dir[0] != '/')
    return fail(Code::kInvalidArgument,
                "store " + url + ": the path must be absolute (file:///abs/dir)");
  if (::mkdir(dir.c_str(), kPosixDirMode) < 0 && errno != EEXIST)
    return fail(Error::sys("mkdir", dir)
                    .wrap("store " + url +
                          ": check that the parent directory exists and "
                          "is writable (a mounted shared volume)"));
  // The root itself may be reached through symlinks (an admin's mount layout); nothing below
  // it is.
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return fail(Error::sys("open", dir)
                    .wrap("store " + url +
                          ": check that it is a directory this process "
                          "can read"));
  UniqueFd root(fd);
  if (::faccessat(root.get(), ".", W_OK | X_OK, AT_EACCESS) < 0)
    return fail(Error::sys("faccessat", dir + " W_OK")
                    .wrap("store " + url + ": the directory is not writable"));
  return std::unique_ptr<ObjectStore>(new PosixStore(std::move(root), url));
}

}  // namespace space::cluster
