// What the host and a microVM guest's init (space-vminit) agree on beyond the agent protocol:
// the kernel command line keys are parsed in src/vminit/guest.cc (docs/vm-guest.md); this holds
// the one thing the guest prints for the host to read, the boot probe's marker, and where the
// guest expects the egress gateway's DNS stub.
#pragma once

#include <cstdint>
#include <string_view>

namespace space::proto {

// With space.probe=1 on its command line, vminit prints this line on the console as soon as it
// runs and ends the VM: the qemu runtime's proof that a guest boots under an accelerator
// (src/runtime/qemu/accel_probe.h).
inline constexpr std::string_view kProbeMarker = "space-vminit: probe: init runs";

// The gateway's DNS stub, where every sandbox finds it (egress::kDnsStubAddress; the gateway
// binds it in the sandbox's network namespace). In a guest whose agent carries egress
// (space.egress=...), the agent receives DNS queries there (--dns-listen) and carries them to
// that stub over its channel, and vminit points /etc/resolv.conf at it.
inline constexpr std::string_view kDnsStubIp = "127.0.0.53";
inline constexpr uint16_t kDnsStubPort = 53;

}  // namespace space::proto
