// The gateway processes of one spaced (docs/egress.md, "The gateway process"). By default one
// space-egress serves every sandbox. With `gateway.sandboxes_per_process` N, each process is
// handed at most N sandboxes over its whole life and ends when the last of them detaches: with
// N = 1 a sandbox that takes its gateway over holds only its own connections, CA and secrets,
// never another sandbox's. A process that served a sandbox is never handed a later one beyond
// its N, so a takeover cannot wait for new victims.
//
// Starting a process takes ~28 ms (exec, confinement, the handshake, a warm-up), more than a create
// from a warm pool, so the pool keeps kSpares processes started and unused, refilled by a thread of
// its own; only a burst of creates beyond them waits for a start. A spare has served no sandbox.
//
// The pool has EgressProcess's surface; each process supervises and restarts itself, so a crash
// interrupts only the sandboxes it served.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/egress_proc.h"

namespace space::daemon {

class EgressPool {
 public:
  struct Options {
    EgressProcess::Options process;
    size_t sandboxes_per_process = 0;  // 0: one process for every sandbox
  };

  // With sandboxes_per_process 0, starts the shared process now (a failure is spaced's start-up
  // error); otherwise processes start as sandboxes attach.
  static Result<std::unique_ptr<EgressPool>> start(Options options);
  ~EgressPool();  // stop()
  EgressPool(const EgressPool&) = delete;
  EgressPool& operator=(const EgressPool&) = delete;

  // Ends every process, and waits for those still ending. Idempotent.
  void stop();

  Result<void> attach(egress::SandboxEgress sandbox, int netns_fd);
  Result<void> attach(egress::SandboxEgress sandbox, egress::BoundListeners listeners);
  void detach(const std::string& id);

  egress::Gateway::Stats stats();     // summed over the processes
  uint64_t restarts() const;          // of every process, those ended included
  uint64_t refused_messages() const;  // the same for EgressProcess::refused_messages()
  size_t processes() const;           // running now, spares included

  static constexpr size_t kSpares = 2;

 private:
  explicit EgressPool(Options options) : o_(std::move(options)) {}
  struct Slot {
    std::shared_ptr<EgressProcess> proc;
    std::vector<std::string> ids;  // attached now
    size_t served = 0;             // sandboxes handed to it over its life
  };
  // The process for a new sandbox `id` (started if none has room), with the sandbox counted in.
  Result<std::shared_ptr<EgressProcess>> claim(const std::string& id);
  void unclaim(const std::string& id);  // detaches the id's slot entry; may end its process
  void retire(std::shared_ptr<EgressProcess> p);
  void refill();  // the spares' thread

  Options o_;
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::vector<std::shared_ptr<EgressProcess>> spares_;
  std::thread refiller_;
  size_t retiring_ = 0;             // processes being stopped on threads of their own
  uint64_t old_restarts_ = 0;       // restarts of processes that ended
  uint64_t old_refused_ = 0;        // refused messages of processes that ended
  egress::Gateway::Stats retired_;  // the counters of processes that ended
  bool stopping_ = false;
};

}  // namespace space::daemon
