// Images: the read-only trees sandboxes start from. `host` is a generated skeleton (a minimal
// /etc, the host's top-level symlinks such as /bin -> usr/bin, empty mount points) plus
// read-only binds of the host's /usr, /etc/ssl and /etc/alternatives. Imported images are
// unpacked into the state directory from what a client uploads: a root-filesystem tar archive,
// an OCI image layout (a directory the CLI tars, or an oci-archive) or a `docker save` archive,
// whose layers are applied in order and whose config (Env, WorkingDir, User, Entrypoint, Cmd,
// Labels) is kept with the record (docs/images.md). Files of imported images are shared
// through one content store (<images>/.content, hard links), so images that differ in one
// layer cost about one layer more. VM runtimes boot an ext4 disk made from an image's tree
// (build_vm, docs/vm-guest.md).
#pragma once

#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/error.h"
#include "daemon/config.h"
#include "daemon/service.h"
#include "daemon/store.h"
#include "image/layer.h"
#include "runtime/runtime.h"

namespace space::daemon {

class Images {
 public:
  Images(std::filesystem::path dir, Store& store, const ImageImportConfig& import = {});

  // Creates the host skeleton if missing. Called once at start.
  Result<void> init();
  // Removes what an import, removal or VM disk build cut short by a kill left (init calls it).
  void sweep();
  Result<runtime::Image> resolve(const std::string& name);
  // Reads the upload (a tar archive, plain or compressed) into a staging directory
  // <images>/.import-NAME-RAND/, sees what it is (an OCI layout, a docker-save archive, else a
  // root filesystem), builds the tree, shares its files with the content store and installs it
  // under <images>/NAME. Any failure, or a kill (sweep), leaves nothing of it behind.
  Result<ImageRecord> import(const std::string& name, const ChunkSource& source);
  // The defaults an image's config gives its sandboxes ({} when it has none); kNotFound for an
  // unknown image.
  Result<image::ImageConfig> config(const std::string& name);
  Result<void> remove(const std::string& name);
  Result<std::vector<ImageRecord>> list();

  static Result<void> validate_name(const std::string& name);

  // --- For image builds (daemon/image_build.cc; docs/images.md, "The build cache") ---------
  // A build step's tree is kept as a hidden record ".cache-<key>" (kind "cache", not listed,
  // never named by users) at <images>/.cache-<key>/rootfs; a built image is kind "built",
  // format "dockerfile", its tree at <images>/NAME/rootfs-<digest prefix>.
  static std::string cache_name(const std::string& key);
  // The cache entry of `key`, if there is one (and marks it used, for eviction).
  Result<std::optional<ImageRecord>> cache_get(const std::string& key);
  // Unpacks a build context upload into `into` (made here) as an import's upload is: the
  // same limits, no device nodes, names cleaned.
  Result<void> unpack_context(const ChunkSource& source, const std::filesystem::path& into);
  // Makes `work`/rootfs a hard-link copy of the tree `from`, lets `change` alter it (it gets
  // the new root's fd), shares its files and installs it as the cache entry of `key`. `work`
  // is a fresh directory of the caller's staging area.
  Result<ImageRecord> commit_step(const std::string& key, const std::filesystem::path& from,
                                  const std::filesystem::path& work,
                                  const std::function<Result<void>(int root_fd)>& change);
  // Applies a layer tar (image::upper_layer, image::copy_layer) onto a tree being built, with
  // the import limits and the setuid rule.
  Result<void> apply_build_layer(const std::filesystem::path& tar, int root_fd,
                                 const std::string& what);
  // Installs image `name` (kind "built", format "dockerfile") as a hard-link copy of the tree
  // `from`, with `config` and `digest`. An existing image of that name is replaced if it was
  // built too and no live sandbox uses it; anything else is refused (before any work: call
  // check_build_target first).
  Result<void> check_build_target(const std::string& name);
  Result<ImageRecord> install_built(const std::string& name, const std::filesystem::path& from,
                                    const nlohmann::json& config, const std::string& digest);
  // Drops the least recently used cache entries beyond `keep` (entries a live sandbox uses
  // stay).
  void evict_cache(size_t keep);

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

  // Unpacks the uploaded tar into `into` with libarchive's secure extraction flags; owners,
  // modes and times kept, device nodes skipped, at most max_total_bytes and max_entries.
  struct Unpacked {
    uint64_t entries = 0, bytes = 0;
  };
  Result<Unpacked> unpack_upload(const ChunkSource& source, const std::filesystem::path& into);
  // Applies the layers of the image staged at `upload` onto `rootfs` (created here).
  Result<image::Resolved> build_from_layers(const std::filesystem::path& upload,
                                            const std::filesystem::path& rootfs);

  // The content store (<images>/.content/<2 hex>/<sha256>-<mode>-<uid>-<gid>): replaces each
  // regular file of `rootfs` by a hard link to the store's entry of the same content, mode and
  // owner (adding it when there is none). Counts the tree's entries and file bytes. Called
  // with content_mu_ held. Files whose inode is in `in_store` (a tree hard-linked from one
  // that was shared already) are counted, not hashed again.
  struct TreeStats {
    uint64_t files = 0, bytes = 0;          // entries (all kinds) and regular files' bytes
    uint64_t shared = 0, shared_bytes = 0;  // files linked to an entry another image had
  };
  Result<TreeStats> share_content(const std::filesystem::path& rootfs,
                                  const std::set<ino_t>* in_store = nullptr);
  // Drops store entries no image links any more (link count 1) and temporary names a kill
  // left. Called with content_mu_ held.
  void collect_content();

  // The stamp a current VM disk of `rec` carries (without the agent part), and whether the
  // disk at <dir>/vm.ext4 is current for it (cheap: the agent is compared by size and mtime).
  static std::string vm_image_id(const ImageRecord& rec);
  std::filesystem::path current_vm_disk(const ImageRecord& rec);

  std::filesystem::path dir_;
  Store& store_;
  image::Limits limits_;
  bool keep_setuid_ = false;
  std::mutex content_mu_;  // one pass over the content store at a time (share or collect)
  std::mutex vm_mu_;       // one VM disk build at a time
};

}  // namespace space::daemon
