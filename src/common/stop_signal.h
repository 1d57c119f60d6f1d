// What a background loop sleeps on: it wakes at its next tick, when something asks it to look
// now (wake), or at shutdown (stop), which it then sees and ends. One lock, a leaf.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace space {

class StopSignal {
 public:
  // Sleeps up to `d` (less when woken). True once stopped.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) {
    std::unique_lock lock(mu_);
    if (!stopped_) cv_.wait_for(lock, d);
    return stopped_;
  }
  void wake() { cv_.notify_all(); }
  // True for the call that stopped it (the first).
  bool stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return false;
      stopped_ = true;
    }
    cv_.notify_all();
    return true;
  }
  bool stopped() const {
    std::lock_guard lock(mu_);
    return stopped_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

}  // namespace space
