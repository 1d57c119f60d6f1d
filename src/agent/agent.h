// The agent's event loop: one thread, one epoll set over the channel to the daemon, the spare
// socketpair (reattach) or the channel listener (--channel-listen: each accepted connection
// becomes the channel), a signalfd for SIGCHLD and every exec's pipes. It dispatches frames
// (docs/agent-protocol.md), runs execs under per-exec shims (shim.h), serves file requests
// inside the root (file_ops.h) and, as PID 1, reaps every child.
//
// The implementation is split by concern: agent.cc (start-up, loop, channel, reattach,
// reaping), agent_exec.cc (exec streams), agent_requests.cc (requests and file transfers),
// agent_egress.cc (guest TCP connections carried to the daemon's egress gateway), agent_dns.cc
// (guest DNS queries carried to the gateway's DNS stub), agent_exec_audit.cc (microVMs: every
// exec in the guest reported to the daemon, exec_audit.h).
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/channel.h"
#include "agent/exec_audit.h"
#include "agent/exec_spec.h"
#include "agent/file_ops.h"
#include "agent/options.h"
#include "agent/path_resolver.h"
#include "common/error.h"
#include "common/fd.h"
#include "proto/frame.h"

namespace space::agent {

using Clock = std::chrono::steady_clock;

// How long after the main process exited the agent waits for background processes that keep
// its stdout/stderr open before closing the pipes and sending `exit`.
inline constexpr std::chrono::milliseconds kDrainGrace{200};
// Chunk size for pipe and file reads (each becomes at most one data frame).
inline constexpr size_t kReadChunk = 64 * 1024;
// Bytes of stdin the agent buffers per exec before it closes the process's stdin (see
// docs/agent-protocol.md, "Stdin").
inline constexpr size_t kMaxStdinPending = 8u << 20;
// While this much output is queued for the daemon the agent stops reading the channel and
// producing file-transfer data.
inline constexpr size_t kOutputHighWater = 4u << 20;

class Agent {
 public:
  explicit Agent(Options opts) : opts_(std::move(opts)) {}
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // The start-up recipe: fds, dumpability, signals, root fd, epoll, hello.
  Result<void> init();
  // Runs the loop. Returns only on an unrecoverable internal error.
  Result<void> run();

 private:
  enum Kind : uint64_t {
    kChannel = 1,
    kSpare = 2,
    kSignalFd = 3,
    kExecStatus = 4,
    kExecStdout = 5,
    kExecStderr = 6,
    kExecStdin = 7,
    kEgressListen = 8,
    kEgressConn = 9,
    kChannelListen = 10,
    kDnsListen = 11,
    kExecAudit = 12,
  };
  static uint64_t key(Kind k, uint64_t id) { return (static_cast<uint64_t>(k) << 56) | id; }

  struct Exec {
    uint64_t serial = 0;
    uint32_t stream = 0;
    bool attached = true;  // false once the channel it belonged to is gone: output discarded
    ExecSpec spec;
    pid_t shim_pid = -1;
    pid_t worker_pid = -1;
    UniqueFd status_r, stdin_w, stdout_r, stderr_r;
    UniqueFd tty;  // spec.tty: the terminal's master side, for resizes
    bool stdout_polled = false, stderr_polled = false, stdin_polled = false;
    std::string status_buf;
    std::string stdin_pending;  // bytes from stdin_off on are not yet in the pipe
    size_t stdin_off = 0;
    bool stdin_close_requested = false;
    bool started = false;
    std::optional<int> wait_status;
    std::optional<StartFailure> failure;
    uint64_t unacked = 0;  // data bytes sent and not yet credited
    std::optional<Clock::time_point> drain_deadline;
  };
  struct ShimInfo {
    uint32_t stream = 0;
    UniqueFd control;
  };
  struct ReadTransfer {
    UniqueFd fd;
    uint64_t size = 0;
    uint64_t unacked = 0;
  };
  struct WalkTransfer {
    std::unique_ptr<Walker> walker;
    std::string pending;  // listing text produced and not yet sent (entries may span frames)
    bool done = false;    // the walker has nothing more
    uint64_t unacked = 0;
  };
  struct WriteTransfer {
    UniqueFd fd;
    uint64_t size = 0;
  };
  // One guest connection accepted on the egress listener, carried on an agent stream.
  struct EgressConn {
    uint64_t serial = 0;
    uint32_t stream = 0;
    UniqueFd fd;
    bool connected = false;   // the daemon answered the connect with ok
    bool guest_eof = false;   // the guest shut down its side; an empty data frame went out
    bool daemon_eof = false;  // the daemon sent an empty data frame
    bool shut_wr = false;     // ...and everything before it reached the guest: SHUT_WR done
    std::string to_guest;     // bytes from the daemon not yet written to the guest socket
    size_t to_guest_off = 0;
    uint64_t unacked = 0;  // bytes sent to the daemon and not yet credited
    uint32_t polled = 0;   // the epoll events currently registered
    bool in_epoll = false;
    bool hup = false;     // EPOLLHUP seen while it could not read: parked out of epoll
    bool closed = false;  // finished or aborted; erased from egress_ by the loop
  };

