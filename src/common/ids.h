// Random ids as the project writes them: a prefix and random bytes in lowercase hex ("sb_3f2a...",
// "snap_...", an API token's id and secret). Drawn from getrandom(2); used by the daemon, the API
// layer's token handling and the gateway's `token create`, which need it without the daemon.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace space {

// `prefix` and then `bytes` random bytes in hex (at most 32 are drawn per call).
std::string random_id(std::string_view prefix, size_t bytes);

}  // namespace space
