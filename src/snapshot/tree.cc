// Walking a tree into a manifest (take, scan) and materializing a manifest into a directory
// (restore). The tree is a sandbox's overlay upper directory, written by untrusted code, so:
// each entry is reached by one name relative to its parent's fd (never a path string), with
// O_NOFOLLOW; a regular file is opened O_PATH first, checked, then reopened through
// /proc/self/fd for reading, so a file swapped for a fifo or a device between the stat and the
// open is never opened as one; directories are opened O_DIRECTORY; a mount point beneath the
// root is refused. Paths, depth and entry count are bounded. A file whose size, mtime or ctime
// moves while it is read fails the snapshot ("changed while snapshotting"): the caller freezes
// the sandbox first.
//
// Restore creates everything beneath the target fd: each parent directory is reopened with
// open_beneath (no symlinks, no escape), each entry created by name in it with O_EXCL /
// O_NOFOLLOW semantics, and the manifest is validated first (every parent an earlier directory
// of the manifest), so a manifest cannot route a write through a symlink it created.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "snapshot/internal.h"

namespace space::snapshot::detail {
namespace {

struct InodeKey {
  uint64_t dev, ino;
  auto operator<=>(const InodeKey&) const = default;
};

Error changed(const std::string& rel, std::string_view how) {
  return Error(Code::kConflict, "\"" + rel + "\" changed while snapshotting (" + std::string(how) +
                                    "); freeze the sandbox first");
}

bool same_inode(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev &&
         (a.st_mode & S_IFMT) == (b.st_mode & S_IFMT);
}

class Walker {
 public:
  Walker(const TakeContext& ctx, Manifest* m) : ctx_(ctx), opt_(*ctx.options), m_(m) {}

  Result<void> run(int dir_fd) {
    int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fail_sys("openat", "the snapshot root");
    UniqueFd root(fd);
    struct stat st;
    if (::fstat(root.get(), &st) < 0) return fail_sys("fstat", "the snapshot root");
    Entry e = from_stat(st, "", Entry::Type::kDir);
    e.xattrs = TRY_CTX(read_xattrs(root.get(), false), "the snapshot root");
    m_->entries.push_back(std::move(e));
    if (ctx_.parent)
      for (const Entry& p : ctx_.parent->entries) parent_.emplace(p.path, &p);
    if (ctx_.writer) buf_.resize(2 * kMaxChunk);
    TRY_VOID(visit_dir(root.get(), "", st.st_dev));
    finish();
    return {};
  }

 private:
  static Entry from_stat(const struct stat& st, const std::string& rel, Entry::Type type) {
    Entry e;
    e.type = type;
    e.path = rel;
    e.mode = st.st_mode & 07777;
    e.uid = st.st_uid;
    e.gid = st.st_gid;
    e.mtime_ns = to_ns(st.st_mtim);
    if (type == Entry::Type::kFile) {
      e.size = static_cast<uint64_t>(st.st_size);
      e.ctime_ns = to_ns(st.st_ctim);
      e.ino = st.st_ino;
      e.dev = st.st_dev;
    }
    return e;
  }

  Result<void> push(Entry e) {
    if (m_->entries.size() >= opt_.max_entries)
      return fail(Code::kResourceExhausted,
                  "the tree has more than " + std::to_string(opt_.max_entries) + " entries");
    m_->entries.push_back(std::move(e));
    return {};
  }

  Result<void> visit_dir(int dfd, const std::string& rel, uint64_t root_dev) {
    std::vector<std::string> names = TRY_CTX(list_dir(dfd), "listing \"" + rel + "\"");
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      std::string child = rel.empty() ? name : rel + "/" + name;
      if (child.size() > opt_.max_path)
        return fail(Code::kResourceExhausted, "path \"" + child.substr(0, 200) +
                                                  "...\" is longer than " +
                                                  std::to_string(opt_.max_path) + " bytes");
      if (path_depth(child) > opt_.max_depth)
        return fail(Code::kResourceExhausted, "path \"" + child.substr(0, 200) +
                                                  "\" is deeper than " +
                                                  std::to_string(opt_.max_depth) + " components");
      TRY_VOID(add_child(dfd, name, child, root_dev));
    }
    return {};
  }

