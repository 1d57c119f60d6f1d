// What spaced keeps of a detached command (ExecRequest::detach): a bounded log of its output
// and its end, filled by a pump thread (Daemon::exec) and read by GET .../processes/{pid}/logs
// and /wait. Per sandbox, ExecLogs holds the kExecLogsPerSandbox most recent ones by pid.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "daemon/service.h"

namespace space::daemon {

class KeptExecLog : public ExecLog {
 public:
  KeptExecLog(int pid, size_t limit = kExecLogBytes) : pid_(pid), limit_(limit) {}

  // The pump's side.
  void append(bool is_stderr, std::string data);
  void finish(const ExitStatus& exit);
  void fail(Error why);

  Read read(uint64_t& cursor, std::chrono::steady_clock::time_point until) override;
  bool wait(std::chrono::steady_clock::time_point until) override;
  int pid() const override { return pid_; }
  bool ended() const;

 private:
  const int pid_;
  const size_t limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Chunks in arrival order; the first starts at byte offset `base_` of all output.
  std::deque<Chunk> chunks_;
  uint64_t base_ = 0;
  size_t kept_ = 0;  // bytes in chunks_
  bool ended_ = false;
  std::optional<ExitStatus> exit_;
  std::optional<Error> error_;
};

// The detached commands of one sandbox, by pid (a pid reused by a later one replaces it).
class ExecLogs {
 public:
  // Takes a slot for one more, held until add() fills it or release() gives it back: evicts
  // the oldest ended log when full; an error when every slot holds a running command or is
  // taken by a command being started.
  Result<void> reserve(const std::string& sandbox);
  void release();
  void add(std::shared_ptr<KeptExecLog> log);  // fills a slot reserve() took
  std::shared_ptr<KeptExecLog> find(int pid);

 private:
  std::mutex mu_;
  std::map<int, std::pair<uint64_t, std::shared_ptr<KeptExecLog>>> logs_;  // pid -> (seq, log)
  uint64_t seq_ = 0;
  size_t reserved_ = 0;  // slots taken by commands being started
};

}  // namespace space::daemon
