// How space-egress confines itself before it reads anything (docs/egress.md, "The gateway
// process"; docs/threat-model.md). Run as root by spaced, once, single-threaded.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace space::egressd {

struct Args {
  int control_fd = -1;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<std::string> hide;  // directories covered by an empty read-only tmpfs
};

// space-egress --control-fd N --uid U --gid G [--hide DIR]...
Result<Args> parse_args(int argc, char** argv);

// A private mount namespace (and IPC namespace) with every `hide` directory covered; then the
// host's confinement recipe (host/confine.h): the descriptor limit raised to its hard limit, uid
// and gid `args.uid`/`args.gid` with no supplementary groups, every capability dropped
// (bounding and ambient sets too), not dumpable, no_new_privs, and the seccomp role
// host::egress_policy(its pid). Fails rather than run with less; refuses uid or gid 0.
Result<void> confine(const Args& args);

}  // namespace space::egressd
