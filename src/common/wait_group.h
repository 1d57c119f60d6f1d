// Counts work in flight on other threads (detached commands' output pumps) so that shutdown
// can wait for all of it to end. One lock, a leaf.
#pragma once

#include <condition_variable>
#include <mutex>

namespace space {

class WaitGroup {
 public:
  void add() {
    std::lock_guard lock(mu_);
    n_++;
  }
  void done() {
    std::lock_guard lock(mu_);
    if (--n_ == 0) cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return n_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0;
};

}  // namespace space
