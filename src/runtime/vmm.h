// What the microVM runtimes (qemu, firecracker) share on the host side of a running VM: one
// VMM process (a pidfd on it, its start time to recognise it after a daemon restart), the
// agent's channel, the empty network namespace the VMM runs in (where the gateway binds the
// sandbox's listeners), the sandbox's cgroup holding the VMM, machine.json's identity of the
// image disk the VM runs on, and whether its vCPUs are stopped. VmmInstance writes the
// Instance calls once: pause, resume, reading the writable disk, saving the machine and
// destroying it are the same steps for both around a few operations of the VMM's control
// connection (QMP, Firecracker's REST API), which each runtime implements (VmmInstance's
// protected interface). Launching the VMM in its jail (launch_vmm) and finding it again after
// a daemon restart (find_vmm, adopt_vmm, cleanup_vmm) are here too; the steps of starting one
// are vm_steps.h's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "host/cgroup.h"
#include "runtime/runtime.h"

namespace space::runtime::vm {

struct VmmParts {
  std::string id;
  pid_t pid = -1;
  uint64_t start_time = 0;
  bool is_child = true;  // spaced's own child (reaped by it), or one found after a restart
  UniqueFd pidfd, channel, netns;
  std::unique_ptr<host::Cgroup> cgroup;
  nlohmann::json machine;  // machine.json: image disk identity, memory, vCPUs
  bool destroyed = false;
  std::chrono::milliseconds stop_timeout{5000};
  // Held around every use of the control connection; guards `paused`.
  mutable std::mutex control_mu;
  bool paused = false;  // the vCPUs are stopped (a pause, a save, or a template's save)
};

class VmmInstance : public Instance {
 public:
  int channel_fd() const override { return base_.channel.get(); }
  int agent_pid() const override { return base_.pid; }
  int netns_fd() const override { return base_.netns.get(); }
  bool egress_over_channel() const override { return true; }
  Result<Usage> usage() const override;
  Result<UniqueFd> writable_layer() override;
  Result<void> check_resumable(const Image& image) const override;

  Result<void> pause() override;
  Result<void> resume() override;
  bool paused() const override;
  // `space diff` (runtime.h, vm_diff.h): the writable disk, read-only, while the vCPUs are
  // stopped (a VM that was paused stays paused).
  Result<void> read_writable_disk(const std::function<Result<void>(int)>& read) override;
  // Stops the VM (it stays stopped), has the VMM write it into `dir_fd` (vmm_save) and adds
  // machine.json (vm_steps.h, kSavedMachine).
  Result<void> save_machine(int dir_fd) override;
  // Lets go of the control connection, stops the VMM (stop_vmm), then remove_host_files().
  Result<void> destroy() override;

 protected:
  explicit VmmInstance(VmmParts& base) : base_(base) {}

  // The VMM's own operations, over its control connection. The shared steps call them with
  // control_mu held and only while has_control() (else they fail: the VM is destroyed).
  virtual bool has_control() const = 0;
  virtual void close_control() = 0;     // destroy(): the connection goes
  virtual Result<void> vmm_stop() = 0;  // the vCPUs stop
  virtual Result<void> vmm_cont() = 0;  // and go on
  // The writable disk, opened read-only.
  virtual Result<UniqueFd> open_writable_disk() = 0;
  // With the vCPUs stopped: the guest's memory and device state and the writable disk as new
  // files in `dir_fd` (the disk as kSavedDisk), which stay as they are while the VM is stopped.
  virtual Result<void> vmm_save(int dir_fd) = 0;
  // After destroy() stopped the VMM: what else of the VM is on the host (a jail) goes.
  virtual void remove_host_files() {}

  // For the runtime's own steps on a stopped VM (a template's save), control_mu held: fails
  // while the VM is destroyed, else stops its vCPUs unless they are (paused() is true after).
  Result<void> stop_locked();

  // Kills the VMM and everything in its cgroup, reaps it and removes the cgroup; the caller has
  // let go of its control connection. Then the channel and namespace handles go.
  Result<void> stop_vmm();
  // pid, start_time, machine and cgroups: the part of persist() that find_vmm() and
  // parse_vmm_persisted() read back.
  nlohmann::json persist_base() const;

 private:
  VmmParts& base_;
};

// What persist_base() wrote.
struct VmmPersisted {
  pid_t pid = 0;
  uint64_t start_time = 0;
  nlohmann::json cgroups, machine;
};
Result<VmmPersisted> parse_vmm_persisted(const nlohmann::json& j);

// A pidfd for the persisted VMM if that very process is alive (same start time) and its
// command line contains `needle` (the sandbox's name on it).
Result<UniqueFd> find_vmm(const VmmPersisted& p, const std::string& needle, const char* what);

// Fills the shared parts of a VM found again after a daemon restart: its network namespace
// (from /proc), its persisted cgroup and machine, with `pidfd` and `channel` already found.
Result<void> adopt_vmm(VmmParts& parts, const std::string& id, const VmmPersisted& p,
                       UniqueFd pidfd, UniqueFd channel, const host::CgroupLayout& layout,
                       const std::string& cgroup_name, std::chrono::milliseconds stop_timeout);

// Kills what a sandbox that could not be reattached left running: the VMM (where `p`, the
// persisted state, names it and it is still that process) and everything in sandbox `id`'s
// cgroup, which is removed: the persisted cgroup, or where create() puts it when nothing was
// persisted (`p` null: a create interrupted early; the VMM is born into that cgroup).
Result<void> cleanup_vmm(const VmmPersisted* p, const std::string& id, const std::string& needle,
                         const char* what, const host::CgroupLayout& layout,
                         const std::string& cgroup_name, std::chrono::milliseconds timeout);

// Starting a jailed VMM. The caller's child function runs in the clone with raw syscalls only
// (the daemon is multithreaded; the child is a copy of one thread): it waits for a byte on
// go_fd (by then it has joined every cgroup controller), reports a step that failed with
// child_failed(err_fd, step) and otherwise ends in exec (err_fd is O_CLOEXEC: the exec closes
// it, which tells the parent it worked).
struct ChildPipes {
  int go_fd = -1, err_fd = -1;
};
using ChildMain = void (*)(void* plan, ChildPipes pipes);  // never returns
[[noreturn]] void child_failed(int err_fd, int step);

struct LaunchedVmm {
  UniqueFd pidfd;
  pid_t pid = -1;
  uint64_t start_time = 0;
  UniqueFd netns;  // the child's network namespace
};
// clone3 with CLONE_PIDFD | `ns_flags` (straight into the cgroup where the kernel allows), the
// cgroup's other controllers attached, then the child released; returns once it has exec'd.
// A step the child reports fails with "<what>'s jail: <step_names[step]>: <errno>"; the child
// is killed and reaped on any failure.
Result<LaunchedVmm> launch_vmm(uint64_t ns_flags, host::Cgroup& cgroup, ChildMain child, void* plan,
                               const char* const* step_names, size_t n_steps,
                               const std::string& what, std::chrono::milliseconds stop);

// For a child between clone and exec: brings up `lo` in its new network namespace with raw
// syscalls only (async-signal-safe). 0, or -1 with errno set.
int bring_up_lo_raw();

}  // namespace space::runtime::vm
