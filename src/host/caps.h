// Capabilities: the set a linux sandbox keeps, as a reviewed table (one reason per row), and the
// async-signal-safe code that drops a process to a plan, which the confinement recipe
// (confine.h) runs for the sandbox's child (keeping the table) and for space-egress (keeping
// none). The sandbox's capabilities are relative to its own user namespace: they never grant
// anything over host objects, but they still decide what root inside may do to the sandbox's
// own files, processes and namespaces.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

#include "common/error.h"

namespace space::host {

struct CapabilityRow {
  int cap;                  // CAP_* number
  std::string_view name;    // "CAP_CHOWN"
  std::string_view reason;  // why a sandbox keeps it
};

// The default set (Docker's minus NET_RAW, MKNOD): what root inside a sandbox has.
std::span<const CapabilityRow> default_capabilities();
uint64_t default_capability_mask();
nlohmann::json capability_table();

// What the process being confined needs, computed before (for a sandbox, in the parent before
// clone).
struct CapPlan {
  uint64_t keep = 0;  // bounding, permitted and effective set
  int last_cap = 40;  // /proc/sys/kernel/cap_last_cap
};
// The plan keeping `keep` (a sandbox's default set unless told otherwise; 0 drops them all).
Result<CapPlan> make_cap_plan(uint64_t keep = default_capability_mask());

// Child side, async-signal-safe. Each returns 0 or an errno.
int drop_bounding_set(const CapPlan& plan);  // PR_CAPBSET_DROP for every cap not kept
int clear_ambient();                         // PR_CAP_AMBIENT_CLEAR_ALL
int set_capabilities(const CapPlan& plan);   // capset: P = E = keep, I = 0

}  // namespace space::host
