// What a host's /dev/kvm can do, short of booting a guest. "The node exists" and "root can open
// it" prove little: a machine of this project's own kind has a /dev/kvm from the kvm_pvm module
// (nested PVM) that opens, creates VMs and runs a real-mode test, yet cannot boot a normal Linux
// guest. So the facts are gathered (the node, an open, KVM_GET_API_VERSION, KVM_CREATE_VM, the
// vendor module) and judged separately (kvm_non_starter), and a caller that must know whether its
// guest boots proves it on top (the qemu runtime's boot probe, accel_probe.h).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

namespace space::runtime::vm {

inline constexpr unsigned kKvmMajor = 10;  // a misc device
inline constexpr unsigned kKvmMinor = 232;
inline constexpr int kKvmApiVersion = 12;

struct KvmFacts {
  std::string device = "/dev/kvm";
  bool present = false;      // something exists at `device`
  bool is_kvm_node = false;  // a character device 10:232
  int open_errno = 0;        // 0: it opened O_RDWR (as the caller)
  int api_version = -1;      // KVM_GET_API_VERSION, -1 if not asked
  int create_vm_errno = -1;  // KVM_CREATE_VM: 0 worked, -1 not tried, else errno
  // The vendor modules seen under /sys/module: "kvm_intel", "kvm_amd", "kvm_pvm", ... (sorted,
  // comma-separated); `sysfs_seen` says whether /sys/module/kvm was there to look at all.
  std::string vendor_modules;
  bool sysfs_seen = false;

  nlohmann::json to_json() const;
};

// Reads the facts: stat, open O_RDWR|O_CLOEXEC, the two ioctls, /sys/module. Never fails.
KvmFacts gather_kvm_facts(const std::filesystem::path& device = "/dev/kvm",
                          const std::filesystem::path& sys_module = "/sys/module");

// Why KVM cannot run this project's guests here, or "" when nothing known stops it (then only
// booting one proves it). Known non-starters: no device, not the KVM node, cannot be opened, a
// wrong API version, KVM_CREATE_VM refused, nested PVM (kvm_pvm: PVM-built guests only), no
// vendor module at all.
std::string kvm_non_starter(const KvmFacts& f);

// Whether KVM runs this project's guests here, why not, and how that was decided: "device
// facts" (judge_kvm_facts), "boot probe" or "boot probe (cached)" (qemu/accel_probe.h), "config".
struct KvmVerdict {
  bool usable = false;
  std::string reason;  // "" when usable
  std::string how;
  KvmFacts facts;
  nlohmann::json to_json() const;  // the facts with usable, decided_by and reason
};

// The verdict of the facts alone: usable unless kvm_non_starter() names a reason. Only a boot
// proves a usable one.
KvmVerdict judge_kvm_facts(KvmFacts facts);

// Creates the character device `path` (which must not exist) for KVM, owned by uid:gid `owner`
// with mode 0600: a node for one jailed VMM's uid, as Firecracker's jailer makes in its chroot,
// so that the host's /dev/kvm keeps its own owner and mode. `dev` is the device number to use
// (makedev(kKvmMajor, kKvmMinor) for KVM; tests pass another).
[[nodiscard]] Result<void> make_private_device_node(const std::filesystem::path& path, dev_t dev,
                                                    uid_t owner);

}  // namespace space::runtime::vm
