// spaced's side of the gateway process (docs/egress.md, "The gateway process"). The egress
// gateway parses bytes chosen by hostile sandboxes, so it runs outside spaced, as space-egress:
// its own uid, no capabilities, its own seccomp role, spaced's state hidden (egressd/). spaced
// binds each sandbox's listening sockets inside the sandbox's network namespace (which needs
// its privileges), keeps them, and hands copies to the process with the sandbox's policy, grants
// and CA (egress/wire.h). The process asks for secret values as requests need them; spaced
// answers only for secrets granted to the sandbox the request is for, and runs token commands
// itself.
//
// Supervision: when the process dies (crash, SIGKILL, a failed start) every sandbox attached to
// it gets an audited `egress.interrupted` event, its connections in flight end (the sandbox's
// clients see a reset), and a new process is started (at once, then with a growing pause if it
// keeps dying) and given every sandbox again. The listening sockets stay open in spaced all the
// while, so connections made meanwhile wait in their backlog and are served by the new process:
// no sandbox loses its way out. Everything a sandbox needs lives in spaced; the process holds
// nothing that is not handed to it again.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "common/token_bucket.h"
#include "egress/credentials.h"
#include "egress/gateway.h"
#include "egress/wire.h"

namespace space::daemon {

class EgressProcess {
 public:
  struct Options {
    std::filesystem::path binary;  // space-egress
    uid_t uid = 0;                 // the process's own ids (never 0)
    gid_t gid = 0;
    std::vector<std::filesystem::path> hide;       // directories it must not see (the state dir)
    egress::Gateway::Options gateway;              // resolve, upstream CA files, timeouts, audit
    std::shared_ptr<egress::SecretStore> secrets;  // spaced's: the only place values come from
  };

  // Starts the process and waits until it is ready (a few milliseconds); fails with its reason
  // if it cannot start or confine itself.
  static Result<std::unique_ptr<EgressProcess>> start(Options options);
  ~EgressProcess();  // stop()
  EgressProcess(const EgressProcess&) = delete;
  EgressProcess& operator=(const EgressProcess&) = delete;

  // Ends the process (its connections end with it) and the supervisor. Idempotent.
  void stop();
  // The first half of stop(), which does not wait: closes the channel, so the process starts
  // to exit. For ending many at once: begin_stop() each, then stop() each.
  void begin_stop();

  // As egress::Gateway: binds the sandbox's listeners in `netns_fd` (or takes listeners bound
  // ahead of time) and has the process serve them. The sandbox stays attached across restarts
  // of the process until detach().
  Result<void> attach(egress::SandboxEgress sandbox, int netns_fd);
  Result<void> attach(egress::SandboxEgress sandbox, egress::BoundListeners listeners);
  void detach(const std::string& id);

  // The process's counters (zeros while it restarts).
  egress::Gateway::Stats stats();
  pid_t pid() const { return pid_.load(); }
  uint64_t restarts() const { return restarts_.load(); }
  // Messages from the process refused as malformed (an unknown op, a missing or mistyped field,
  // a forged audit kind: egress/wire.h), over its restarts. Each is logged (rate-limited).
  uint64_t refused_messages() const { return refused_.load(); }

 private:
  explicit EgressProcess(Options options);
  struct Entry {
    egress::SandboxEgress eg;
    egress::BoundListeners listeners;  // spaced's own copies, open as long as the entry
    TokenBucket mint;                  // token-command runs this sandbox may cause
  };
  struct Waiter {
    std::optional<Result<void>> result;
    egress::Gateway::Stats stats;  // a stats request's answer
    bool ended = false;            // the process ended before it answered
  };

  Result<void> spawn();  // starts the process, sends init, waits for ready
  void supervise();      // the supervisor thread: reads, restarts
  void on_message(egress::wire::ToDaemon m);
  void refuse(const Error& e);  // counts and logs a refused message
  void answer_secret(uint64_t seq, std::string id, std::string name);
  // Under mu_: sends the attach message of `e` with `seq` (0: nobody waits for the reply).
  Result<void> send_attach_locked(const Entry& e, uint64_t seq);
  // Sends `m` with the next seq and waits for its reply (a stats request's counters).
  Result<egress::Gateway::Stats> request(egress::wire::ToGateway m,
                                         std::chrono::milliseconds timeout);
  void fail_waiters_locked(const Error& e);

  Options o_;
  std::mutex mu_;  // guards everything below but the atomics
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;
  UniqueFd ctl_;        // spaced's end of the control socket
  bool ready_ = false;  // the process is up and has every entry
  bool stopping_ = false;
  uint64_t next_seq_ = 0;
  std::map<uint64_t, std::shared_ptr<Waiter>> waiters_;
  size_t secret_threads_ = 0;  // answer_secret threads running
  std::thread supervisor_;
  std::atomic<pid_t> pid_{0};
  std::atomic<uint64_t> restarts_{0};
  std::atomic<uint64_t> refused_{0};
  std::mutex refused_log_mu_;  // guards refused_log_
  TokenBucket refused_log_;
  std::mutex send_mu_;  // one sender at a time on ctl_
};

}  // namespace space::daemon
