// Named crash points for the crash-safety suite (docs/crash-safety.md), in the manner of
// etcd's failpoints: every step of a multi-step operation that a kill -9 could interrupt has a
// name, and `failpoint(name)` between two steps kills the process there when a test asks.
//
// Off unless spaced's environment has SPACE_FAILPOINTS="name[,name...]": each named point then
// SIGKILLs the process the first time it is reached (after one line on stderr naming it), which
// is exactly a `kill -9` between those two steps. Off, a point costs one relaxed atomic load.
// Every name is in one table (failpoint.cc) with what it interrupts; `spaced --failpoints`
// prints it, and tests/integration/test_crash.py has a scenario for each row.
#pragma once

#include <span>
#include <string_view>

namespace space {

struct FailpointInfo {
  std::string_view name;
  std::string_view where;  // the two steps it falls between
};

// Kills the process here if SPACE_FAILPOINTS names `name`. `name` must be in the table (with
// failpoints on, an unknown one aborts; test_crash.py checks the table against the sources).
void failpoint(std::string_view name);
// The table, in the order the operations run.
std::span<const FailpointInfo> failpoints();

}  // namespace space
