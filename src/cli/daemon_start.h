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

// Succeeds when a daemon answers on client.socket_path(), starting one if none does.
Result<void> ensure_daemon(const Client& client);

// Where spaced is: next to /proc/self/exe, else the first executable `spaced` in $PATH.
Result<std::filesystem::path> find_spaced();

}  // namespace space::cli