  // agent.cc
  Result<void> epoll_add(int fd, uint32_t events, uint64_t k);
  void epoll_del(int fd);
  void send(proto::FrameType type, uint32_t stream, std::string_view payload);
  void send_hello();
  void set_channel(UniqueFd fd);
  void channel_lost(std::string_view why);
  void on_channel_event(uint32_t events);
  void on_spare_readable();
  void try_reopen_channel();
  Result<void> start_channel_listener();
  void on_channel_accept();
  void update_channel_interest();
  void dispatch(proto::Frame& f);
  void on_sigchld();
  int next_timeout_ms() const;

  // agent_exec.cc
  void start_exec(uint32_t stream, std::string_view payload);
  void on_exec_event(Kind kind, uint64_t serial);
  void read_status(Exec& e);
  void mark_started(Exec& e);
  ssize_t read_output(Exec& e, bool is_stderr, size_t max);
  bool drain_blocked(const Exec& e) const;
  void write_stdin(Exec& e);
  void update_exec_interest(Exec& e);
  void maybe_finish(Exec& e);
  void finish(Exec& e);
  void on_stdin_frame(uint32_t stream, std::string&& payload);
  void on_signal_frame(uint32_t stream, std::string_view payload);
  void on_credit_frame(uint32_t stream, std::string_view payload);
  void on_worker_reaped(pid_t pid, int status);
  void check_exec_deadlines();
  void detach_execs();
  Exec* exec_for_stream(uint32_t stream);

  // agent_egress.cc
  // The listener of opts_.egress_listen[index] (its epoll key carries the index).
  Result<void> start_egress_listener(size_t index);
  void on_egress_accept(uint64_t index);
  void on_egress_event(uint64_t serial, uint32_t events);
  void on_egress_frame(proto::Frame& f);
  void egress_read_guest(EgressConn& c);
  void egress_write_guest(EgressConn& c);
  void egress_abort(EgressConn& c, bool tell_daemon);
  void egress_maybe_done(EgressConn& c);
  void update_egress_interest();
  void drop_egress();  // also drop_dns()
  // A free agent stream id (kAgentStreamBit | n, n counting up) for an egress connection or a
  // DNS query.
  uint32_t new_agent_stream();

  // agent_dns.cc
  Result<void> start_dns_listener();
  void on_dns_readable();
  void on_dns_answer(const proto::Frame& f);
  void drop_dns();

  // agent_exec_audit.cc
  Result<void> start_exec_audit();
  void on_exec_audit_readable();
  void flush_exec_audit();  // queued records to the daemon, while the channel keeps up
  std::optional<uint32_t> exec_stream_of(pid_t ppid) const;

  // agent_requests.cc
  void on_request(uint32_t stream, std::string_view payload);
  void on_data_frame(uint32_t stream, std::string&& payload);
  Result<nlohmann::json> do_ps();
  Result<void> do_kill(const nlohmann::json& req);
  // A machine restored from a snapshot (VMs only: the agent is the guest's own init there):
  // hostname, wall clock and fresh entropy from the daemon.
  Result<void> do_resync(const nlohmann::json& req);
  Result<void> do_sync();
  bool pump_transfers();  // true while a transfer could make progress right away
  void drop_transfers();
  void respond(uint32_t stream, const Result<nlohmann::json>& r);

  Options opts_;
  UniqueFd root_fd_;
  std::unique_ptr<PathResolver> resolver_;
  UniqueFd epoll_;
  UniqueFd sigfd_;
  std::unique_ptr<Channel> channel_;
  UniqueFd channel_listener_;  // --channel-listen only
  uint64_t channel_gen_ = 0;
  bool channel_in_polled_ = false;
  bool channel_out_polled_ = false;
  std::optional<Clock::time_point> reopen_at_;
  int reopen_backoff_ms_ = 50;
  bool warned_direction_ = false;

  uint64_t next_serial_ = 1;
  std::map<uint64_t, std::unique_ptr<Exec>> execs_;
  std::unordered_map<uint32_t, uint64_t> stream_execs_;  // attached, unfinished execs
  std::unordered_map<pid_t, uint64_t> worker_execs_;     // worker pid -> exec without status
  std::map<pid_t, ShimInfo> shims_;                      // live shims (outlive their execs)

  std::map<uint32_t, ReadTransfer> reads_;
  std::map<uint32_t, WalkTransfer> walks_;
  std::map<uint32_t, WriteTransfer> writes_;
  std::set<uint32_t> failed_writes_;  // write streams answered with an error: data ignored

  std::vector<UniqueFd> egress_listeners_;  // one per opts_.egress_listen
  uint32_t next_egress_stream_ = 0;
  std::map<uint64_t, std::unique_ptr<EgressConn>> egress_;  // by serial
  std::unordered_map<uint32_t, uint64_t> egress_streams_;   // stream -> serial
  std::vector<uint64_t> egress_closing_;                    // finished; erased in the loop

  // A guest DNS query sent to the daemon and not answered yet, by its stream.
  struct DnsQuery {
    sockaddr_in from{};  // the guest socket that asked
    Clock::time_point deadline;
  };
  UniqueFd dns_sock_;  // --dns-listen
  std::map<uint32_t, DnsQuery> dns_queries_;

  std::unique_ptr<ExecAudit> exec_audit_;  // --audit-execs, or the guest's init
};

// Logs one line to stderr ("space-agent: ..."). Used sparingly: stderr may be /dev/null.
void log_line(std::string_view msg);
// Brings the loopback interface up if it is down (a microVM's starts down), so that the
// agent's listeners on 127/8 are reachable; the only network configuration the agent does.
void bring_up_loopback();

}  // namespace space::agent
