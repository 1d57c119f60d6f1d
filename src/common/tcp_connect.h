// An outgoing TCP connection with a deadline and a stop fd, which connect(2) alone lacks: the
// cluster's HTTP client (etcd, Kubernetes, S3) and the gateway's connections to nodes use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace space {

// A connected, non-blocking, close-on-exec socket to `host` (a name or a numeric address)
// and `port`, trying each address the name resolves to. Errors: kUnavailable for a name that
// does not resolve ("cannot resolve HOST: ..."), kTimeout when `timeout` passes first
// (errno ETIMEDOUT), kUnavailable with errno ECANCELED once `stop_fd` (an eventfd, -1 = none)
// is readable, kUnavailable with the errno of the last address tried otherwise
// (ECONNREFUSED: nothing listens). Messages name HOST:PORT.
[[nodiscard]] Result<UniqueFd> tcp_connect(const std::string& host, uint16_t port,
                                           std::chrono::milliseconds timeout, int stop_fd = -1);

}  // namespace space
