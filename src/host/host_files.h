// Small helpers for the host-side files the host toolkit and the runtimes read and write:
// cgroup control files, /proc/<pid>/... entries and the like. All fds are O_CLOEXEC; errors
// carry the path.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/error.h"

namespace space::host {

// Reads a whole (small) file.
Result<std::string> read_text(const std::filesystem::path& path);
// Writes `value` with one write(2) to an existing file (O_WRONLY, no O_CREAT/O_TRUNC): the
// way cgroup and /proc control files must be written.
Result<void> write_text(const std::filesystem::path& path, std::string_view value);
// Reads a file holding one unsigned number ("max" reads as UINT64_MAX).
Result<uint64_t> read_u64(const std::filesystem::path& path);
// Finds `key <number>` in a flat-keyed file (memory.events, cgroup.events, cpu.stat, ...).
Result<uint64_t> read_keyed(const std::filesystem::path& path, std::string_view key);
// Field 22 of /proc/<pid>/stat: the start time in clock ticks since boot. Identifies a process
// across pid reuse.
Result<uint64_t> process_start_time(int pid);

}  // namespace space::host
