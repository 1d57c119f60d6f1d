// Images: the read-only trees sandboxes start from. `host` is a generated skeleton (a minimal
// /etc, the host's top-level symlinks such as /bin -> usr/bin, empty mount points) plus
// read-only binds of the host's /usr, /etc/ssl and /etc/alternatives. Imported images are
// root filesystems unpacked from a tar archive into the state directory.
#pragma once

#include <filesystem>
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
  Result<runtime::Image> resolve(const std::string& name);
  Result<ImageRecord> import(const std::string& name, const ChunkSource& source);
  Result<void> remove(const std::string& name);
  Result<std::vector<ImageRecord>> list();

  static Result<void> validate_name(const std::string& name);

 private:
  Result<void> build_host_skeleton(const std::filesystem::path& root);

  std::filesystem::path dir_;
  Store& store_;
};

}  // namespace space::daemon
