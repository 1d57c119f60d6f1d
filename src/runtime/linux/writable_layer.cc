// The writable layer, made by the daemon (see writable_layer.h).
#include "runtime/linux/writable_layer.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace space::runtime::linux {

namespace {

Result<void> set_option(int fs_fd, const char* key, const std::string& value) {
  if (::fsconfig(fs_fd, FSCONFIG_SET_STRING, key, value.c_str(), 0) != 0) {
    return fail_sys("fsconfig", std::string("tmpfs ") + key + "=" + value);
  }
  return {};
}

Result<void> make_owned_dir(int layer_fd, const char* name, mode_t mode, uint32_t owner) {
  if (::mkdirat(layer_fd, name, mode) != 0) return fail_sys("mkdirat", name);
  // mkdirat applies the umask; the modes here are exact.
  if (::fchmodat(layer_fd, name, mode, 0) != 0) return fail_sys("fchmodat", name);
  if (::fchownat(layer_fd, name, owner, owner, AT_SYMLINK_NOFOLLOW) != 0) {
    return fail_sys("fchownat", name);
  }
  return {};
}

}  // namespace

Result<UniqueFd> make_writable_layer(const Limits& limits, uint32_t owner) {
  if (limits.disk_bytes < (1u << 20)) return fail(Code::kInvalidArgument, "disk limit below 1 MiB");
  // A superblock made here belongs to the host user namespace (writable_layer.h says why).
  UniqueFd context(::fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!context) return fail_sys("fsopen", "tmpfs");
  TRY_VOID(set_option(context.get(), "size", std::to_string(limits.disk_bytes)));
  TRY_VOID(set_option(context.get(), "nr_inodes", std::to_string(host::layer_inodes(limits))));
  TRY_VOID(set_option(context.get(), "mode", "0755"));
  TRY_VOID(set_option(context.get(), "uid", std::to_string(owner)));
  TRY_VOID(set_option(context.get(), "gid", std::to_string(owner)));
  if (::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return fail_sys("fsconfig", "tmpfs create");
  }
  UniqueFd layer(::fsmount(context.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!layer) return fail_sys("fsmount", "tmpfs");
  // Owned by sandbox root: overlayfs works in them with the mounter's (sandbox root's) rights.
  TRY_VOID(make_owned_dir(layer.get(), "upper", 0755, owner));
  TRY_VOID(make_owned_dir(layer.get(), "work", 0700, owner));
  return layer;
}

Result<void> populate_writable_layer(int layer_fd,
                                     const std::function<Result<void>(int)>& populate) {
  UniqueFd upper(::openat(layer_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper) return fail_sys("openat", "upper");
  TRY_VOID_CTX(populate(upper.get()), "populating the writable layer");
  return {};
}

}  // namespace space::runtime::linux
