// The libext2fs walk of a writable disk's `upper` directory (ext4_upper.h). Recursion is
// bounded by the path length (each level adds at least two bytes), cycles by the set of
// directories already listed, the whole walk by the entry limit.
#include "upper_reader/ext4_upper.h"

// ext2fs.h brings com_err.h (error_message) inside its extern "C", which com_err.h lacks.
#include <ext2fs/ext2fs.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

namespace space::upper_reader {
namespace {

using runtime::UpperEntry;

constexpr const char* kUpperDir = "upper";
constexpr const char* kOpaqueXattr = "trusted.overlay.opaque";

Error ext2_error(std::string_view what, errcode_t code) {
  return Error(Code::kProtocol, std::string(what) + ": " + error_message(code));
}

struct Fs {
  ext2_filsys fs = nullptr;
  ~Fs() {
    if (fs) ext2fs_close_free(&fs);
  }
};

struct Child {
  std::string name;
  ext2_ino_t ino;
};

class Walker {
 public:
  Walker(ext2_filsys fs, const WalkLimits& limits,
         const std::function<Result<void>(const UpperEntry&)>& emit)
      : fs_(fs), limits_(limits), emit_(emit) {}

  Result<void> dir(ext2_ino_t ino, const std::string& prefix) {
    if (!listed_.insert(ino).second)
      return fail(Code::kProtocol, "the directory " + shown(prefix) +
                                       " is also reached by another path (a damaged disk)");
    std::vector<Child> children = TRY(list(ino, prefix));
    for (const Child& c : children) {
      std::string path = prefix.empty() ? c.name : prefix + "/" + c.name;
      if (path.size() > limits_.max_path)
        return fail(Code::kProtocol, "a path under " + shown(prefix) + " is longer than " +
                                         std::to_string(limits_.max_path) + " bytes");
      if (++count_ > limits_.max_entries)
        return fail(Code::kResourceExhausted,
                    "more than " + std::to_string(limits_.max_entries) + " changed paths");
      ext2_inode_large inode;
      std::memset(&inode, 0, sizeof inode);
      errcode_t e =
          ext2fs_read_inode_full(fs_, c.ino, reinterpret_cast<ext2_inode*>(&inode), sizeof inode);
      if (e) return fail(ext2_error("reading the inode of " + shown(path), e));
      UpperEntry entry{.path = path};
      uint16_t mode = inode.i_mode;
      if (LINUX_S_ISDIR(mode)) {
        entry.type = UpperEntry::Type::kDir;
        entry.opaque = TRY(opaque(c.ino, path));
      } else if (LINUX_S_ISCHR(mode) && inode.i_block[0] == 0 && inode.i_block[1] == 0) {
        entry.type = UpperEntry::Type::kWhiteout;  // device 0:0 (either encoding)
      }
      entry.size = static_cast<int64_t>(EXT2_I_SIZE(&inode) & INT64_MAX);
      entry.mtime_ns = mtime_ns(inode);
      TRY_VOID(emit_(entry));
      if (entry.type == UpperEntry::Type::kDir) TRY_VOID(dir(c.ino, path));
    }
    return {};
  }

 private:
  static std::string shown(const std::string& rel) {
    return "\"" + runtime::encode_path(kUpperDir + (rel.empty() ? "" : "/" + rel)) + "\"";
  }

  // The entries of one directory (not "." and ".."), read in full before any is visited.
  Result<std::vector<Child>> list(ext2_ino_t ino, const std::string& prefix) {
    struct Ctx {
      std::vector<Child>* out;
      size_t budget;
      bool bad_name = false, too_many = false;
    };
    std::vector<Child> out;
    Ctx ctx{&out, limits_.max_entries - std::min(count_, limits_.max_entries) + 1};
    auto cb = [](ext2_ino_t, int entry, ext2_dir_entry* d, int, int, char*, void* p) -> int {
      auto* c = static_cast<Ctx*>(p);
      if (entry != DIRENT_OTHER_FILE || d->inode == 0) return 0;
      size_t len = static_cast<size_t>(ext2fs_dirent_name_len(d));
      std::string name(d->name, len);
      if (name == "." || name == "..") return 0;
      if (name.empty() || name.find('/') != std::string::npos ||
          name.find('\0') != std::string::npos) {
        c->bad_name = true;
        return DIRENT_ABORT;
      }
      if (c->out->size() >= c->budget) {
        c->too_many = true;
        return DIRENT_ABORT;
      }
      c->out->push_back({std::move(name), d->inode});
      return 0;
    };
    errcode_t e = ext2fs_dir_iterate2(fs_, ino, 0, nullptr, cb, &ctx);
    if (e) return fail(ext2_error("listing " + shown(prefix), e));
    if (ctx.bad_name)
      return fail(Code::kProtocol,
                  "a name in " + shown(prefix) + " is empty or holds '/' or NUL (a damaged disk)");
    if (ctx.too_many)
      return fail(Code::kResourceExhausted,
                  "more than " + std::to_string(limits_.max_entries) + " changed paths");
    return out;
  }

