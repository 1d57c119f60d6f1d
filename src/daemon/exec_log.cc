#include "daemon/exec_log.h"

#include <algorithm>

namespace space::daemon {

void KeptExecLog::append(bool is_stderr, std::string data) {
  if (data.empty()) return;
  {
    std::lock_guard l(mu_);
    kept_ += data.size();
    // Output that arrives in tiny pieces is joined to the piece before (same stream, up to
    // kExecLogReadBytes): a chunk's bookkeeping must not cost more than its bytes.
    if (!chunks_.empty() && chunks_.back().is_stderr == is_stderr &&
        chunks_.back().data.size() + data.size() <= kExecLogReadBytes)
      chunks_.back().data += data;
    else
      chunks_.push_back(Chunk{is_stderr, std::move(data)});
    // Keep the newest `limit_` bytes; a chunk that no longer fits whole is cut at its front.
    while (kept_ > limit_) {
      Chunk& first = chunks_.front();
      size_t excess = kept_ - limit_;
      if (first.data.size() <= excess) {
        base_ += first.data.size();
        kept_ -= first.data.size();
        chunks_.pop_front();
      } else {
        first.data.erase(0, excess);
        base_ += excess;
        kept_ -= excess;
      }
    }
  }
  cv_.notify_all();
}

void KeptExecLog::finish(const ExitStatus& exit) {
  {
    std::lock_guard l(mu_);
    if (ended_) return;
    ended_ = true;
    exit_ = exit;
  }
  cv_.notify_all();
}

void KeptExecLog::fail(Error why) {
  {
    std::lock_guard l(mu_);
    if (ended_) return;
    ended_ = true;
    error_ = std::move(why);
  }
  cv_.notify_all();
}

bool KeptExecLog::ended() const {
  std::lock_guard l(mu_);
  return ended_;
}

ExecLog::Read KeptExecLog::read(uint64_t& cursor, std::chrono::steady_clock::time_point until) {
  std::unique_lock l(mu_);
  cv_.wait_until(l, until, [&] { return ended_ || base_ + kept_ > cursor; });
  Read r;
  if (cursor < base_) {
    r.dropped = base_ - cursor;
    cursor = base_;
  }
  uint64_t at = base_;
  size_t room = kExecLogReadBytes;
  for (const Chunk& c : chunks_) {
    uint64_t end = at + c.data.size();
    if (end > cursor && room > 0) {
      size_t skip = cursor > at ? cursor - at : 0;
      size_t n = std::min(room, c.data.size() - skip);
      r.chunks.push_back(Chunk{c.is_stderr, c.data.substr(skip, n)});
      cursor += n;
      room -= n;
    }
    at = end;
  }
  r.more = cursor < base_ + kept_;
  r.ended = ended_ && !r.more;
  r.exit = exit_;
  r.error = error_;
  return r;
}

bool KeptExecLog::wait(std::chrono::steady_clock::time_point until) {
  std::unique_lock l(mu_);
  return cv_.wait_until(l, until, [&] { return ended_; });
}

Result<void> ExecLogs::reserve(const std::string& sandbox) {
  std::lock_guard l(mu_);
  if (logs_.size() + reserved_ < kExecLogsPerSandbox) {
    ++reserved_;
    return {};
  }
  auto oldest = logs_.end();
  for (auto it = logs_.begin(); it != logs_.end(); ++it)
    if (it->second.second->ended() &&
        (oldest == logs_.end() || it->second.first < oldest->second.first))
      oldest = it;
  if (oldest == logs_.end())
    return space::fail(Code::kResourceExhausted,
                       std::to_string(kExecLogsPerSandbox) +
                           " detached commands already run in sandbox " + sandbox +
                           "; wait for one to end or stop one (`space ps`, `space kill`)");
  logs_.erase(oldest);
  ++reserved_;
  return {};
}

void ExecLogs::release() {
  std::lock_guard l(mu_);
  if (reserved_ > 0) --reserved_;
}

void ExecLogs::add(std::shared_ptr<KeptExecLog> log) {
  std::lock_guard l(mu_);
  if (reserved_ > 0) --reserved_;
  int pid = log->pid();
  logs_[pid] = {++seq_, std::move(log)};
}

std::shared_ptr<KeptExecLog> ExecLogs::find(int pid) {
  std::lock_guard l(mu_);
  auto it = logs_.find(pid);
  return it == logs_.end() ? nullptr : it->second.second;
}

}  // namespace space::daemon
