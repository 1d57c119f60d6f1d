// `space diff`: what a sandbox changed since its creation, from its overlay's upper layer
// against the image. Two ways to read the upper layer, one way to judge it:
//  * linux: the writable layer is a host directory (Instance::writable_layer); the daemon walks
//    its `upper/` itself, never following a symlink;
//  * microVMs: the upper layer is a directory on the VM's own ext4 disk, which the host never
//    mounts. The agent syncs the guest's file system, the runtime stops the VM, and a confined
//    space-upper-reader lists the disk's `upper` (runtime/vm_diff.h).
// Both give UpperEntry lists that classify() turns into a Diff (added, changed, deleted): a
// whiteout is a deletion; a directory is added if the image lacks it and changed if it is
// opaque (its lower contents hidden); anything else is changed if the image has it, else added.
// What the daemon or the runtime made at creation (the `installed` record) is not a change.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/openat2.h"
#include "daemon/daemon.h"
#include "runtime/upper_listing.h"
#include "runtime/vm_diff.h"

namespace space::daemon {
using nlohmann::json;
using runtime::UpperEntry;

namespace {

constexpr size_t kMaxDiffEntries = 100000;

Error too_many() {
  return Error(Code::kResourceExhausted, "more than " + std::to_string(kMaxDiffEntries) +
                                             " changed paths; use `space cp` to inspect");
}

// The linux runtime's upper directory, depth first, parents before children. Entries that
// vanish while it walks, and directories it cannot open, are left out.
Result<std::vector<UpperEntry>> walk_host_upper(int upper_fd) {
  std::vector<UpperEntry> out;
  size_t count = 0;
  std::function<Result<void>(int, const std::string&)> visit =
      [&](int dirfd, const std::string& prefix) -> Result<void> {
    int dup = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dup < 0) return fail_sys("openat", prefix);
    DIR* d = ::fdopendir(dup);
    if (!d) {
      ::close(dup);
      return fail_sys("fdopendir", prefix);
    }
    std::unique_ptr<DIR, int (*)(DIR*)> closer(d, ::closedir);
    while (dirent* de = ::readdir(d)) {
      std::string name = de->d_name;
      if (name == "." || name == "..") continue;
      if (++count > kMaxDiffEntries) return fail(too_many());
      std::string rel = prefix.empty() ? name : prefix + "/" + name;
      struct stat st;
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      UpperEntry e{.path = rel,
                   .size = st.st_size,
                   .mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
      if (S_ISCHR(st.st_mode) && st.st_rdev == 0) e.type = UpperEntry::Type::kWhiteout;
      if (!S_ISDIR(st.st_mode)) {
        out.push_back(std::move(e));
        continue;
      }
      UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) continue;
      // The overlay is mounted with userxattr: its metadata is in user.overlay.*.
      char v[4] = {0};
      e.type = UpperEntry::Type::kDir;
      e.opaque = ::fgetxattr(sub.get(), "user.overlay.opaque", v, sizeof v) > 0 && v[0] == 'y';
      out.push_back(std::move(e));
      TRY_VOID(visit(sub.get(), rel));
    }
    return {};
  };
  TRY_VOID(visit(upper_fd, ""));
  return out;
}

Diff classify(const std::vector<UpperEntry>& entries,
              const std::function<bool(const std::string&)>& in_lower, const json& installed) {
  std::set<std::string> added, changed, deleted;
  for (const UpperEntry& e : entries) {
    std::string abs = "/" + e.path;
    if (e.type == UpperEntry::Type::kWhiteout) {
      deleted.insert(abs);
      continue;
    }
    const bool dir = e.type == UpperEntry::Type::kDir;
    if (auto it = installed.find(abs); it != installed.end() && it->is_object()) {
      bool same = it->value("dir", false) == dir &&
                  (dir || (it->value("size", int64_t{-1}) == e.size &&
                           it->value("mtime_ns", int64_t{-1}) == e.mtime_ns));
      if (same) continue;
    }
    bool existed = in_lower(e.path);
    if (dir) {
      if (!existed)
        added.insert(abs);
      else if (e.opaque)
        changed.insert(abs);
    } else {
      (existed ? changed : added).insert(abs);
    }
  }
  auto list = [](const std::set<std::string>& s) { return std::vector(s.begin(), s.end()); };
  return Diff{.added = list(added), .changed = list(changed), .deleted = list(deleted)};
}

}  // namespace

Result<Diff> Daemon::diff(const std::string& id) {
  auto sb = TRY(live(id));
  std::vector<UpperEntry> entries;
  std::set<std::string> lower_extras;
  json installed = sb->rec.spec.value("installed", json::object());
  if (!installed.is_object()) installed = json::object();
  auto layer = sb->inst->writable_layer();
  if (layer) {
    UniqueFd upper(
        ::openat(layer->get(), "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!upper) return fail_sys("openat", "upper");
    entries = TRY(walk_host_upper(upper.get()));
  } else if (layer.error().code() != Code::kUnimplemented) {
    return fail(std::move(layer.error()).wrap("opening the writable layer of " + id));
  } else {
    // A microVM: what the guest wrote is on its own disk, partly still in its page cache.
    std::string ctx = "reading the writable disk of " + id;
    sb = TRY_CTX(running(id), ctx + " (the guest must flush its writes first)");
    TRY_VOID_CTX(sb->conn->request({{"op", "sync"}}, std::chrono::seconds(60)),
                 ctx + ": syncing the guest's file system");
    runtime::vm::UpperReader reader{.exe = runtime::vm::default_upper_reader(),
                                    .uid = sb->spec.uid_base,
                                    .max_entries = kMaxDiffEntries};
    auto r = sb->inst->read_writable_disk([&](int disk_fd) -> Result<void> {
      entries = TRY(runtime::vm::read_upper(disk_fd, reader));
      return {};
    });
    if (!r) return fail(std::move(r.error()).wrap(ctx));
    for (const char* p : runtime::vm::kImageDiskExtras) lower_extras.insert(p);
  }

  UniqueFd lower(::open(sb->spec.image.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!lower) return fail_sys("open", sb->spec.image.rootfs.string());
  auto in_lower = [&](const std::string& rel) {
    if (lower_extras.contains(rel)) return true;
    UniqueFd fd(sys_openat2(lower.get(), rel.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC,
                            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
    return fd.valid();
  };
  return classify(entries, in_lower, installed);
}

}  // namespace space::daemon
