// The runtimes' factories by name (registry.h).
#include "runtime/registry.h"

#include "runtime/firecracker/firecracker_runtime.h"
#include "runtime/linux/linux_runtime.h"
#include "runtime/qemu/qemu_runtime.h"

namespace space::runtime {
namespace {

Result<std::unique_ptr<Runtime>> make_linux(const RuntimeSettings& s) {
  linux_rt::LinuxRuntime::Config c;
  c.agent_path = s.agent;
  c.cgroup_name = s.cgroup_name;
  return std::unique_ptr<Runtime>(TRY(linux_rt::LinuxRuntime::create(c)));
}

Result<std::unique_ptr<Runtime>> make_qemu(const RuntimeSettings& s) {
  qemu::Config c;
  c.kernel = s.kernel;
  c.initrd = s.initrd;
  c.qemu = s.qemu;
  c.accel = s.accel;
  c.probe_cache = s.state_dir / "kvm-probe.json";
  c.template_dir = s.state_dir / "qemu" / "templates";
  c.templates = s.templates;
  c.cgroup_name = s.cgroup_name;
  c.egress_ports = s.egress_ports;
  c.boot_timeout = s.boot_timeout;
  return std::unique_ptr<Runtime>(qemu::QemuRuntime::create(c));
}

Result<std::unique_ptr<Runtime>> make_firecracker(const RuntimeSettings& s) {
  firecracker::Config c;
  c.firecracker = s.firecracker;
  c.jailer = s.jailer;
  c.kernel = s.kernel;
  c.initrd = s.initrd;
  c.dir = s.state_dir / "firecracker";
  c.cgroup_name = s.cgroup_name;
  c.templates = s.templates;
  c.egress_ports = s.egress_ports;
  c.boot_timeout = s.boot_timeout;
  return std::unique_ptr<Runtime>(firecracker::FirecrackerRuntime::create(c));
}

constexpr RegisteredRuntime kRegistered[] = {
    {"linux", make_linux},
    {"qemu", make_qemu},
    {"firecracker", make_firecracker},
};

}  // namespace

std::span<const RegisteredRuntime> registered_runtimes() { return kRegistered; }

}  // namespace space::runtime
