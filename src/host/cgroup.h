// Per-sandbox cgroups behind one interface, with two back ends in the manner of crun's
// managers: CgroupV2 (pure cgroup2 hosts, most of the world) and CgroupV1 (v1 controllers, plus
// on hybrid hosts a cgroup in the controller-less unified hierarchy for cgroup.kill,
// cgroup.freeze and CLONE_INTO_CGROUP). Each sandbox gets fresh cgroups at
// <base>/<parent>/<sandbox id> (after cgroup.kill a cgroup cannot be reused). The runtime
// only ever creates and removes its own `<parent>` directories and their children.
//
// <base> is the hierarchy's mount on v1 and hybrid hosts. On pure cgroup2 hosts it is the
// subtree delegated to spaced (docs/hosts.md): $SPACE_CGROUP_BASE when set (a cgroup another
// unit owns, e.g. the space-sandboxes.service that deploy/systemd/spaced.service starts), else
// spaced's own cgroup (the "0::" line of /proc/self/cgroup; its parent when that is already
// `<own>/supervisor`), else the root when spaced runs in the root or shares its cgroup with
// processes that are not its own (no delegation). Before the first sandbox, the processes in
// <base> itself (spaced, or a unit's holder process) move into the leaf <base>/supervisor, so
// that <base> has no internal processes and memory, pids and cpu can be enabled in its
// cgroup.subtree_control.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "host/limits.h"

namespace space::host {

enum class CgroupMode { kV2, kV1, kHybrid };
std::string_view cgroup_mode_name(CgroupMode m);

// Where the hierarchies of this host are mounted.
struct CgroupLayout {
  CgroupMode mode = CgroupMode::kV2;
  std::filesystem::path root;     // the cgroup fs mount ("/sys/fs/cgroup")
  std::filesystem::path unified;  // the cgroup2 mount: root (v2), root/unified (hybrid), or ""
  // v2: where sandbox cgroups go (<base>/<parent>/<id>): the root or spaced's delegated
  // subtree (see above). v1 and hybrid: empty (each hierarchy's mount is the base).
  std::filesystem::path base;
  // v1: controller -> its mount ("memory" -> /sys/fs/cgroup/memory). Empty on v2.
  std::vector<std::pair<std::string, std::filesystem::path>> v1;
};
// Reads the host's layout and, on v2, chooses the base; it changes nothing (the move into
// <base>/supervisor happens at the first Cgroup::create).
Result<CgroupLayout> detect_cgroups(const std::filesystem::path& root = "/sys/fs/cgroup");

// The cgroup2 path ("0::" line) in the text of /proc/<pid>/cgroup; nullopt if there is none
// (a v1-only host) or it is not absolute.
std::optional<std::string> unified_cgroup_path(std::string_view proc_pid_cgroup);
// Where a daemon whose cgroup2 path is `own` keeps its sandboxes under the cgroup2 mount
// `mount`: the mount itself for "/", the parent of a `.../supervisor` leaf (the daemon already
// moved there, or its service manager started it there), else `own`.
std::filesystem::path delegated_base(const std::filesystem::path& mount, std::string_view own);
// The leaf below the base for the processes that are not sandboxes.
inline constexpr std::string_view kSupervisorLeaf = "supervisor";

class Cgroup {
 public:
  virtual ~Cgroup() = default;  // releases fds only: remove() deletes the cgroups

  // Creates fresh cgroups for sandbox `id` under `parent` and applies the limits.
  static Result<std::unique_ptr<Cgroup>> create(const CgroupLayout& layout,
                                                const std::string& parent, const std::string& id,
                                                const Limits& limits);
  // Finds the cgroups of a persisted sandbox again (reattach, cleanup). Every path must be
  // <base>/<parent>/<one component>; missing directories are tolerated so that cleanup stays
  // idempotent.
  static Result<std::unique_ptr<Cgroup>> open(const CgroupLayout& layout, const std::string& parent,
                                              const nlohmann::json& persisted);
  // Where create() puts sandbox `id`'s cgroups on this layout, in persist()'s form, without
  // creating anything: what open() needs to find the cgroups of a create that was interrupted
  // before its instance was persisted (the paths depend on the id alone).
  static nlohmann::json planned(const CgroupLayout& layout, const std::string& parent,
                                const std::string& id);

  // An fd of the v2 (or unified) cgroup directory for clone3's CLONE_INTO_CGROUP, or -1.
  virtual int clone_into_fd() const = 0;
  // Moves `pid` into the cgroups CLONE_INTO_CGROUP did not cover (the v1 controllers).
  virtual Result<void> attach(pid_t pid) = 0;

  virtual Result<void> freeze() = 0;  // returns once every task is frozen (bounded wait)
  virtual Result<void> thaw() = 0;
  virtual Result<bool> frozen() const = 0;
  virtual Result<Usage> usage() const = 0;
  virtual uint64_t oom_kills() const = 0;  // Usage::oom_kills alone

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

// Kills every process in sandbox `id`'s cgroups (those `persisted` names, or the planned ones
// where it names none), waits for them to go and removes the cgroups. Processes born into the
// cgroup (CLONE_INTO_CGROUP) die with it even if nothing of them was recorded. Idempotent.
Result<void> remove_sandbox_cgroups(const CgroupLayout& layout, const std::string& parent,
                                    const std::string& id, const nlohmann::json& persisted,
                                    std::chrono::milliseconds timeout);

}  // namespace space::host
