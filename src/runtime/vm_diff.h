// `space diff` of a microVM: the host side of reading the overlay upper layer on the VM's own
// writable disk (disk.img, ext4, made by make_writable_disk; space-vminit mounts its `upper`
// directory as the overlay's upperdir). The guest wrote every byte of that disk, so the host
// kernel never mounts it and spaced never parses it: read_upper() runs space-upper-reader
// (src/upper_reader) on an fd of it, confined, and parses the listing it prints as untrusted.
//
// The reader runs as the sandbox's own unprivileged host uid (uid_base, which no one else
// uses), with no supplementary groups and no_new_privs, in new pid, network (empty: no
// network), ipc and uts namespaces, with RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE 0, RLIMIT_NOFILE
// and RLIMIT_CORE 0, fds 0 and 2 /dev/null, 1 a pipe and 3 the disk (O_RDONLY); it is exec'd
// from an fd spaced opened (execveat), so it needs no path to it, and before it reads the disk
// it confines itself with a closed seccomp allowlist (upper_reader/confine.h). spaced reads at
// most `max_output` bytes within `timeout`, then kills it (it is the init of its pid namespace:
// nothing of it survives) and reaps it.
//
// The caller makes the disk consistent first (runtime.h, Instance::read_writable_disk: the
// guest synced its upper file system through the agent, the VM is stopped while this runs).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "common/error.h"
#include "runtime/upper_listing.h"

namespace space::runtime::vm {

struct UpperReader {
  std::filesystem::path exe;  // space-upper-reader
  uint32_t uid = 0;           // the sandbox's uid_base: an unprivileged uid of its own
  size_t max_entries = 100000;
  size_t max_output = 64u << 20;             // bytes of listing
  std::chrono::milliseconds timeout{30000};  // wall clock, start to exit
  uint64_t max_memory = 512ull << 20;        // RLIMIT_AS
  uint64_t max_cpu_s = 20;                   // RLIMIT_CPU (then SIGKILL)
};

// Lists the upper layer of the writable disk open read-only on `disk_fd` (an fd open for
// writing is refused: the reader gets a copy of this one). kResourceExhausted past max_entries
// or max_output, kTimeout, kProtocol for a disk the reader could not make sense of (its words)
// or a listing that is not well formed, kUnavailable if the reader is missing.
Result<std::vector<UpperEntry>> read_upper(int disk_fd, const UpperReader& reader);

// Where space-upper-reader is: next to the running spaced, else /usr/lib/space/.
std::filesystem::path default_upper_reader();

// What space-vminit makes in the upper layer at boot when the image lacks it, relative paths:
// the mount points of its sandbox_mounts() (directories, which stay empty on the disk: their
// contents are other file systems) and /etc/resolv.conf for the gateway's DNS stub. Part of
// the sandbox's creation like the daemon's own files (the `installed` record), so `space diff`
// leaves them out unless they changed since.
inline constexpr const char* kGuestMountPoints[] = {"proc", "sys", "dev", "tmp", "run"};
inline constexpr const char* kGuestBootFiles[] = {"etc/resolv.conf"};
// What `space image build-vm` adds to an image's disk, relative paths: in a VM's lower layer
// though not in the image's rootfs directory.
inline constexpr const char* kImageDiskExtras[] = {".space", ".space/space-agent"};

}  // namespace space::runtime::vm
