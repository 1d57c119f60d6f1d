// Moves bytes both ways between two connected stream sockets until both directions have ended
// (each side's end of input becomes a shutdown(SHUT_WR) of the other), an error, or `stop_fd`
// (an eventfd, -1 = none) becomes readable. The port forwards of `space port` and of
// POST /v1/sandboxes/{id}/ports/{port} use it on both ends.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/error.h"

namespace space {

struct RelayOptions {
  int stop_fd = -1;
  // Bytes already read from `a` (or `b`) before the relay began, sent to the other side first.
  std::string a_pending, b_pending;
  // Called about once a second; an error ends the relay with it (a token that went bad).
  std::function<Result<void>()> still_allowed;
  // No byte moving either way for this long ends the relay, as an end (0 = no limit). The E2B
  // door's proxy to a sandbox's ports sets it; `space port`'s tunnels do not.
  std::chrono::milliseconds idle_timeout{0};
};

// Both fds are made non-blocking. Returns once the relay is over; the caller closes the fds.
Result<void> relay(int a, int b, RelayOptions options = {});

}  // namespace space
