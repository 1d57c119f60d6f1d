// The seccomp policy of every process in a linux sandbox (agent included), as reviewed data:
// one row per rule with the syscall, which calls it matches, the errno returned and why.
// Default allow with a denylist: the capability set and the user namespace already confine
// what the remaining syscalls can do, and the rows below remove kernel attack surface that
// untrusted code does not need. Calls from any architecture but the native one (i386 and x32
// on x86_64) kill the process. seccomp.cc compiles this table with libseccomp.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <vector>

namespace space::runtime::linux {

struct SyscallMatch {
  enum class Kind {
    kAll,        // every call
    kArgEquals,  // arg == one of `values` (compared as 32-bit: ioctl requests, families)
    kArgAnyBit,  // arg has any bit of any of `values` set (clone flags)
    kArgNotIn,   // arg is none of `values` (32-bit; personality's allow list)
    kArgNot,     // arg != values[0] (all 64 bits: the gateway's own pid for tgkill)
  };
  Kind kind = Kind::kAll;
  unsigned arg = 0;
  std::vector<uint64_t> values;
};

struct PolicyRule {
  std::string_view syscall;  // libseccomp name
  int x86_64_nr;             // number on x86_64 if libseccomp is older than the syscall, else -1
  SyscallMatch match;
  int errno_value;  // returned instead of running the call
  std::string_view reason;
};

// The sandbox policy, in review order.
const std::vector<PolicyRule>& sandbox_policy();

// The gateway process's role (space-egress, docs/egress.md): the sandbox policy plus what a
// process that only relays sockets never needs (running programs, reading other processes,
// signalling any process but itself, rarely used socket families). `self` is the pid of the
// process that installs it: the only one its signals may reach (the gateway processes of a
// spaced share one uid, so without this one taken over could kill the others). In review order.
std::vector<PolicyRule> egress_policy(pid_t self);

// For `space doctor` and the syscall probe: [{syscall, match, action, reason}].
nlohmann::json policy_table();

}  // namespace space::runtime::linux
