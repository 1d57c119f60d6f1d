// Which accelerator the qemu runtime's microVMs use, decided by proof rather than by the
// existence of /dev/kvm. The KVM device's facts come first (runtime/kvm.h: a missing or
// unopenable node and nested PVM are known non-starters, decided in microseconds); where nothing
// known stops KVM, the guest kernel and initramfs the runtime boots are booted once under KVM
// with `space.probe=1` (vminit prints kProbeMarker and ends the VM) and a short deadline. The
// verdict is cached in a file keyed by the host's boot id, its kernel release, QEMU's binary and
// the guest kernel and initramfs, so a daemon restart does not boot again; any change to one of
// them probes anew.
//
// The probe's QEMU runs as spaced (root), not in the per-sandbox jail: it boots only the
// runtime's own kernel and initramfs, with no disk, no network, no agent and nothing from any
// sandbox, under QEMU's own seccomp sandbox, for at most kProbeTimeout.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "runtime/kvm.h"

namespace space::runtime::qemu {

inline constexpr std::chrono::milliseconds kProbeTimeout{20000};

struct AccelInputs {
  std::filesystem::path qemu, kernel, initrd;
  std::filesystem::path cache;  // the verdict's file; empty: no cache
  std::filesystem::path kvm_device = "/dev/kvm";
  std::filesystem::path sys_module = "/sys/module";
  std::chrono::milliseconds timeout = kProbeTimeout;
};

// whether the guest boots under an accelerator: KVM's verdict (runtime/kvm.h), which a boot
// probe under TCG answers too.
using AccelVerdict = vm::KvmVerdict;

// Boots `in.kernel` and `in.initrd` with space.probe=1 under `accel` ("kvm" or "tcg") and
// succeeds once kProbeMarker reached the console before `timeout`; otherwise says what QEMU and
// the console printed. `work` is an existing directory for the console and QEMU's log.
[[nodiscard]] Result<void> boot_probe(const AccelInputs& in, const std::string& accel,
                                      const std::filesystem::path& work);

// The cache key: boot id, kernel release, and the identity (path, size, mtime) of QEMU, the
// guest kernel and the initramfs.
std::string probe_key(const AccelInputs& in);

// KVM's device facts; where they rule nothing out, probe_cached(in, "kvm").
AccelVerdict decide_kvm(const AccelInputs& in);

// The verdict of a boot probe under `accel` as cached in `in.cache` for this probe_key, else a
// new boot_probe (whose verdict is then cached). usable/reason say whether the guest
// booted under `accel` and why not.
AccelVerdict probe_cached(const AccelInputs& in, const std::string& accel);

}  // namespace space::runtime::qemu
