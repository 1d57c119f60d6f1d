// The host side of Firecracker's vsock device (docs/firecracker-runtime.md). Firecracker backs
// a guest's virtio-vsock with a Unix socket on the host: a host process connects to that
// socket and writes "CONNECT <port>\n"; Firecracker connects to the guest's listener on that
// vsock port and answers "OK <host port>\n", after which the stream is the guest connection's.
// If nothing listens in the guest (yet), Firecracker closes the Unix connection instead.
//
// The socket lives in the jail of a process the sandbox may have taken over, so the path is
// resolved under a directory fd and the peer must be the jail's uid (SO_PEERCRED): a socket
// file swapped for one that leads elsewhere is refused.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace space::runtime::firecracker {

// Connects to the Unix socket `name` in directory `dir_fd` (through /proc/self/fd, so the
// whole path may exceed sun_path) and checks that its peer runs as `peer_uid`. ENOENT and
// ECONNREFUSED are retried until `deadline`; `pidfd` readable (the VMM exited) fails at once.
Result<UniqueFd> connect_jailed(int dir_fd, const std::string& name, uid_t peer_uid,
                                std::chrono::steady_clock::time_point deadline, int pidfd = -1);

// Opens a stream to guest vsock port `port` through the device socket `name` in `dir_fd`:
// connect_jailed, then the CONNECT handshake. A guest that does not listen yet (Firecracker
// hangs up, or answers anything but "OK <n>\n") is retried until `deadline`. The fd returned
// is blocking, O_CLOEXEC, and carries only the guest's bytes.
Result<UniqueFd> vsock_connect(int dir_fd, const std::string& name, uint32_t port, uid_t peer_uid,
                               std::chrono::steady_clock::time_point deadline, int pidfd = -1);

}  // namespace space::runtime::firecracker
