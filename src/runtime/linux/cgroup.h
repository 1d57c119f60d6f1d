// Per-sandbox cgroups behind one interface, with two back ends in the manner of crun's
// managers: CgroupV2 (pure cgroup2 hosts, most of the world) and CgroupV1 (v1 controllers, plus
// on hybrid hosts a cgroup in the controller-less unified hierarchy for cgroup.kill,
// cgroup.freeze and CLONE_INTO_CGROUP). Each sandbox gets fresh cgroups at
// <mount>/<parent>/<sandbox id> (after cgroup.kill a cgroup cannot be reused). The runtime
// only ever creates and removes its own `<parent>` directories and their children.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "runtime/runtime.h"

namespace space::runtime::linux {

enum class CgroupMode { kV2, kV1, kHybrid };
std::string_view cgroup_mode_name(CgroupMode m);

// Where the hierarchies of this host are mounted.
struct CgroupLayout {
  CgroupMode mode = CgroupMode::kV2;
  std::filesystem::path root;     // the cgroup fs mount ("/sys/fs/cgroup")
  std::filesystem::path unified;  // the cgroup2 mount: root (v2), root/unified (hybrid), or ""
  // v1: controller -> its mount ("memory" -> /sys/fs/cgroup/memory). Empty on v2.
  std::vector<std::pair<std::string, std::filesystem::path>> v1;
};
Result<CgroupLayout> detect_cgroups(const std::filesystem::path& root = "/sys/fs/cgroup");

class Cgroup {
 public:
  virtual ~Cgroup() = default;  // releases fds only: remove() deletes the cgroups

  // Creates fresh cgroups for sandbox `id` under `parent` and applies the limits.
  static Result<std::unique_ptr<Cgroup>> create(const CgroupLayout& layout,
                                                const std::string& parent, const std::string& id,
                                                const Limits& limits);
  // Finds the cgroups of a persisted sandbox again (reattach, cleanup). Every path must be
  // <mount>/<parent>/<one component>; missing directories are tolerated so that cleanup stays
  // idempotent.
  static Result<std::unique_ptr<Cgroup>> open(const CgroupLayout& layout, const std::string& parent,
                                              const nlohmann::json& persisted);

  // An fd of the v2 (or unified) cgroup directory for clone3's CLONE_INTO_CGROUP, or -1.
  virtual int clone_into_fd() const = 0;
  // Moves `pid` into the cgroups CLONE_INTO_CGROUP did not cover (the v1 controllers).
  virtual Result<void> attach(pid_t pid) = 0;

  virtual Result<void> freeze() = 0;  // returns once every task is frozen (bounded wait)
  virtual Result<void> thaw() = 0;
  virtual Result<bool> frozen() const = 0;
  virtual Result<Usage> usage() const = 0;

  // Kills every task with cgroup.kill where the kernel has it; false if it could not.
  virtual bool kill_all() = 0;
  // Waits until no task is left (zombies excluded), up to `timeout`.
  virtual Result<void> wait_empty(std::chrono::milliseconds timeout) = 0;
  // Removes the sandbox's cgroups and the parent directories if they are empty. Idempotent.
  virtual Result<void> remove() = 0;

  virtual nlohmann::json persist() const = 0;
  // Every directory this cgroup owns (for tests and doctor).
  virtual std::vector<std::filesystem::path> paths() const = 0;
};

}  // namespace space::runtime::linux
