// Snapshots on their way to the cluster's shared store (docs/cluster.md), pushed one at a time
// by one thread in the order they were taken; a push someone waits for (a drain) takes its
// turn in the same queue. One lock, a leaf: it guards the queue, never a push.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"
#include "daemon/store.h"

namespace space::daemon {

class PushQueue {
 public:
  using Push = std::function<Result<void>(const SnapshotRecord&)>;
  ~PushQueue() { stop(); }
  // Starts the thread, which calls `push` for each snapshot queued.
  void start(Push push);
  // Queued: pushed in the background (a failure is logged: the snapshot stays on this node).
  void add(SnapshotRecord rec);
  // Queued, and waited for: what the push returned.
  Result<void> push_and_wait(SnapshotRecord rec);
  // Pushes what is queued, then ends the thread. Idempotent.
  void stop();

 private:
  struct Item {
    SnapshotRecord rec;
    std::optional<std::promise<Result<void>>> done;  // set where someone waits
  };
  void run();

  Push push_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace space::daemon
