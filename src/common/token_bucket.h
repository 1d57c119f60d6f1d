// A token bucket that starts full: take() refills it for the time since the last call at `rate`
// tokens per second, up to `burst`, and takes one token if there is one. Not thread-safe: the
// owner holds a lock around it.
#pragma once

#include <algorithm>
#include <chrono>

namespace space {

struct TokenBucket {
  double tokens = 0;
  std::chrono::steady_clock::time_point last{};
  bool take(double rate, double burst) {
    auto now = std::chrono::steady_clock::now();
    double refill = std::chrono::duration<double>(now - last).count() * rate;
    tokens =
        last == std::chrono::steady_clock::time_point{} ? burst : std::min(burst, tokens + refill);
    last = now;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  }
};

}  // namespace space
