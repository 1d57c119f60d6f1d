// What a sandbox may use of the host and what it used, in the terms every runtime and the host
// toolkit share: the limits a runtime applies (cgroup.h, the linux runtime's writable layer, a
// microVM's disk) and the usage its cgroup reports. runtime/runtime.h names them
// runtime::Limits and runtime::Usage.
#pragma once

#include <algorithm>
#include <cstdint>

namespace space::host {

struct Limits {
  uint64_t memory_bytes = 512ull << 20;
  double cpus = 1.0;
  uint32_t pids = 256;
  uint64_t disk_bytes = 2ull << 30;  // size of the writable layer
  uint64_t disk_inodes = 0;          // 0 = derived from disk_bytes
};

// Resource usage as the cgroup reports it.
struct Usage {
  uint64_t memory_bytes = 0;
  uint64_t memory_limit = 0;
  uint64_t oom_kills = 0;  // processes the kernel OOM-killed in this sandbox so far
  uint64_t pids = 0;
  uint64_t cpu_usage_ns = 0;
};

// The inode count of a sandbox's writable layer or disk: limits.disk_inodes, or one per 8 KiB
// of disk_bytes (at least 4096). The linux runtime's tmpfs (runtime/linux/writable_layer.h) and
// a microVM's ext4 (runtime/vm_host.h) get the same count.
inline uint64_t layer_inodes(const Limits& limits) {
  return limits.disk_inodes ? limits.disk_inodes
                            : std::max<uint64_t>(4096, limits.disk_bytes / 8192);
}

}  // namespace space::host
