// The `qemu` runtime: each sandbox is a microVM (QEMU's `microvm` machine; KVM where /dev/kvm
// is usable, TCG emulation otherwise) booting the guest kernel with space-vminit as the
// initramfs's init, which mounts the image disk (read-only) under an overlay whose upper layer
// is the sandbox's own writable disk and execs space-agent (docs/vm-guest.md). The VM has no
// network device and no shared directory: its only link to the host is the agent's
// virtio-serial port, over which the agent also carries egress to the daemon's gateway.
//
// QEMU itself runs confined (docs/qemu-runtime.md): its own unprivileged uid (the sandbox's
// uid_base), new pid, mount, network, ipc and uts namespaces, a tmpfs root holding only
// read-only binds of what it needs (its binary and libraries, the kernel, the initramfs) and
// the sandbox's `vm` directory, no_new_privs, QEMU's own seccomp sandbox
// (-sandbox on,...,spawn=deny), and a cgroup with the sandbox's CPU limit and its memory limit
// plus QEMU's overhead. Its network namespace, empty but for `lo`, is where the gateway binds
// the sandbox's listeners, exactly as for the linux runtime.
//
// Creation is a clone, not a boot (docs/qemu-runtime.md, "Templates"): the first sandbox of an
// (image, kernel, limits) boots a template VM whose RAM is a memfd QEMU maps shared; once its
// agent has said hello it is stopped and migrated with `x-ignore-shared` (only the device
// state is written; the RAM is the memfd). The memfd is then sealed against every write and
// each later sandbox's QEMU maps it privately (copy-on-write: a clone's writes are its own
// pages), loads the device state, gets a copy of the template's writable disk, and goes on;
// the daemon then resyncs its hostname, clock and entropy (docs/agent-protocol.md, "resync").
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "host/cgroup.h"
#include "runtime/qemu/accel_probe.h"
#include "runtime/runtime.h"
#include "runtime/vm_steps.h"

namespace space::runtime::qemu {

struct Config {
  std::filesystem::path qemu = "qemu-system-x86_64";  // looked up in PATH if not absolute
  std::filesystem::path kernel;                       // uncompressed vmlinux (PVH entry point)
  std::filesystem::path initrd;                       // initramfs with space-vminit as /init
  std::string accel = "auto";  // auto (kvm if a guest boots under it, else tcg), kvm, tcg
  // Where the KVM boot probe's verdict is cached (accel_probe.h); empty: probe per process.
  std::filesystem::path probe_cache;
  std::filesystem::path kvm_device = "/dev/kvm";
  std::string cgroup_name = "space";
  std::filesystem::path cgroup_root = "/sys/fs/cgroup";
  std::chrono::milliseconds boot_timeout{60000};  // QEMU start to the agent's first byte
  std::chrono::milliseconds stop_timeout{5000};
  // Memory QEMU itself uses beside the guest's RAM (its code, TCG's translation cache of
  // kTcgCacheMiB, device state): added to the cgroup's limit.
  uint64_t overhead_bytes = 256ull << 20;
  // Where the agent listens for egress in the guest (127.0.0.1): the gateway's TCP listeners'
  // ports, which spaced sets from egress/gateway.h (the proxy's first).
  std::vector<uint16_t> egress_ports = {3128, 443, 80};
  // Where templates are kept (<template_dir>/<key>/); with `templates` false or no directory,
  // every sandbox boots.
  std::filesystem::path template_dir;
  bool templates = true;
};

inline constexpr int kTcgCacheMiB = 64;
// Templates whose RAM spaced keeps in memory, each all of its RAM size (the least recently used
// beyond are let go and read back from disk when needed), and templates kept on disk.
inline constexpr size_t kTemplatesInMemory = 2;
inline constexpr size_t kTemplatesOnDisk = 16;

class QemuRuntime final : public Runtime {
 public:
  using Config = qemu::Config;
  // Never fails for a missing QEMU, kernel or KVM: those make create() fail with the reason
  // (and doctor() say it), so that `--runtime qemu` explains itself instead of being unknown.
  static std::unique_ptr<QemuRuntime> create(Config config);

  std::string_view name() const override { return "qemu"; }
  // Snapshots are whole machines: QEMU's migration stream and the writable disk.
  bool keeps_machine_state() const override { return true; }
  Result<std::unique_ptr<Instance>> create(const SandboxSpec& spec) override;
  Result<std::unique_ptr<Instance>> reattach(const SandboxSpec& spec,
                                             const nlohmann::json& persisted) override;
  Result<void> cleanup(const SandboxSpec& spec, const nlohmann::json& persisted) override;
  nlohmann::json doctor() const override;

  // "kvm" or "tcg", or the reason this runtime cannot run. The first call decides (with
  // vm.accel "auto" or "kvm": KVM's device facts, then a cached or new boot probe, which may
  // take seconds); later calls return that.
  Result<std::string> accelerator() const;
  // The KVM verdict behind accelerator() (decided by the first call to either).
  const AccelVerdict& kvm_verdict() const;

  struct Template;  // qemu_template.h

 private:
  // How start() makes the machine: boot it, boot a template (RAM shared with spaced), clone a
  // template, or load a saved machine (SandboxSpec::restore_machine).
  struct Launch {
    enum Mode { kBoot, kTemplate, kClone, kRestore } mode = kBoot;
    int template_ram = -1;                 // kTemplate: the memfd QEMU maps shared
    std::shared_ptr<const Template> from;  // kClone
  };
  explicit QemuRuntime(Config config);
  Result<std::unique_ptr<Instance>> start(const SandboxSpec& spec, const Launch& how,
                                          const std::string& accel);
  // The template for `spec`'s image and limits: loaded, or booted and saved on first use.
  Result<std::shared_ptr<const Template>> ensure_template(const SandboxSpec& spec,
                                                          const std::string& accel);
  Result<std::shared_ptr<const Template>> build_template(const SandboxSpec& spec,
                                                         const nlohmann::json& key,
                                                         const std::string& name,
                                                         const std::string& accel);
  Result<void> usable() const;
  // "TCG emulation ...: <why KVM is not used>", for doctor, inspect and the logs.
  std::string tcg_note() const;
  Result<const host::CgroupLayout*> cgroup_layout() const;

  // Looks for QEMU (where not found yet) and the guest kernel and initramfs; probe_mu_ held.
  void probe_tools() const;

  Config config_;
  const std::filesystem::path qemu_wanted_;  // vm.qemu as configured (a name or a path)
  mutable std::mutex probe_mu_;              // guards the two below, and config_.qemu's change
  mutable std::optional<Error> qemu_error_, kernel_error_;
  mutable bool qemu_found_ = false;
  mutable std::once_flag kvm_once_;
  mutable AccelVerdict kvm_;
  Result<host::CgroupLayout> layout_;
  vm::KeyedMutexes template_locks_;  // one build per template
  std::mutex templates_mu_;          // guards templates_
  struct Loaded {
    std::shared_ptr<const Template> t;
    std::chrono::steady_clock::time_point used;
  };
  std::map<std::string, Loaded> templates_;  // in memory (kTemplatesInMemory), by key name
};

}  // namespace space::runtime::qemu
