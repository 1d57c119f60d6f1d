// The runtimes a user can name (`space create --runtime`, the API's "runtime", a pool's runtime
// in spaced's config), a line on each: the one table the CLI, the API and the config check a
// name against and take their lists of valid names from. It lives at the protocol level because
// the CLI, a static thin client, links no runtime code; src/runtime/registry.h maps each name
// to the factory that makes the runtime, and a unit test holds the two together.
#pragma once

#include <string>
#include <string_view>

namespace space::proto {

struct RuntimeName {
  std::string_view name;   // what Runtime::name() returns
  std::string_view about;  // one line, for help texts
};

inline constexpr RuntimeName kRuntimeNames[] = {
    {"linux", "namespaces, cgroups and seccomp on the host's kernel"},
    {"qemu", "a QEMU microVM: KVM where a guest boots under it, TCG emulation otherwise"},
    {"firecracker", "a Firecracker microVM on KVM, through Firecracker's jailer"},
};

// The runtime of a sandbox whose request names none.
inline constexpr std::string_view kDefaultRuntime = "linux";

constexpr bool is_runtime_name(std::string_view name) {
  for (const RuntimeName& r : kRuntimeNames)
    if (r.name == name) return true;
  return false;
}

// The names in the table's order, joined by `sep` and the last one by `last`:
// "linux, qemu or firecracker".
inline std::string runtime_names(std::string_view sep = ", ", std::string_view last = " or ") {
  std::string out;
  constexpr size_t n = std::size(kRuntimeNames);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? last : sep;
    out += kRuntimeNames[i].name;
  }
  return out;
}

}  // namespace space::proto
