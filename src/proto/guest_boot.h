// What the host and a microVM guest's init (space-vminit) agree on beyond the agent protocol:
// the kernel command line keys are parsed in src/vminit/guest.cc (docs/vm-guest.md); this holds
// the one thing the guest prints for the host to read, the boot probe's marker.
#pragma once

#include <string_view>

namespace space::proto {

// With space.probe=1 on its command line, vminit prints this line on the console as soon as it
// runs and ends the VM: the qemu runtime's proof that a guest boots under an accelerator
// (src/runtime/qemu/accel_probe.h).
inline constexpr std::string_view kProbeMarker = "space-vminit: probe: init runs";

}  // namespace space::proto
