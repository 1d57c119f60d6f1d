// The `linux` runtime: each sandbox is a namespace jail (user, pid, mount, network, uts, ipc,
// cgroup namespaces; overlay root over a read-only image; pivot_root; a reduced capability
// set, no_new_privs and a seccomp policy; cgroup limits) whose PID 1 is space-agent.
//
// create() is the recipe: cgroups -> network namespace -> staging directory -> writable layer,
// filled by spec.populate_upper if set (writable_layer.h) -> launch (see launcher.h). Every
// step leaves a guard; a failure unwinds them in reverse, so a failed create leaves no cgroup,
// process, mount or fd behind.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "host/caps.h"
#include "host/cgroup.h"
#include "host/seccomp.h"
#include "runtime/runtime.h"

namespace space::runtime::linux {

struct Config {
  std::filesystem::path agent_path;   // host path of the space-agent binary
  std::string cgroup_name = "space";  // cgroups are <mount>/<cgroup_name>/<sandbox id>
  std::filesystem::path cgroup_root = "/sys/fs/cgroup";
  uint64_t nofile = 4096;                          // RLIMIT_NOFILE inside (never above the host's)
  std::chrono::milliseconds start_timeout{10000};  // clone to agent exec
  std::chrono::milliseconds stop_timeout{5000};    // SIGKILL to empty cgroups
};

class LinuxInstance final : public Instance {
 public:
  struct Parts;
  explicit LinuxInstance(std::unique_ptr<Parts> parts);
  ~LinuxInstance() override;

  int channel_fd() const override;
  int agent_pid() const override;
  Result<void> pause() override;
  Result<void> resume() override;
  bool paused() const override;
  Result<Usage> usage() const override;
  Result<uint64_t> oom_kills() const override;
  Result<void> destroy() override;
  Result<UniqueFd> writable_layer() override;
  nlohmann::json persist() const override;

  // The sandbox's network namespace (owned by the host user namespace), for the egress
  // gateway's listeners. -1 after destroy().
  int netns_fd() const override;
  // The agent's pidfd (posture checks, tests).
  int pidfd() const;
  // The sandbox's cgroup directories.
  std::vector<std::filesystem::path> cgroup_paths() const;

 private:
  std::unique_ptr<Parts> p_;
};

class LinuxRuntime final : public Runtime {
 public:
  using Config = linux::Config;
  static Result<std::unique_ptr<LinuxRuntime>> create(Config config);

  std::string_view name() const override { return "linux"; }
  bool has_writable_layer() const override { return true; }
  Result<std::unique_ptr<Instance>> create(const SandboxSpec& spec) override;
  Result<std::unique_ptr<Instance>> reattach(const SandboxSpec& spec,
                                             const nlohmann::json& persisted) override;
  Result<void> cleanup(const SandboxSpec& spec, const nlohmann::json& persisted) override;
  nlohmann::json doctor() const override;

  const Config& config() const { return config_; }
  const host::SeccompProgram& seccomp_program() const { return seccomp_; }

 private:
  LinuxRuntime(Config config, host::SeccompProgram seccomp, host::SeccompProgram seccomp_notify,
               host::CapPlan caps);
  Result<std::unique_ptr<Instance>> start(const SandboxSpec& spec);
  Result<const host::CgroupLayout*> cgroup_layout() const;

  Config config_;
  host::SeccompProgram seccomp_;
  host::SeccompProgram seccomp_notify_;  // the same plus exec notifications (spec.exec_events)
  host::CapPlan caps_;
  UniqueFd agent_;  // sealed memfd, or invalid with agent_error_ set
  std::optional<Error> agent_error_;
  Result<host::CgroupLayout> layout_;
};

}  // namespace space::runtime::linux

namespace space::runtime {
// `linux` is a predefined macro in GNU C++ mode (the build passes -Ulinux); code that would rather
// not depend on that spells the namespace linux_rt.
namespace linux_rt = linux;
}  // namespace space::runtime
