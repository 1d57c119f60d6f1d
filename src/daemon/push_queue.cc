// Snapshots on their way to the shared store (push_queue.h).
#include "daemon/push_queue.h"

#include <spdlog/spdlog.h>

namespace space::daemon {

void PushQueue::start(Push push) {
  push_ = std::move(push);
  thread_ = std::thread([this] { run(); });
}

void PushQueue::add(SnapshotRecord rec) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Item{std::move(rec), std::nullopt});
  }
  cv_.notify_one();
}

Result<void> PushQueue::push_and_wait(SnapshotRecord rec) {
  std::future<Result<void>> result;
  {
    std::lock_guard lock(mu_);
    if (stopping_ || !thread_.joinable())
      return fail(Code::kUnavailable, "spaced is stopping: snapshot " + rec.id + " not pushed");
    Item item{std::move(rec), std::promise<Result<void>>()};
    result = item.done->get_future();
    queue_.push_back(std::move(item));
  }
  cv_.notify_one();
  return result.get();
}

void PushQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PushQueue::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    // What was queued is pushed before stopping: a snapshot taken is a snapshot shared.
    if (queue_.empty()) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    auto r = push_(item.rec);
    if (item.done) {
      item.done->set_value(std::move(r));
    } else if (!r) {
      spdlog::warn("cluster: pushing snapshot {} of {}: {} (kept on this node only)", item.rec.id,
                   item.rec.sandbox_id, r.error().message());
    }
    lock.lock();
  }
}

}  // namespace space::daemon
