// The runtime interface: what the daemon needs from any way of running a sandbox: the linux
// runtime's namespace jail (runtime/linux), a QEMU microVM (runtime/qemu) or a Firecracker
// microVM (runtime/firecracker); the VM runtimes share their host side (vmm.h, vm_steps.h,
// vm_host.h) and registry.h names them all. A runtime creates a sandbox from a spec and hands
// back an Instance whose only link to the inside is a byte stream to the in-sandbox agent
// (space-agent, PID 1 / init); everything else (exec, files, ps) goes over that stream, so it
// is the same for every runtime.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "common/step_times.h"
#include "host/limits.h"

namespace space::runtime {

// What a sandbox may use of the host and what it used (host/limits.h, shared with the host
// toolkit's cgroups).
using host::Limits;
using host::Usage;

// What a profile asks of a microVM's devices (spaced's config: profiles.NAME.vm,
// docs/configuration.md). The firecracker runtime applies them; the others ignore them.
struct VmDevices {
  uint64_t disk_bytes_per_s = 0;  // rate limit of the writable disk; 0 = none
  uint64_t disk_ops_per_s = 0;    // operations per second on it; 0 = none
  // A memory balloon, deflated on OOM: the host can take back memory the guest frees
  // (Firecracker's virtio-balloon). Its statistics show in `usage`.
  bool balloon = false;
};

struct Image {
  std::string name;              // "host" or an imported image's name
  std::filesystem::path rootfs;  // directory used as the read-only lower layer
  // Host directories bind-mounted read-only (nosuid, nodev) at the same path inside, over the
  // lower layer. The "host" image uses {/usr, /etc/ssl, /etc/alternatives}; its rootfs is a
  // generated skeleton holding a minimal /etc and the host's top-level symlinks (/bin -> usr/bin).
  std::vector<std::filesystem::path> ro_binds;
  // The image as an ext4 disk for microVMs (`space image build-vm`), with space-agent at
  // /.space/space-agent; empty if it has not been built (or is out of date).
  std::filesystem::path vm_disk;
};

struct SandboxSpec {
  std::string id;  // "sb_<hex>", also the hostname
  Image image;
  Limits limits;
  VmDevices vm;
  std::filesystem::path dir;  // per-sandbox state directory, created by the daemon
  uint32_t uid_base = 0;      // first host uid/gid of the sandbox's 65536-id range
  static constexpr uint32_t kIdRange = 65536;
  // Exec auditing: if set, every execve/execveat inside the sandbox is reported here (data of
  // a "proc.exec" audit event, docs/audit.md) before it runs; the call may block, and the exec
  // waits. Called on a runtime thread. Runtimes that cannot observe execs ignore it.
  std::function<void(nlohmann::json)> exec_events;
  // Fills the writable layer before the sandbox starts (snapshot rollback and restore). If set,
  // the runtime calls it once, in the daemon's process (never in a sandbox process), after the
  // layer exists with an empty `upper` directory and before the overlay is mounted or any
  // process of the sandbox runs. `upper_dir_fd` is `upper` opened O_RDONLY|O_DIRECTORY; the
  // runtime closes it when the call returns.
  //
  // The callback runs as host root and writes what overlayfs will find in its upper layer:
  //  * owners are host ids: sandbox id N is uid_base + N (chown every entry: what it creates
  //    belongs to host root, which the sandbox sees as nobody and cannot change);
  //  * whiteouts are character devices 0:0; opaque directories carry the xattr
  //    user.overlay.opaque = "y" (the overlay is mounted with userxattr, so overlay metadata is
  //    in user.overlay.*, never trusted.*);
  //  * the layer is a detached mount that the host's paths do not reach: resolve everything
  //    relative to `upper_dir_fd` and never through a symlink it holds (openat2 with
  //    RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or O_NOFOLLOW on each component), since an absolute
  //    symlink written there resolves on the host.
  // Its writes count against limits.disk_bytes and disk_inodes (ENOSPC when full); their pages
  // are charged to the daemon's memory cgroup (the writer's), not the sandbox's. An error it
  // returns fails create() with that error as the cause, and nothing is left behind. Runtimes
  // without a writable layer fail create() with kUnimplemented when it is set.
  std::function<Result<void>(int upper_dir_fd)> populate_upper;
  // Starts the sandbox from a saved machine instead of booting it (snapshot rollback and
  // restore, runtimes whose keeps_machine_state() is true). The runtime calls it once, in the
  // daemon's process, with an empty directory of its own (opened O_RDONLY|O_DIRECTORY) that
  // the callback fills with what Instance::save_machine() wrote; the sandbox then goes on where
  // it was saved: its memory, processes and disk. Its agent keeps the state it had, so the
  // daemon pings it ("reattach", docs/agent-protocol.md) before it says hello. An error it
  // returns fails create(), and nothing is left behind.
  std::function<Result<void>(int dir_fd)> restore_machine;
  // If set, create() marks its steps here (cgroup, netns, layer, launch, ...).
  StepTimes* times = nullptr;
};

class Instance {
 public:
  virtual ~Instance() = default;  // releases host handles; does not destroy the sandbox

