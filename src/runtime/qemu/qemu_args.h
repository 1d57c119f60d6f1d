// The parts of QEMU's command line that every qemu runtime VM shares with the boot probe
// (accel_probe.h), so that the probe proves exactly the machine the runtime starts.
#pragma once

namespace space::runtime::qemu {

// microvm with an RTC (the guest's clock) and the ISA serial port (its console).
inline constexpr const char* kMachine = "microvm,rtc=on,isa-serial=on";

// The guest kernel's fixed arguments. tsc_early_khz, lpj and no_timer_check spare TCG guests
// the TSC calibration that hangs ~30% of their boots (DESIGN §6); rdinit runs space-vminit.
inline constexpr const char* kGuestCmdline =
    "console=ttyS0 reboot=t panic=-1 quiet loglevel=4 tsc_early_khz=2000000 lpj=8000000 "
    "no_timer_check rdinit=/init";

// QEMU's own seccomp sandbox: no obsolete calls, no privilege changes, no fork/exec, no
// resource-control calls.
inline constexpr const char* kQemuSandbox =
    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

}  // namespace space::runtime::qemu
