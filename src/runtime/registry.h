// The runtimes spaced can run, by name: each name of proto/runtime_names.h (the table users
// name them from) with the factory that makes it from spaced's settings. spaced makes every
// registered runtime at start; a unit test checks that the two tables name the same runtimes
// and that each runtime's name() is its registered name.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "runtime/runtime.h"

namespace space::runtime {

// What the runtimes take from spaced's config (daemon/config.h), resolved by spaced.
struct RuntimeSettings {
  std::filesystem::path state_dir;  // runtimes keep their files below it
  std::string cgroup_name = "space";
  std::filesystem::path agent;  // space-agent, for the linux runtime
  // The microVMs' guest kernel (uncompressed vmlinux) and initramfs (space-vminit as /init).
  std::filesystem::path kernel, initrd;
  std::filesystem::path qemu = "qemu-system-x86_64";  // a name looked up in PATH, or a path
  std::string accel = "auto";                         // qemu: auto, kvm or tcg
  std::filesystem::path firecracker = "firecracker", jailer = "jailer";
  bool templates = true;  // VMs start from a template VM of their image
  std::chrono::milliseconds boot_timeout{60000};
  // The gateway's TCP listeners' ports, where a guest's agent listens for egress.
  std::vector<uint16_t> egress_ports;
};

struct RegisteredRuntime {
  std::string_view name;
  // Fails only where the runtime cannot exist at all; a VM runtime whose VMM, kernel or KVM is
  // missing is made anyway, and its creates and `space doctor` say what is missing.
  Result<std::unique_ptr<Runtime>> (*make)(const RuntimeSettings& settings);
};

// Every runtime spaced can run, in proto::kRuntimeNames' order.
std::span<const RegisteredRuntime> registered_runtimes();

}  // namespace space::runtime
