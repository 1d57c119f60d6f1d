// The seccomp roles, as reviewed data in one table format: one row per rule with the syscall,
// which calls it matches, what it gets (an errno, or to run) and why. Three roles:
//  * the sandbox: every process in a linux sandbox (agent included). Default allow with a
//    denylist: the capability set and the user namespace already confine what the remaining
//    syscalls can do, and the rows remove kernel attack surface that untrusted code does not
//    need;
//  * egress (space-egress): the sandbox's rows plus what a socket relay never needs;
//  * the upper reader (space-upper-reader): a closed allowlist, every other call kills it.
// Calls from any architecture but the native one (i386 and x32 on x86_64) kill the process.
// seccomp.cc compiles a role with libseccomp; confine.h installs it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace space::host {

struct SyscallMatch {
  enum class Kind {
    kAll,        // every call
    kArgEquals,  // arg == one of `values` (compared as 32-bit: ioctl requests, families)
    kArgAnyBit,  // arg has any bit of any of `values` set (clone flags)
    kArgNotIn,   // arg is none of `values` (32-bit; personality's allow list)
    kArgNot,     // arg != values[0] (all 64 bits: the gateway's own pid for tgkill)
    kArgsAre,    // `values` read as (arg, value) pairs: every one equal, all 64 bits (args_are)
  };
  Kind kind = Kind::kAll;
  unsigned arg = 0;
  std::vector<uint64_t> values;
};

// A kArgsAre match: arg a == v for every {a, v} (the reader's "its own disk fd").
SyscallMatch args_are(std::initializer_list<std::pair<unsigned, uint64_t>> pairs);

// errno_value of an allowlist row: the call runs.
inline constexpr int kAllow = -1;

struct PolicyRule {
  std::string_view syscall;  // libseccomp name
  int x86_64_nr;             // number on x86_64 if libseccomp is older than the syscall, else -1
  SyscallMatch match;
  int errno_value;  // returned instead of running the call (0: "done" without doing it), kAllow
  std::string_view reason;
};

// What a call that no row matches gets.
enum class Unmatched {
  kAllow,        // a denylist (the sandbox and egress roles)
  kKillProcess,  // an allowlist (the upper reader)
};

// A role that is not a denylist says so: its rows and what the others get.
struct SeccompRole {
  std::vector<PolicyRule> rules;
  Unmatched unmatched = Unmatched::kAllow;
};

// The sandbox policy, in review order.
const std::vector<PolicyRule>& sandbox_policy();

// The gateway process's role (space-egress, docs/egress.md): the sandbox policy plus what a
// process that only relays sockets never needs (running programs, reading other processes,
// signalling any process but itself, rarely used socket families). `self` is the pid of the
// process that installs it: the only one its signals may reach (the gateway processes of a
// spaced share one uid, so without this one taken over could kill the others). In review order.
std::vector<PolicyRule> egress_policy(pid_t self);

// space-upper-reader's role (upper_reader/confine.h): once it has its arguments, before it
// reads a byte of the disk, the reader may only read `disk_fd` (the one fd it may read, seek or
// fstat), write its listing to stdout and errors to stderr, allocate memory and exit; any other
// call (open, socket, exec, kill, ptrace, ...) kills it. A parser that the disk took over can
// read the disk it was given and write its listing, and nothing else. In review order.
SeccompRole upper_reader_role(int disk_fd);

// For `space doctor` and the syscall probe: [{syscall, match, action, reason}].
nlohmann::json policy_table();

}  // namespace space::host
