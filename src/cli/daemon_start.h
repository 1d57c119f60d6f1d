// `space run` and `space create` work on a fresh machine: when no daemon answers on the socket
// they start `spaced` (found next to the `space` executable, else in PATH), detached in its own
// session with stdio on /dev/null (it logs to its state directory), and wait up to 10 s for
// GET /v1/health to answer.
#pragma once

#include <filesystem>
#include <string>

#include "cli/client.h"
#include "common/error.h"

namespace space::cli {

// A connection to the daemon on client.socket_path() (with the client's stop fd and token),
// starting the daemon if none answers. The caller sends its first request on it: no separate
// probe connection.
Result<Connection> ensure_daemon(const Client& client);

// Where spaced is: next to /proc/self/exe, else the first executable `spaced` in $PATH.
Result<std::filesystem::path> find_spaced();

}  // namespace space::cli
