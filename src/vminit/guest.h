// The parts of space-vminit (the microVM's PID 1, src/vminit/main.cc) that need no kernel:
// parsing the kernel command line, reading an ext4 label from a superblock, and building the
// agent's argv. Kept apart so that unit tests (tests/unit/vminit) exercise them on the host.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::vminit {

// The space.* keys of the kernel command line (docs/vm-guest.md). Unknown space.* keys are
// errors (a typo must not silently drop a limit); other kernel arguments are ignored.
struct BootParams {
  std::string hostname;          // space.hostname=ID (empty: keep the kernel's)
  std::optional<uint32_t> pids;  // space.pids=N: pids.max of the sandbox cgroup
  std::vector<uint16_t> egress;  // space.egress=PORT[,PORT...]: the agent's egress listeners
  // space.channel=vsock:PORT: the agent listens on this guest vsock port for the daemon (the
  // firecracker runtime) instead of using the virtio-serial port named space.agent.
  std::optional<uint16_t> channel_vsock_port;
  // space.probe=1: a boot probe (the qemu runtime's test of an accelerator): init prints
  // proto::kProbeMarker on the console once it runs, then ends the VM.
  bool probe = false;
};

// Whether vminit loads the initramfs's module `module` (its file name without .ko) for a guest
// booted with `p`: the vsock family only when the agent's channel is vsock (firecracker), so
// that a qemu guest has no AF_VSOCK at all.
[[nodiscard]] bool module_wanted(std::string_view module, const BootParams& p);

// Parses /proc/cmdline's content (space-separated words, a trailing newline allowed).
[[nodiscard]] Result<BootParams> parse_cmdline(std::string_view cmdline);

// ext4 superblock facts (the superblock is at byte 1024 of the device).
inline constexpr size_t kSuperblockOffset = 1024;
inline constexpr size_t kMagicOffset = 56;        // __le16 s_magic, 0xEF53
inline constexpr size_t kVolumeNameOffset = 120;  // char s_volume_name[16]
inline constexpr uint16_t kExt4Magic = 0xEF53;

// The volume label of an ext2/3/4 filesystem, given at least the device's first 2048 bytes;
// nullopt when they hold no ext superblock (a too-short buffer, a wrong magic).
std::optional<std::string> ext4_label(std::string_view first_bytes);
// Reads the first 2048 bytes of the block device `path` and returns ext4_label() of them.
[[nodiscard]] Result<std::optional<std::string>> read_ext4_label(const std::string& path);

// The parameters `cmdline` gives module `module` ("virtio_mmio" or "virtio-mmio"), as
// modprobe would pass them: every word MODULE.KEY[=VALUE] becomes KEY[=VALUE], space-separated,
// in order ('-' and '_' in the module name are the same). QEMU's microvm without ACPI
// describes its virtio-mmio devices this way (virtio_mmio.device=512@0xfeb00e00:12), and
// finit_module of a module sees only what it is handed, not the kernel command line.
std::string module_params(std::string_view cmdline, std::string_view module);

// argv of the agent: /.space/space-agent --channel DEV [--egress-listen 127.0.0.1:PORT]...
// [--dns-listen 127.0.0.53:53], or with p.channel_vsock_port --channel-listen vsock:PORT in
// place of --channel DEV (channel_dev is then unused and may be empty). With egress (any
// space.egress port) the agent also takes the guest's DNS queries on the stub's address
// (proto::kDnsStubIp) and carries them to the gateway's stub.
std::vector<std::string> agent_argv(const std::string& channel_dev, const BootParams& p);

// What vminit writes to the guest's /etc/resolv.conf: with egress, the gateway's DNS stub (the
// agent's --dns-listen address), as the host image's /etc/resolv.conf has it; without, "" (the
// file is left as the image has it).
std::string resolv_conf(const BootParams& p);

}  // namespace space::vminit
