// Host-side namespace plumbing: the sandbox's network namespace (owned by the host user
// namespace, so root inside cannot reconfigure it) and the uid/gid maps of its user namespace.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>

#include "common/error.h"
#include "common/fd.h"

namespace space::runtime::linux {

// Runs `fn` on a fresh thread and waits for it. Namespace switches (unshare, setns) made on that
// thread die with it and never touch the daemon's other threads.
void run_on_scratch_thread(const std::function<void()>& fn);

// Creates a network namespace holding only `lo`, brought up. Returns an fd of it
// (/proc/thread-self/ns/net, O_CLOEXEC) that keeps it alive.
Result<UniqueFd> create_netns();

// Writes "0 <base> <count>" to /proc/<pid>/uid_map and gid_map. The daemon (host root) writes
// them, so setgroups(2) stays allowed inside and the child can drop the daemon's
// supplementary groups.
Result<void> write_id_maps(pid_t pid, uint32_t base, uint32_t count);

}  // namespace space::runtime::linux