  Result<void> add_child(int dfd, const std::string& name, const std::string& rel,
                         uint64_t root_dev) {
    struct stat st;
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) return fail(changed(rel, "deleted"));
      return fail(Error::sys("fstatat").wrap("\"" + rel + "\""));
    }
    const InodeKey key{st.st_dev, st.st_ino};
    const bool multi = S_ISREG(st.st_mode) && st.st_nlink > 1;
    if (S_ISREG(st.st_mode) && !(multi && links_.contains(key))) {
      Entry e = from_stat(st, rel, Entry::Type::kFile);
      if (reuse(st, rel, &e)) {
        ++m_->reused_files;
        if (multi) links_.emplace(key, m_->entries.size());
        return push(std::move(e));
      }
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != root_dev)
        return fail(Code::kInvalidArgument, "\"" + rel + "\" is a mount point; not snapshotted");
      int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
          return fail(changed(rel, "replaced"));
        return fail(Error::sys("openat").wrap("\"" + rel + "\""));
      }
      UniqueFd dir(fd);
      struct stat now;
      if (::fstat(dir.get(), &now) < 0) return fail(Error::sys("fstat").wrap("\"" + rel + "\""));
      if (!same_inode(st, now)) return fail(changed(rel, "replaced"));
      Entry e = from_stat(now, rel, Entry::Type::kDir);
      e.xattrs = TRY_CTX(read_xattrs(dir.get(), false), "\"" + rel + "\"");
      TRY_VOID(push(std::move(e)));
      return visit_dir(dir.get(), rel, root_dev);
    }
    int fd = ::openat(dfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return fail(changed(rel, "deleted"));
      return fail(Error::sys("openat").wrap("\"" + rel + "\""));
    }
    UniqueFd path_fd(fd);
    struct stat now;
    if (::fstat(path_fd.get(), &now) < 0) return fail(Error::sys("fstat").wrap("\"" + rel + "\""));
    if (!same_inode(st, now)) return fail(changed(rel, "replaced"));
    Entry e;
    switch (now.st_mode & S_IFMT) {
      case S_IFREG: {
        e = from_stat(now, rel, Entry::Type::kFile);
        if (auto first = links_.find(key); multi && first != links_.end()) {
          e.chunks = m_->entries[first->second].chunks;  // another name of a file read already
          e.xattrs = m_->entries[first->second].xattrs;
          return push(std::move(e));
        }
        if (ctx_.writer) {
          TRY_VOID_CTX(read_file(path_fd.get(), now, rel, &e), "\"" + rel + "\"");
        } else {
          e.xattrs = TRY_CTX(read_xattrs(path_fd.get(), true), "\"" + rel + "\"");
        }
        if (multi) links_.emplace(key, m_->entries.size());
        return push(std::move(e));
      }
      case S_IFLNK: {
        e = from_stat(now, rel, Entry::Type::kSymlink);
        std::string target(opt_.max_path + 1, '\0');
        ssize_t n = ::readlinkat(path_fd.get(), "", target.data(), target.size());
        if (n < 0) return fail(Error::sys("readlinkat").wrap("\"" + rel + "\""));
        if (static_cast<size_t>(n) > opt_.max_path)
          return fail(Code::kResourceExhausted, "symlink \"" + rel +
                                                    "\" has a target longer than " +
                                                    std::to_string(opt_.max_path) + " bytes");
        target.resize(static_cast<size_t>(n));
        if (target.empty()) return fail(Code::kInvalidArgument, "symlink \"" + rel + "\" is empty");
        e.target = std::move(target);
        break;
      }
      case S_IFCHR:
        if (now.st_rdev != makedev(0, 0)) {
          m_->skipped.push_back(rel + ": device node, not captured");
          return {};
        }
        e = from_stat(now, rel, Entry::Type::kWhiteout);
        break;
      case S_IFIFO:
      case S_IFSOCK:
        e = from_stat(now, rel, Entry::Type::kOther);
        e.mode |= now.st_mode & S_IFMT;
        break;
      default:
        m_->skipped.push_back(rel + ": device node, not captured");
        return {};
    }
    e.xattrs = TRY_CTX(read_xattrs(path_fd.get(), true), "\"" + rel + "\"");
    return push(std::move(e));
  }

  // Takes a file's chunks from the parent manifest when it is provably the same file (same
  // inode, size, mtime and ctime: any write, chmod, chown or xattr change moves ctime, which
  // user space cannot set) and every chunk is still stored. Nothing of the file is opened.
  bool reuse(const struct stat& st, const std::string& rel, Entry* e) {
    if (!ctx_.parent || !ctx_.writer) return false;
    auto it = parent_.find(rel);
    if (it == parent_.end()) return false;
    const Entry* p = it->second;
    if (p->type != Entry::Type::kFile || p->size != static_cast<uint64_t>(st.st_size) ||
        p->mtime_ns != to_ns(st.st_mtim) || p->ctime_ns != to_ns(st.st_ctim) ||
        p->ino != st.st_ino || p->dev != st.st_dev)
      return false;
    const Entry* data = p;
    if (!p->hardlink_to.empty()) {
      auto first = parent_.find(p->hardlink_to);
      if (first == parent_.end()) return false;
      data = first->second;
    }
    if (data->type != Entry::Type::kFile || data->size != p->size) return false;
    for (const std::string& c : data->chunks) {
      if (present_.contains(c)) continue;
      auto has = ctx_.writer->has(c);
      if (!has || !*has) return false;
      present_.insert(c);
    }
    e->chunks = data->chunks;
    e->xattrs = p->xattrs;
    return true;
  }

  Result<void> read_file(int path_fd, const struct stat& st, const std::string& rel, Entry* e) {
    const std::string proc = proc_fd_path(path_fd);
    int fd = ::open(proc.c_str(), O_RDONLY | O_NOATIME | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == EPERM)  // O_NOATIME needs ownership or CAP_FOWNER
      fd = ::open(proc.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail_sys("open");
    UniqueFd in(fd);
    e->xattrs = TRY(read_xattrs(in.get(), false));
    ::posix_fadvise(in.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    // Fewer blocks than bytes: it has holes, which are recorded without reading them.
    const bool sparse = static_cast<uint64_t>(st.st_blocks) * 512 < size;
    uint64_t total = 0;
    size_t start = 0, end = 0;
    bool eof = false;
    for (;;) {
      if (sparse && !eof) TRY_VOID(skip_hole(in.get(), size, &total, &start, &end, e));
      while (!eof && end < buf_.size()) {
        ssize_t r = ::read(in.get(), buf_.data() + end, buf_.size() - end);
        if (r < 0) {
          if (errno == EINTR) continue;
          return fail_sys("read");
        }
        if (r == 0) {
          eof = true;
          break;
        }
        end += static_cast<size_t>(r);
        total += static_cast<uint64_t>(r);
        bytes_read_ += static_cast<uint64_t>(r);
        if (total > size) return fail(changed(rel, "grew"));
        if (ctx_.progress) ctx_.progress(bytes_read_);
      }
      while (end - start >= kMaxChunk || (eof && end > start)) {
        size_t n = cut_point(buf_.data() + start, end - start);
        e->chunks.push_back(TRY(ctx_.writer->put(buf_.data() + start, n)));
        start += n;
      }
      if (eof) break;
      std::memmove(buf_.data(), buf_.data() + start, end - start);
      end -= start;
      start = 0;
    }
    if (total != size) return fail(changed(rel, "shrank"));
    struct stat after;
    if (::fstat(in.get(), &after) < 0) return fail_sys("fstat");
    if (static_cast<uint64_t>(after.st_size) != size || to_ns(after.st_mtim) != e->mtime_ns ||
        to_ns(after.st_ctim) != e->ctime_ns)
      return fail(changed(rel, "written"));
    return {};
  }

  // At file offset *total, in a hole: records the zero chunks that reading the hole would
  // have produced, without reading or hashing it, and moves past them. A 64 GiB sparse file
  // then costs what its data costs, not 64 GiB of reads while the sandbox is frozen. Only
  // when every byte buffered since the last cut is zero (the chunks are then exactly the
  // zero-run chunks), and only whole chunks with a full kMaxChunk of zeros ahead of them.
  Result<void> skip_hole(int fd, uint64_t size, uint64_t* total, size_t* start, size_t* end,
                         Entry* e) {
    if (*total >= size) return {};
    off_t data = ::lseek(fd, static_cast<off_t>(*total), SEEK_DATA);
    uint64_t hole_end;
    if (data < 0) {
      if (errno != ENXIO) return {};  // no SEEK_DATA here: read everything
      hole_end = size;
    } else {
      hole_end = static_cast<uint64_t>(data);
    }
    if (hole_end <= *total) return {};
    const uint64_t buffered = *end - *start;
    const uint64_t run = buffered + (hole_end - *total);
    if (run < kMaxChunk) return {};
    if (std::any_of(buf_.data() + *start, buf_.data() + *end, [](uint8_t b) { return b != 0; }))
      return {};
    const ZeroChunk& zero = zero_chunk();
    const uint64_t count = (run - kMaxChunk) / zero.length + 1;
    const uint64_t consumed = count * zero.length;
    e->chunks.insert(e->chunks.end(), count, zero.id);
    if (consumed <= buffered) {
      *start += static_cast<size_t>(consumed);
      return {};
    }
    *total += consumed - buffered;
    *start = *end = 0;
    if (::lseek(fd, static_cast<off_t>(*total), SEEK_SET) < 0) return fail_sys("lseek");
    return {};
  }

  // Sorts by path and turns the 2nd+ names of each multiply-linked file into hardlinks to the
  // first name in that order.
  void finish() {
    std::sort(m_->entries.begin(), m_->entries.end(),
              [](const Entry& a, const Entry& b) { return a.path < b.path; });
    std::map<InodeKey, std::string> first;
    for (Entry& e : m_->entries) {
      if (e.type != Entry::Type::kFile) continue;
      const InodeKey key{e.dev, e.ino};
      if (links_.contains(key)) {
        auto [it, inserted] = first.emplace(key, e.path);
        if (!inserted) {
          e.hardlink_to = it->second;
          e.chunks.clear();
          continue;
        }
      }
      m_->logical_bytes += e.size;
    }
  }

  const TakeContext& ctx_;
  const StoreOptions& opt_;
  Manifest* m_;
  std::unordered_map<std::string, const Entry*> parent_;
  std::map<InodeKey, size_t> links_;  // multiply-linked files: index of the first name seen
  std::set<std::string> present_;     // chunk ids known to be in the store
  std::vector<uint8_t> buf_;
  uint64_t bytes_read_ = 0;
};

// --- restore

Result<void> set_times(int fd_or_dir, const char* name, int64_t mtime_ns, int flags) {
  struct timespec ts[2] = {from_ns(mtime_ns), from_ns(mtime_ns)};
  if (::utimensat(fd_or_dir, name, ts, flags) < 0) return fail_sys("utimensat");
  return {};
}

Result<void> restore_file(int pfd, const std::string& name, const Entry& e,
                          const ChunkReader& reader, std::vector<uint8_t>& buf) {
  int fd = ::openat(pfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail_sys("openat");
  UniqueFd out(fd);
  uint64_t left = e.size;
  const ZeroChunk& zero = zero_chunk();
  for (const std::string& id : e.chunks) {
    size_t cap = static_cast<size_t>(std::min<uint64_t>(left, kMaxChunk));
    if (id == zero.id && cap >= zero.length) {
      // Zeros: a hole, as in the original (sparse) file; its content needs no reading.
      if (::lseek(out.get(), static_cast<off_t>(zero.length), SEEK_CUR) < 0)
        return fail_sys("lseek");
      left -= zero.length;
      continue;
    }
    size_t n = TRY(reader.get(id, e.path, buf.data(), cap));
    TRY_VOID(write_all(out.get(), buf.data(), n));
    left -= n;
  }
  if (left != 0)
    return fail(Code::kProtocol, "chunks of " + e.path + " hold " + std::to_string(e.size - left) +
                                     " of its " + std::to_string(e.size) + " bytes");
  // A trailing hole: lseek alone does not make the file longer.
  if (::ftruncate(out.get(), static_cast<off_t>(e.size)) < 0) return fail_sys("ftruncate");
  if (::fchown(out.get(), e.uid, e.gid) < 0) return fail_sys("fchown");
  if (::fchmod(out.get(), e.mode) < 0) return fail_sys("fchmod");
  TRY_VOID(write_xattrs(out.get(), false, e.xattrs));
  struct timespec ts[2] = {from_ns(e.mtime_ns), from_ns(e.mtime_ns)};
  if (::futimens(out.get(), ts) < 0) return fail_sys("futimens");
  return {};
}

// Owner, mode, xattrs and times of a symlink, whiteout, fifo or socket just created by `name`,
// set through an O_PATH fd of it (its /proc/self/fd entry reaches the inode itself).
Result<void> finish_special(int pfd, const std::string& name, const Entry& e, mode_t fmt) {
  int fd = ::openat(pfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail_sys("openat");
  UniqueFd node(fd);
  struct stat st;
  if (::fstat(node.get(), &st) < 0) return fail_sys("fstat");
  if ((st.st_mode & S_IFMT) != fmt) return fail(Code::kConflict, "replaced while restoring");
  if (::fchownat(node.get(), "", e.uid, e.gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
    return fail_sys("fchownat");
  const std::string proc = proc_fd_path(node.get());
  if (fmt != S_IFLNK && ::chmod(proc.c_str(), e.mode & 07777) < 0) return fail_sys("chmod");
  TRY_VOID(write_xattrs(node.get(), true, e.xattrs));
  if (fmt == S_IFLNK) return set_times(pfd, name.c_str(), e.mtime_ns, AT_SYMLINK_NOFOLLOW);
  return set_times(AT_FDCWD, proc.c_str(), e.mtime_ns, 0);
}

Result<void> restore_entry(int root, int pfd, const std::string& name, const Entry& e,
                           const ChunkReader& reader, std::vector<uint8_t>& buf) {
  switch (e.type) {
    case Entry::Type::kDir: {
      if (::mkdirat(pfd, name.c_str(), 0700) < 0) return fail_sys("mkdirat");
      int fd = ::openat(pfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return fail_sys("openat");
      UniqueFd dir(fd);
      if (::fchown(dir.get(), e.uid, e.gid) < 0) return fail_sys("fchown");
      return write_xattrs(dir.get(), false, e.xattrs);  // mode and times: after its entries
    }
    case Entry::Type::kFile: {
      if (e.hardlink_to.empty()) return restore_file(pfd, name, e, reader, buf);
      UniqueFd first = TRY_CTX(open_beneath(root, e.hardlink_to, O_PATH), "its first name");
      struct stat st;
      if (::fstat(first.get(), &st) < 0) return fail_sys("fstat");
      if (!S_ISREG(st.st_mode)) return fail(Code::kConflict, "its first name is not a file");
      if (::linkat(AT_FDCWD, proc_fd_path(first.get()).c_str(), pfd, name.c_str(),
                   AT_SYMLINK_FOLLOW) < 0)
        return fail_sys("linkat");
      return {};
    }
    case Entry::Type::kSymlink:
      if (::symlinkat(e.target.c_str(), pfd, name.c_str()) < 0) return fail_sys("symlinkat");
      return finish_special(pfd, name, e, S_IFLNK);
    case Entry::Type::kWhiteout:
      // The overlay's whiteout: a character device 0:0, which reads and writes nothing.
      if (::mknodat(pfd, name.c_str(), S_IFCHR | 0600, makedev(0, 0)) < 0)
        return fail_sys("mknodat");
      return finish_special(pfd, name, e, S_IFCHR);
    case Entry::Type::kOther: {
      const mode_t fmt = e.mode & S_IFMT;  // a fifo or a socket (validated)
      if (::mknodat(pfd, name.c_str(), fmt | 0600, 0) < 0) return fail_sys("mknodat");
      return finish_special(pfd, name, e, fmt);
    }
  }
  return fail(Code::kInternal, "unknown entry type");
}

}  // namespace

Result<void> walk_tree(int dir_fd, const TakeContext& ctx, Manifest* m) {
  Walker w(ctx, m);
  return w.run(dir_fd);
}

Result<void> restore_tree(const Manifest& m, int dir_fd, const ChunkReader& reader,
                          const StoreOptions& options) {
  TRY_VOID(validate(m, options));
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail_sys("openat", "the restore target");
  UniqueFd root(fd);
  if (!TRY_CTX(list_dir(root.get()), "the restore target").empty())
    return fail(Code::kConflict, "the restore target is not empty");
  const Entry& top = m.entries[0];
  if (::fchown(root.get(), top.uid, top.gid) < 0) return fail_sys("fchown", "the restore target");
  TRY_VOID_CTX(write_xattrs(root.get(), false, top.xattrs), "the restore target");

  std::vector<uint8_t> buf(kMaxChunk);
  std::string cached_path;
  UniqueFd cached;
  for (size_t i = 1; i < m.entries.size(); ++i) {
    const Entry& e = m.entries[i];
    const std::string parent = parent_of(e.path);
    if (!cached || parent != cached_path) {
      cached = TRY_CTX(open_beneath(root.get(), parent, O_PATH | O_DIRECTORY),
                       "restoring \"" + e.path + "\": opening its directory");
      cached_path = parent;
    }
    auto r = restore_entry(root.get(), cached.get(), base_of(e.path), e, reader, buf);
    if (!r) {
      if (r.error().code() == Code::kProtocol) return r;  // names the chunk and the path
      return fail(std::move(r.error()).wrap("restoring \"" + e.path + "\""));
    }
  }
  // Directory modes and times last, deepest first: creating entries moves a directory's mtime.
  for (size_t i = m.entries.size(); i-- > 0;) {
    const Entry& e = m.entries[i];
    if (e.type != Entry::Type::kDir) continue;
    UniqueFd dir = TRY_CTX(open_beneath(root.get(), e.path, O_RDONLY | O_DIRECTORY),
                           "restoring \"" + e.path + "\"");
    if (::fchmod(dir.get(), e.mode) < 0)
      return fail(Error::sys("fchmod").wrap("restoring \"" + e.path + "\""));
    struct timespec ts[2] = {from_ns(e.mtime_ns), from_ns(e.mtime_ns)};
    if (::futimens(dir.get(), ts) < 0)
      return fail(Error::sys("futimens").wrap("restoring \"" + e.path + "\""));
  }
  if (::syncfs(root.get()) < 0) return fail_sys("syncfs", "the restore target");
  return {};
}

}  // namespace space::snapshot::detail