  // The byte stream to the agent (socketpair, virtio-serial socket, vsock). The instance owns
  // it; the daemon reads and writes frames on it.
  virtual int channel_fd() const = 0;
  // Host pid of the agent (for logs, ps translation and the posture check).
  virtual int agent_pid() const = 0;
  // The sandbox's network namespace, where the egress gateway binds its listeners; -1 for
  // runtimes without one.
  virtual int netns_fd() const { return -1; }
  // True for VMs: the sandbox reaches the gateway's listeners in netns_fd() only through the
  // agent, which carries its connections over the channel (docs/agent-protocol.md, "Egress");
  // the daemon relays them. False: the sandbox's processes live in netns_fd() themselves.
  virtual bool egress_over_channel() const { return false; }
  // True when the sandbox did not boot but went on from a saved machine that the runtime chose
  // itself (the firecracker runtime restores every sandbox from its image's template): its
  // agent has another sandbox's hostname, clock and entropy until the daemon resyncs it, as
  // after SandboxSpec::restore_machine.
  virtual bool resumed_from_template() const { return false; }

  virtual Result<void> pause() = 0;
  virtual Result<void> resume() = 0;
  virtual bool paused() const = 0;
  virtual Result<Usage> usage() const = 0;
  // usage().oom_kills alone: read before and after every exec, so a runtime that can read
  // just that counter (one file instead of five) does.
  virtual Result<uint64_t> oom_kills() const { return TRY(usage()).oom_kills; }

  // Kills every process of the sandbox and removes every host object it had (cgroups,
  // directories, namespaces). Idempotent; safe to call on a half-dead sandbox.
  virtual Result<void> destroy() = 0;

  // The root of the sandbox's writable layer, opened O_PATH|O_DIRECTORY (for diff and
  // snapshots). Runtimes without one return kUnimplemented.
  virtual Result<UniqueFd> writable_layer() = 0;
  // For runtimes whose writable layer is a disk the host does not mount (microVMs; for diff):
  // calls `read` with that disk open read-only while the VM is stopped, so its blocks hold still,
  // and lets it go on afterwards (a VM that was paused stays paused). Pause, resume and saves
  // wait meanwhile. The caller has the guest flush its writes first (agent op `sync`). What the
  // disk holds was written by the guest: only a confined reader parses it (vm_diff.h).
  // kUnimplemented elsewhere.
  virtual Result<void> read_writable_disk(const std::function<Result<void>(int disk_fd)>& read) {
    return fail(Code::kUnimplemented, "this runtime has no writable disk");
  }

  // Snapshots of the whole machine (runtimes whose keeps_machine_state() is true): stops the
  // sandbox and writes its complete state (memory, devices and disk) into the empty directory
  // `dir_fd` as regular files, for SandboxSpec::restore_machine. The sandbox is left stopped
  // (paused() is true) so that the files stay consistent while they are read; resume() goes on.
  virtual Result<void> save_machine(int /*dir_fd*/) {
    return fail(Code::kUnimplemented, "this runtime does not save machines");
  }
  // Whether a machine saved from this sandbox can resume on `image` as the host has it now (a
  // VM's memory caches blocks of the very image disk it runs on): checked before a rollback
  // destroys the sandbox.
  virtual Result<void> check_resumable(const Image& /*image*/) const { return {}; }

  // What reattach() needs to find this sandbox again after a daemon restart.
  virtual nlohmann::json persist() const = 0;

  // Facts of this runtime about the sandbox for `space inspect` (a VM's accelerator and why),
  // or null.
  virtual nlohmann::json details() const { return nullptr; }
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view name() const = 0;
  // Whether create() honours SandboxSpec::populate_upper (the sandbox has a writable layer
  // the host can fill before it starts).
  virtual bool has_writable_layer() const { return false; }
  // Whether its snapshots hold the whole machine (Instance::save_machine, SandboxSpec::
  // restore_machine: VMs) rather than the writable layer's files.
  virtual bool keeps_machine_state() const { return false; }

  // Creates and starts a sandbox; on return the agent is running and the channel is open.
  // On failure nothing is left behind.
  virtual Result<std::unique_ptr<Instance>> create(const SandboxSpec& spec) = 0;

  // After a daemon restart: finds the sandbox described by `persisted` and opens a fresh
  // channel to its agent. Fails (kNotFound) if it is gone or is not the same sandbox.
  virtual Result<std::unique_ptr<Instance>> reattach(const SandboxSpec& spec,
                                                     const nlohmann::json& persisted) = 0;

  // Removes whatever a sandbox that could not be reattached left behind. Idempotent.
  virtual Result<void> cleanup(const SandboxSpec& spec, const nlohmann::json& persisted) = 0;

  // What this host supports for this runtime, for `space doctor`.
  virtual nlohmann::json doctor() const = 0;
};

}  // namespace space::runtime
