// The `firecracker` runtime: each sandbox is a Firecracker microVM on KVM, launched through
// Firecracker's jailer and configured over its REST API (docs/firecracker-runtime.md).
//
// The guest is the one the qemu runtime boots (docs/vm-guest.md): the guest kernel with
// space-vminit as the initramfs's init, the image disk read-only under an overlay whose upper
// layer is the sandbox's own writable disk, and space-agent as PID 1. The VM has no network
// interface: its one link to the host is vsock, on which the agent listens and the daemon
// connects (Firecracker's host-side "CONNECT <port>" protocol); egress goes over that stream to
// the gateway, as for qemu.
//
// Creation is a restore, not a boot: the first sandbox of an (image, kernel, limits) boots a
// template VM once, which is snapshotted as soon as its agent listens; every sandbox after it
// loads that snapshot (File memory backend: the memory file mapped privately, so each copy's
// writes are its own) with its own jail, writable disk and vsock socket, and the daemon then
// resyncs its hostname, clock and entropy (docs/agent-protocol.md, "resync").
//
// Confinement (docs/threat-model.md): the jailer gives Firecracker the sandbox's own uid/gid
// (its uid_base), a chroot holding only what the VM needs (hard links of the kernel, initramfs,
// image disk and template; its writable disk), a new mount namespace and Firecracker's seccomp
// filters; spaced starts the jailer in new pid, network, ipc and uts namespaces and in the
// sandbox's cgroup (its CPU limit, its memory limit plus Firecracker's overhead). The network
// namespace, empty but for `lo`, is where the gateway binds the sandbox's listeners.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "host/cgroup.h"
#include "runtime/runtime.h"
#include "runtime/vm_steps.h"

namespace space::runtime::firecracker {

// kvm_non_starter(gather_kvm_facts(device)) (runtime/kvm.h).
std::string default_kvm_check(const std::filesystem::path& device);

struct Config {
  std::filesystem::path firecracker = "firecracker";  // looked up in PATH if not absolute
  std::filesystem::path jailer = "jailer";
  // The KVM device that must be usable. Only the tests' stand-in Firecracker
  // (tests/unit/runtime/firecracker/fake_firecracker.py) points it elsewhere: the jailer
  // creates the jail's own /dev/kvm regardless.
  std::filesystem::path kvm_device = "/dev/kvm";
  // Why KVM cannot run a stock Linux guest through `kvm_device` ("" when nothing known stops
  // it): vm::kvm_non_starter of the device's facts. The stand-in tests, whose kvm_device is a
  // plain file, replace it.
  std::function<std::string(const std::filesystem::path&)> kvm_check = default_kvm_check;
  std::filesystem::path kernel;  // uncompressed vmlinux (ELF)
  std::filesystem::path initrd;  // initramfs with space-vminit as /init
  // Where jails (<dir>/jails/<firecracker's file name>/<id>/root) and templates
  // (<dir>/templates) live: on
  // the filesystem of the image disks, which are hard-linked into the jails.
  std::filesystem::path dir;
  std::string cgroup_name = "space";
  std::filesystem::path cgroup_root = "/sys/fs/cgroup";
  bool templates = true;  // restore sandboxes from templates (else every sandbox boots)
  std::chrono::milliseconds boot_timeout{30000};  // jailer start to the agent's vsock listener
  std::chrono::milliseconds stop_timeout{5000};
  std::chrono::milliseconds snapshot_timeout{120000};
  // Memory Firecracker itself uses beside the guest's RAM: added to the cgroup's limit.
  uint64_t overhead_bytes = 64ull << 20;
  // Where the agent listens for egress in the guest (127.0.0.1), as for qemu.
  std::vector<uint16_t> egress_ports = {3128, 443, 80};
  uint32_t agent_port = 1024;  // the agent's vsock port
};

// The Firecracker releases this runtime is written and tested for (the API shapes it sends are
// those of 1.16's specification; earlier releases lack fields it uses).
inline constexpr int kMinMinor = 10, kMaxMinor = 16;

// "sb_1a2b" -> "sb-1a2b": the jailer takes [A-Za-z0-9-]{1,64}.
std::string jail_id(const std::string& sandbox_id);
// The jailer's command line for a VM (everything after the program name is data from spaced).
std::vector<std::string> jailer_argv(const Config& config, const std::string& jail_id, uint32_t uid,
                                     const std::string& api_socket);
// The guest kernel's command line.
std::string boot_args(const Config& config, const std::string& hostname, uint32_t pids);
// "Firecracker v1.16.0" -> {1, 16}; nullopt if it does not look like that.
std::optional<std::pair<int, int>> parse_version(const std::string& text);

class FirecrackerRuntime final : public Runtime {
 public:
  using Config = firecracker::Config;
  // Never fails for missing KVM, binaries or kernel: those make create() fail with the reason
  // (and doctor() say it), so that `--runtime firecracker` explains itself.
  static std::unique_ptr<FirecrackerRuntime> create(Config config);

  std::string_view name() const override { return "firecracker"; }
  bool keeps_machine_state() const override { return true; }
  Result<std::unique_ptr<Instance>> create(const SandboxSpec& spec) override;
  Result<std::unique_ptr<Instance>> reattach(const SandboxSpec& spec,
                                             const nlohmann::json& persisted) override;
  Result<void> cleanup(const SandboxSpec& spec, const nlohmann::json& persisted) override;
  nlohmann::json doctor() const override;

  // Every reason this host cannot run Firecracker VMs (empty when it can).
  std::vector<std::string> missing() const;

 private:
  explicit FirecrackerRuntime(Config config);
  struct Template;
  struct Launch;
  Result<void> usable() const;
  Result<const host::CgroupLayout*> cgroup_layout() const;
  // The template for `spec`'s image and limits, booted and snapshotted on first use.
  Result<Template> ensure_template(const SandboxSpec& spec);
  Result<std::unique_ptr<Instance>> start(const SandboxSpec& spec, const Launch& how);
  // <dir>/jails/<Firecracker's file name>: where the jailer makes each VM's <id>/root.
  std::filesystem::path jail_root() const;

  Config config_;
  std::string version_;  // `firecracker --version`'s first line, "" if it did not run
  Result<host::CgroupLayout> layout_;
  vm::KeyedMutexes template_locks_;  // one build per template
};

}  // namespace space::runtime::firecracker
