// Cleanup that nobody needs to wait for (empty directories, a finished thread to join), done on
// one background thread so that `space rm` answers as soon as the sandbox's processes are dead.
// Tasks run in order; the process-wide instance drains its queue when the process exits
// normally. A task must not throw and must not need anything that may be gone by then.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace space {

class Janitor {
 public:
  Janitor() : thread_([this] { run(); }) {}
  Janitor(const Janitor&) = delete;
  ~Janitor() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  // Returns once every task posted before the call has run.
  void drain() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return tasks_.empty() && !busy_; });
  }

  static Janitor& instance() {
    static Janitor j;
    return j;
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, nothing left
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
      lock.unlock();
      task();
      lock.lock();
      busy_ = false;
      if (tasks_.empty()) idle_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is ready
};

}  // namespace space
