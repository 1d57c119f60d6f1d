// Images: the read-only trees sandboxes start from. `host` is a generated skeleton (a minimal
// /etc, the host's top-level symlinks such as /bin -> usr/bin, empty mount points) plus
// read-only binds of the host's /usr, /etc/ssl and /etc/alternatives. Imported images are
// root filesystems unpacked from a tar archive into the state directory. VM runtimes boot an
// ext4 disk made from an image's tree (build_vm, docs/vm-guest.md).
#pragma once

#include <filesystem>
#include <functional>
#include <mutex>
#include <string>

#include "common/error.h"
#include "daemon/service.h"
#include "daemon/store.h"
#include "runtime/runtime.h"

namespace space::daemon {

class Images {
 public:
  Images(std::filesystem::path dir, Store& store) : dir_(std::move(dir)), store_(store) {}

  // Creates the host skeleton if missing. Called once at start.
  Result<void> init();
  // Removes what an import, removal or VM disk build cut short by a kill left (init calls it).
  void sweep();
  Result<runtime::Image> resolve(const std::string& name);
  Result<ImageRecord> import(const std::string& name, const ChunkSource& source);
  Result<void> remove(const std::string& name);
  Result<std::vector<ImageRecord>> list();

  static Result<void> validate_name(const std::string& name);

  // The VM disk of an image: an ext4 filesystem labelled `space-image` holding the image's tree
  // with owners as the image means them (ids are not shifted: the VM's root is real root) and
  // `agent` at /.space/space-agent (0755, root). Built without loop mounts (mke2fs -d, then
  // debugfs -w) and checked with e2fsck -fn. Cached at <images>/<name>/vm.ext4 with a stamp
  // (image identity + the agent's SHA-256): reused while both match, rebuilt otherwise.
  // `progress` receives one line per step. The host image is refused: it is read-only binds
  // of the host's /usr, not a tree that fits a disk.
  struct VmDisk {
    std::filesystem::path path;
    uint64_t size_bytes = 0;  // apparent size of the (sparse) file
    bool cached = false;      // true: the existing disk was current and was reused
  };
  using Progress = std::function<void(const std::string&)>;
  Result<VmDisk> build_vm(const std::string& name, const std::filesystem::path& agent,
                          const Progress& progress);

 private:
  Result<void> build_host_skeleton(const std::filesystem::path& root);

  // The stamp a current VM disk of `rec` carries (without the agent part), and whether the
  // disk at <dir>/vm.ext4 is current for it (cheap: the agent is compared by size and mtime).
  static std::string vm_image_id(const ImageRecord& rec);
  std::filesystem::path current_vm_disk(const ImageRecord& rec);

  std::filesystem::path dir_;
  Store& store_;
  std::mutex vm_mu_;  // one VM disk build at a time
};

}  // namespace space::daemon
