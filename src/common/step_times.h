// Where the time of a multi-step operation goes (sandbox creation: cgroup, netns, layer, clone,
// agent hello, CA, ...). Each mark() closes the step that began at the previous mark. The
// daemon adds the steps to /metrics and logs them; `bench/` reads the metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace space {

class StepTimes {
 public:
  using Clock = std::chrono::steady_clock;
  StepTimes() : start_(Clock::now()), last_(start_) {}

  // Ends the current step and names it; the next step starts now.
  void mark(const char* step) {
    auto now = Clock::now();
    steps_.emplace_back(step,
                        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count());
    last_ = now;
  }

  const std::vector<std::pair<const char*, int64_t>>& steps() const { return steps_; }
  int64_t total_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(last_ - start_).count();
  }
  // "cgroup 0.21, netns 0.80, ..." in milliseconds, for logs.
  std::string summary() const {
    std::string s;
    char buf[32];
    for (auto& [name, ns] : steps_) {
      snprintf(buf, sizeof buf, " %.2f", static_cast<double>(ns) / 1e6);
      s += (s.empty() ? "" : ", ") + std::string(name) + buf;
    }
    return s;
  }

 private:
  Clock::time_point start_, last_;
  std::vector<std::pair<const char*, int64_t>> steps_;
};

}  // namespace space
