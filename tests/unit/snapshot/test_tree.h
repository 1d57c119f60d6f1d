// Helpers of the snapshot store's tests: a temporary directory that cleans itself up, file
// writers, and a comparison of two trees on every property a snapshot keeps (type, content,
// mode, owner, mtime, symlink target, xattrs, device numbers, hardlink groups).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/fd.h"

namespace space::snapshot::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/space-snap-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // never follows symlinks
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline UniqueFd open_dir(const std::string& path) {
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

inline std::string random_string(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&s[i], &x, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

inline void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void set_mtime(const std::string& path, int64_t sec, long nsec = 0) {
  struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
  ::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW);
}

inline std::map<std::string, std::string> xattrs_of(const std::string& path) {
  std::map<std::string, std::string> out;
  char names[65536];
  ssize_t n = ::llistxattr(path.c_str(), names, sizeof names);
  for (ssize_t pos = 0; n > 0 && pos < n;) {
    std::string name(names + pos);
    pos += static_cast<ssize_t>(name.size()) + 1;
    char value[65536];
    ssize_t v = ::lgetxattr(path.c_str(), name.c_str(), value, sizeof value);
    if (v >= 0) out[name] = std::string(value, static_cast<size_t>(v));
  }
  return out;
}

// Every path under `root` (relative, sorted), the root itself as "".
inline std::vector<std::string> list_tree(const std::string& root) {
  std::vector<std::string> out{""};
  for (auto it = std::filesystem::recursive_directory_iterator(root);
       it != std::filesystem::recursive_directory_iterator(); ++it)
    out.push_back(std::filesystem::relative(it->path(), root).string());
  std::sort(out.begin(), out.end());
  return out;
}

// Differences between two trees, one per line; "" when they are the same on every property a
// snapshot keeps. Hardlinks: paths that share an inode in `a` share one in `b`, and no others.
inline std::string compare_trees(const std::string& a, const std::string& b) {
  std::ostringstream diff;
  std::vector<std::string> pa = list_tree(a), pb = list_tree(b);
  if (pa != pb) {
    diff << "path lists differ:";
    for (auto& p : pa) diff << " a:" << p;
    for (auto& p : pb) diff << " b:" << p;
    diff << "\n";
    return diff.str();
  }
  std::map<ino_t, std::string> first_a, first_b;
  for (const std::string& rel : pa) {
    std::string x = rel.empty() ? a : a + "/" + rel, y = rel.empty() ? b : b + "/" + rel;
    struct stat sa, sb;
    if (::lstat(x.c_str(), &sa) < 0 || ::lstat(y.c_str(), &sb) < 0) {
      diff << rel << ": lstat failed\n";
      continue;
    }
    auto d = [&](const char* what) { diff << "\"" << rel << "\": " << what << " differs\n"; };
    if (sa.st_mode != sb.st_mode) d("mode");
    if (sa.st_uid != sb.st_uid || sa.st_gid != sb.st_gid) d("owner");
    if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec || sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec)
      d("mtime");
    if (S_ISREG(sa.st_mode)) {
      if (sa.st_size != sb.st_size)
        d("size");
      else if (read_file(x) != read_file(y))
        d("content");
      if (sa.st_nlink != sb.st_nlink) d("link count");
      if (sa.st_nlink > 1) {
        auto ia = first_a.emplace(sa.st_ino, rel), ib = first_b.emplace(sb.st_ino, rel);
        if (ia.first->second != ib.first->second) d("hardlink group");
      }
    }
    if (S_ISLNK(sa.st_mode)) {
      char ta[4096] = {}, tb[4096] = {};
      ::readlink(x.c_str(), ta, sizeof ta - 1);
      ::readlink(y.c_str(), tb, sizeof tb - 1);
      if (std::strcmp(ta, tb) != 0) d("symlink target");
    }
    if ((S_ISCHR(sa.st_mode) || S_ISBLK(sa.st_mode)) && sa.st_rdev != sb.st_rdev) d("rdev");
    if (xattrs_of(x) != xattrs_of(y)) d("xattrs");
  }
  return diff.str();
}

}  // namespace space::snapshot::testing