  Result<bool> opaque(ext2_ino_t ino, const std::string& path) {
    ext2_xattr_handle* h = nullptr;
    errcode_t e = ext2fs_xattrs_open(fs_, ino, &h);
    if (e) return fail(ext2_error("reading the xattrs of " + shown(path), e));
    struct Close {
      ext2_xattr_handle** h;
      ~Close() { ext2fs_xattrs_close(h); }
    } close{&h};
    e = ext2fs_xattrs_read(h);
    if (e) return fail(ext2_error("reading the xattrs of " + shown(path), e));
    void* value = nullptr;
    size_t len = 0;
    e = ext2fs_xattr_get(h, kOpaqueXattr, &value, &len);
    if (e == EXT2_ET_EA_KEY_NOT_FOUND) return false;
    if (e) return fail(ext2_error("reading the xattrs of " + shown(path), e));
    bool y = len >= 1 && static_cast<const char*>(value)[0] == 'y';
    ext2fs_free_mem(&value);
    return y;
  }

  // As the kernel decodes it (ext4_decode_extra_time): the signed 32-bit seconds, plus the
  // extra field's two epoch bits and 30 nanosecond bits where the inode is large enough.
  int64_t mtime_ns(const ext2_inode_large& inode) const {
    int64_t sec = static_cast<int32_t>(inode.i_mtime);
    int64_t nsec = 0;
    constexpr size_t kEnd = offsetof(ext2_inode_large, i_mtime_extra) + sizeof(uint32_t);
    size_t inode_size = EXT2_INODE_SIZE(fs_->super);
    if (inode_size >= kEnd &&
        static_cast<size_t>(EXT2_GOOD_OLD_INODE_SIZE + inode.i_extra_isize) >= kEnd) {
      uint32_t extra = inode.i_mtime_extra;
      sec += static_cast<int64_t>(extra & 3) << 32;
      nsec = extra >> 2;
    }
    return sec * 1000000000 + nsec;
  }

  ext2_filsys fs_;
  const WalkLimits& limits_;
  const std::function<Result<void>(const UpperEntry&)>& emit_;
  std::unordered_set<ext2_ino_t> listed_;
  size_t count_ = 0;
};

}  // namespace

void prepare() { initialize_ext2_error_table(); }

Result<void> walk_upper(int disk_fd, const WalkLimits& limits,
                        const std::function<Result<void>(const UpperEntry&)>& emit) {
  // unixfd_io_manager takes the fd as a decimal string; with no IO_FLAG_RW it reads only.
  // Checksum errors are not fatal: every byte here is the guest's anyway, and a block the
  // guest rewrote between its sync and the VM's stop must not fail the whole diff.
  std::string name = std::to_string(disk_fd);
  Fs f;
  errcode_t e = ext2fs_open2(name.c_str(), nullptr,
                             EXT2_FLAG_64BITS | EXT2_FLAG_SKIP_MMP | EXT2_FLAG_IGNORE_CSUM_ERRORS,
                             0, 0, unixfd_io_manager, &f.fs);
  if (e) return fail(ext2_error("the writable disk is not a readable ext4 file system", e));
  ext2_ino_t upper = 0;
  e = ext2fs_lookup(f.fs, EXT2_ROOT_INO, kUpperDir, static_cast<int>(std::strlen(kUpperDir)),
                    nullptr, &upper);
  if (e) return fail(ext2_error("the writable disk has no readable \"upper\" directory", e));
  ext2_inode inode;
  e = ext2fs_read_inode(f.fs, upper, &inode);
  if (e) return fail(ext2_error("reading the inode of \"upper\"", e));
  if (!LINUX_S_ISDIR(inode.i_mode))
    return fail(Code::kProtocol, "\"upper\" on the writable disk is not a directory");
  Walker w(f.fs, limits, emit);
  return w.dir(upper, "");
}

}  // namespace space::upper_reader
