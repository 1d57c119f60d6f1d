// What image builds need of the image store (daemon/image_build.cc runs the steps): the build
// cache, whose entries are step trees kept as hidden image records; hard-link copies of trees
// (a step starts from its parent's tree without copying a byte of file data: nothing ever
// writes an image's files, see the content store in images.cc); and installing the result.
//
// Crash safety: every tree is made under a name sweep() removes (.build-*, .install-*, or a
// .cache-* / rootfs-* directory no record names) and becomes real only when its record is
// written, so a kill at any point leaves either the old state or the new one.
#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "common/clock.h"
#include "common/failpoint.h"
#include "daemon/images.h"
#include "image/layer.h"

namespace space::daemon {
namespace fs = std::filesystem;
namespace {

// Copies the directory `src_fd` into the empty directory `dst_fd`: directories, symlinks and
// fifos made anew with the same mode, owner and times; regular files hard-linked (their inodes
// go into `linked`). `depth` bounds the recursion.
Result<void> link_tree_at(int src_fd, int dst_fd, const std::string& where, size_t depth,
                          std::set<ino_t>& linked) {
  if (depth > image::kMaxDepth) return fail(Code::kInvalidArgument, where + ": nested too deep");
  int dup = ::dup(src_fd);
  if (dup < 0) return fail_sys("dup", where);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return fail_sys("fdopendir", where);
  }
  struct Closer {
    DIR* d;
    ~Closer() { ::closedir(d); }
  } closer{d};
  ::rewinddir(d);
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string path = where + "/" + n;
    struct stat st;
    if (::fstatat(src_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return fail_sys("stat", path);
    if (S_ISDIR(st.st_mode)) {
      if (::mkdirat(dst_fd, n.c_str(), 0700) != 0) return fail_sys("mkdir", path);
      UniqueFd s(::openat(src_fd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!s) return fail_sys("open", path);
      UniqueFd t(::openat(dst_fd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!t) return fail_sys("open", path);
      TRY_VOID(link_tree_at(s.get(), t.get(), path, depth + 1, linked));
      if (::fchown(t.get(), st.st_uid, st.st_gid) != 0 || ::fchmod(t.get(), st.st_mode & 07777))
        return fail_sys("chown", path);
      timespec times[2] = {st.st_atim, st.st_mtim};
      ::futimens(t.get(), times);
    } else if (S_ISREG(st.st_mode)) {
      if (::linkat(src_fd, n.c_str(), dst_fd, n.c_str(), 0) == 0) {
        linked.insert(st.st_ino);
        continue;
      }
      if (errno != EMLINK) return fail_sys("link", path);
      // The inode has as many names as the file system allows: this tree gets its own copy.
      UniqueFd s(::openat(src_fd, n.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      UniqueFd t(
          ::openat(dst_fd, n.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!s || !t) return fail_sys("copy", path);
      char buf[64 * 1024];
      for (;;) {
        ssize_t r = ::read(s.get(), buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fail_sys("read", path);
        if (r == 0) break;
        if (::write(t.get(), buf, static_cast<size_t>(r)) != r) return fail_sys("write", path);
      }
      if (::fchown(t.get(), st.st_uid, st.st_gid) != 0 || ::fchmod(t.get(), st.st_mode & 07777))
        return fail_sys("chown", path);
    } else if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      ssize_t len = ::readlinkat(src_fd, n.c_str(), target.data(), target.size());
      if (len < 0) return fail_sys("readlink", path);
      target.resize(static_cast<size_t>(len));
      if (::symlinkat(target.c_str(), dst_fd, n.c_str()) != 0) return fail_sys("symlink", path);
      if (::fchownat(dst_fd, n.c_str(), st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) != 0)
        return fail_sys("chown", path);
      timespec times[2] = {st.st_atim, st.st_mtim};
      ::utimensat(dst_fd, n.c_str(), times, AT_SYMLINK_NOFOLLOW);
    } else if (S_ISFIFO(st.st_mode)) {
      if (::mkfifoat(dst_fd, n.c_str(), st.st_mode & 07777) != 0) return fail_sys("mkfifo", path);
      if (::fchownat(dst_fd, n.c_str(), st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) != 0)
        return fail_sys("chown", path);
    }
    // Nothing else is in an image's tree (apply_layer makes no devices or sockets).
  }
  return {};
}

// `to` (made here, 0755 root) becomes a hard-link copy of the tree at `from`.
Result<void> link_tree(const fs::path& from, const fs::path& to, std::set<ino_t>& linked) {
  UniqueFd src(::open(from.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!src) return fail_sys("open", from.string());
  if (::mkdir(to.c_str(), 0755) != 0) return fail_sys("mkdir", to.string());
  UniqueFd dst(::open(to.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst) return fail_sys("open", to.string());
  return link_tree_at(src.get(), dst.get(), "", 0, linked);
}

std::string random_suffix() {
  std::random_device rd;
  return std::to_string(rd());
}

}  // namespace

std::string Images::cache_name(const std::string& key) {
  return ".cache-" + key.substr(0, std::min<size_t>(key.size(), 40));
}

Result<std::optional<ImageRecord>> Images::cache_get(const std::string& key) {
  auto rec = TRY(store_.get_image(cache_name(key)));
  if (!rec || rec->kind != "cache") return std::optional<ImageRecord>();
  std::error_code ec;
  if (!fs::is_directory(rec->path, ec)) return std::optional<ImageRecord>();
  rec->created_at = now_s();  // used now: the last to be evicted
  (void)store_.put_image(*rec);
  return rec;
}

Result<void> Images::unpack_context(const ChunkSource& source, const fs::path& into) {
  std::error_code ec;
  fs::create_directories(into, ec);
  if (ec) return fail(Code::kInternal, "creating " + into.string() + ": " + ec.message());
  auto u = unpack_upload(source, into);
  if (!u) {
    Error e = std::move(u.error());
    // An empty context is fine (a Dockerfile needs no files besides itself... which must be
    // there): the caller says what is missing.
    if (e.message() != "the image archive is empty")
      return fail(std::move(e).wrap("build context"));
  }
  return {};
}

Result<void> Images::apply_build_layer(const fs::path& tar, int root_fd, const std::string& what) {
  image::Totals totals;
  auto r = image::apply_layer(tar, image::Layer{}, root_fd, limits_, totals, keep_setuid_);
  if (!r) return fail(std::move(r.error()).wrap(what));
  return {};
}

Result<ImageRecord> Images::commit_step(const std::string& key, const fs::path& from,
                                        const fs::path& work,
                                        const std::function<Result<void>(int root_fd)>& change) {
  fs::path rootfs = work / "rootfs";
  std::set<ino_t> linked;
  TRY_VOID(link_tree(from, rootfs, linked));
  {
    UniqueFd root(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root) return fail_sys("open", rootfs.string());
    TRY_VOID(change(root.get()));
    if (::fchmod(root.get(), 0755) != 0) return fail_sys("fchmod", rootfs.string());
  }
  std::string name = cache_name(key);
  ImageRecord rec{name, "cache", (dir_ / name / "rootfs").string(), now_s(), 0, 0};
  rec.format = "dockerfile";
  rec.digest = "sha256:" + key;
  std::lock_guard lock(content_mu_);
  TreeStats stats = TRY(share_content(rootfs, &linked));
  rec.files = stats.files;
  rec.size_bytes = stats.bytes;
  std::error_code ec;
  fs::remove_all(dir_ / name, ec);  // a leftover without a record (sweep would have taken it)
  fs::rename(work, dir_ / name, ec);
  if (ec) return fail(Code::kInternal, "installing build step " + name + ": " + ec.message());
  failpoint("image.build.after_step");  // sweep removes the directory: it has no record
  if (auto r = store_.put_image(rec); !r) {
    fs::remove_all(dir_ / name, ec);
    collect_content();
    return fail(std::move(r.error()).wrap("recording build step " + name));
  }
  return rec;
}

Result<void> Images::check_build_target(const std::string& name) {
  TRY_VOID(validate_name(name));
  if (name == "host")
    return fail(Code::kInvalidArgument, "\"host\" is the built-in image; choose another name");
  auto rec = TRY(store_.get_image(name));
  if (!rec) return {};
  if (rec->kind != "built")
    return fail(Code::kAlreadyExists, "image \"" + name + "\" exists and was " +
                                          (rec->kind == "imported" ? "imported" : "not built") +
                                          "; `space image rm " + name +
                                          "` first, or build under another name");
  for (const auto& s : TRY(store_.live_sandboxes()))
    if (s.image == name)
      return fail(Code::kConflict, "image \"" + name + "\" is used by sandbox " + s.id +
                                       "; a rebuild replaces it: remove the sandbox first, or "
                                       "build under another name");
  return {};
}

Result<ImageRecord> Images::install_built(const std::string& name, const fs::path& from,
                                          const nlohmann::json& config, const std::string& digest) {
  TRY_VOID(check_build_target(name));
  auto old = TRY(store_.get_image(name));
  std::string tree = "rootfs-" + digest.substr(digest.find(':') + 1, 16);
  fs::path base = dir_ / name;
  // A fresh image is staged beside the others and renamed into place; a rebuild puts its
  // tree into the image's directory beside the old one, then the record switches.
  fs::path stage = old ? base : dir_ / (".install-" + name + "-" + random_suffix());
  std::error_code ec;
  if (!old) {
    if (::mkdir(stage.c_str(), 0700) != 0) return fail_sys("mkdir", stage.string());
  } else if (fs::path(old->path).filename() == tree) {
    // The same tree as the image has (nothing changed): keep it, with the new config.
    old->config = config;
    old->created_at = now_s();
    TRY_VOID(store_.put_image(*old));
    return *old;
  }
  fs::remove_all(stage / tree, ec);
  struct Cleanup {
    fs::path p;
    bool armed = true;
    ~Cleanup() {
      std::error_code e;
      if (armed) fs::remove_all(p, e);
    }
  } cleanup{old ? stage / tree : stage};
  std::set<ino_t> linked;
  TRY_VOID(link_tree(from, stage / tree, linked));
  ImageRecord rec{name, "built", (base / tree).string(), now_s(), 0, 0};
  rec.format = "dockerfile";
  rec.config = config.is_object() ? config : nlohmann::json::object();
  rec.digest = digest;
  {
    std::lock_guard lock(content_mu_);
    TreeStats stats = TRY(share_content(stage / tree, &linked));
    rec.files = stats.files;
    rec.size_bytes = stats.bytes;
  }
  if (!old) {
    fs::rename(stage, base, ec);
    if (ec) return fail(Code::kInternal, "installing image " + name + ": " + ec.message());
  }
  cleanup.armed = false;
  failpoint("image.build.after_install");  // sweep removes what no record names
  if (auto r = store_.put_image(rec); !r) {
    fs::remove_all(old ? base / tree : base, ec);
    return fail(std::move(r.error()).wrap("recording image " + name));
  }
  if (old) {
    fs::remove_all(old->path, ec);  // the tree it replaced (sweep, if a kill comes first)
    // Its VM disk was made from the old tree; the stamp no longer matches: rebuilt on demand.
  }
  return rec;
}

void Images::evict_cache(size_t keep) {
  auto all = store_.images();
  if (!all) return;
  std::vector<ImageRecord> cache;
  for (auto& r : *all)
    if (r.kind == "cache") cache.push_back(std::move(r));
  if (cache.size() <= keep) return;
  std::set<std::string> in_use;
  if (auto live = store_.live_sandboxes(); live)
    for (const auto& s : *live) in_use.insert(s.image);
  std::sort(cache.begin(), cache.end(),
            [](const ImageRecord& a, const ImageRecord& b) { return a.created_at > b.created_at; });
  size_t dropped = 0;
  for (size_t i = keep; i < cache.size(); ++i) {
    if (in_use.contains(cache[i].name)) continue;
    if (!store_.delete_image(cache[i].name)) continue;
    std::error_code ec;
    fs::remove_all(dir_ / cache[i].name, ec);
    ++dropped;
  }
  if (!dropped) return;
  std::lock_guard lock(content_mu_);
  collect_content();
  spdlog::info("images: dropped {} build cache entries (keeping the {} most recently used)",
               dropped, keep);
}

}  // namespace space::daemon
