// The daemon's side of one agent channel: a reader thread that decodes and validates frames
// from the (untrusted) agent and routes them to per-stream queues, and a writer that encodes
// frames onto the channel with a bounded wait. Streams carry one request, exec or file
// transfer each; their ids are allocated here. Streams the agent opens (egress connections,
// ids with proto::kAgentStreamBit) are announced to an owner-set handler (EgressRelay), and the
// guest DNS queries the agent carries (`dns` frames) go to another (DnsRelay).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "proto/frame.h"

namespace space::daemon {

// A field of JSON that came from the agent, or `def` if it is missing or of another type.
// (nlohmann's value() throws on a type mismatch; the agent's JSON is untrusted.)
template <class T>
T agent_field(const nlohmann::json& j, const char* key, T def) {
  if (!j.is_object()) return def;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return def;
  }
}

using Clock = std::chrono::steady_clock;

// Frames addressed to one stream, in order. The reader thread pushes; one consumer pops.
class Stream {
 public:
  explicit Stream(uint32_t id) : id_(id) {}
  uint32_t id() const { return id_; }

  // Waits for the next frame until `deadline` (nullopt = forever). Returns kTimeout at the
  // deadline, kUnavailable when the channel broke.
  Result<proto::Frame> pop(std::optional<Clock::time_point> deadline = std::nullopt);
  // Non-blocking: a frame if one is queued.
  std::optional<proto::Frame> try_pop();
  // Stdin flow control ("stdin_credit" execs): waits until `n` more bytes fit in the agent's
  // stdin window, then reserves them. False if the stream ended or broke meanwhile.
  bool reserve_stdin(size_t n);
  // Fails the stream from the consumer's side: every waiter (pop, reserve_stdin) wakes with e.
  // Frames already queued are still returned by pop first.
  void abort(const Error& e) { fail(e); }

 private:
  friend class AgentConn;
  // Returns false if the agent overran the flow-control window (a protocol violation).
  bool push(proto::Frame f);
  void fail(const Error& e);
  void credited(size_t n);
  void stdin_credited(size_t n);

  const uint32_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<proto::Frame> q_;
  size_t unacked_ = 0;        // data bytes received and not yet credited back
  size_t stdin_unacked_ = 0;  // stdin bytes sent and not yet credited by the agent
  bool ended_ = false;        // an exit frame arrived
  // Agent streams only: the daemon answered the connect with ok. Before that the agent may not
  // send data on it (so a stream nobody serves cannot make the daemon buffer anything).
  std::atomic<bool> accepted_{false};
  std::optional<Error> err_;
};

class AgentConn {
 public:
  // Starts the reader on `fd` (not owned: the runtime Instance owns it) and waits for the
  // agent's hello. With `ping_first` (reattach) a ping is sent first: the agent switches to
  // this channel when it sees it and then says hello.
  static Result<std::unique_ptr<AgentConn>> open(int fd, std::string name, bool ping_first,
                                                 std::chrono::milliseconds timeout);
  ~AgentConn();
  AgentConn(const AgentConn&) = delete;
  AgentConn& operator=(const AgentConn&) = delete;

  // Stops the reader; every open stream fails with kUnavailable. Idempotent.
  void close();
  bool alive() const { return !lost_.load(); }
  // Called once, from the reader thread, when the channel breaks (EOF, error, bad frame).
  void set_on_lost(std::function<void(const Error&)> cb);

  std::shared_ptr<Stream> open_stream();
  void close_stream(uint32_t id);

  // Agent-initiated streams: the agent sent `connect` {"port"} on a new stream with
  // kAgentStreamBit set. The stream is registered (its data, credit and reset frames are
  // routed to it) and handed to `h` on the reader thread, so `h` must not block; the consumer
  // answers with a `response` and calls close_stream() when done. Connects that arrive before
  // a handler is set wait (at most kMaxEgressConns of them) and are handed over by this call.
  // set_on_agent_stream(nullptr) returns only once no call of the previous handler is running.
  // The agent may send data on such a stream only after the daemon accepted it with
  // accept_agent_stream() (which sends the ok `response`). At most kMaxEgressConns agent streams
  // are open; a connect beyond that is answered with an error response here. Protocol violations
  // close the channel (as for every other stream): a malformed connect, a connect on a daemon-range
  // or already-open id, data before the ok, a reset on a daemon-range stream, or a window overrun.
  using AgentStreamHandler = std::function<void(std::shared_ptr<Stream>, uint16_t port)>;
  // Lowers the bound on open agent streams below kMaxEgressConns (at least 1): a connect beyond
  // it gets the same error response.
  void set_agent_stream_limit(size_t n);
  void set_on_agent_stream(AgentStreamHandler h);
  size_t agent_streams() const;
  // Sends the ok `response` to the agent's connect on `s` and lets data flow on it.
  Result<void> accept_agent_stream(Stream& s);

  // Guest DNS queries: each `dns` frame from the agent (an agent stream id, a query datagram of
  // kDnsHeaderSize..kMaxDnsDatagram bytes) is handed to `h` on the reader thread, so `h` must
  // not block; it answers with one `dns` frame on that stream (send()). Queries that arrive
  // while no handler is set are dropped (the agent forgets them after its timeout). Streams are
  // not registered for them. A `dns` frame on a daemon-range id or of a size out of bounds is
  // a protocol violation and closes the channel. set_on_dns(nullptr) returns only once no call
  // of the previous handler is running.
  using DnsHandler = std::function<void(uint32_t stream, std::string query)>;
  void set_on_dns(DnsHandler h);

  // Guest-reported execs (microVM agents: `proc_exec` frames on stream 0, proto/exec_report.h):
  // each payload is handed to `h` on the reader thread (it may block while the audit log is
  // behind: the agent then queues, and drops, on its side); an error it returns (a malformed
  // payload) closes the channel as a protocol violation, as does a `proc_exec` on another
  // stream. Frames that arrive before a handler is set (after a reattach the agent sends its
  // backlog right after hello) wait, at most kMaxPendingExecReportBytes of them, and are handed
  // over by this call; the rest are dropped, and so is everything while no handler is ever set
  // (the linux runtime, exec auditing off).
  using ExecReportHandler = std::function<Result<void>(std::string_view payload)>;
  void set_on_exec_report(ExecReportHandler h);
  static constexpr size_t kMaxPendingExecReportBytes = 2u << 20;

  Result<void> send(proto::FrameType type, uint32_t stream, std::string_view payload);
  Result<void> send_json(proto::FrameType type, uint32_t stream, const nlohmann::json& j);
  // Grants flow-control credit for `bytes` data bytes of `stream`.
  void credit(Stream& s, size_t bytes);

  // One-shot request: sends {"op":...} and waits for the response. An {"ok":false} response
  // becomes an Error carrying the agent's code and message.
  Result<nlohmann::json> request(const nlohmann::json& req,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Converts an agent error object into an Error (codes mapped, message kept, errno kept).
  static Error agent_error(const nlohmann::json& err, std::string_view what);

  uint64_t frames_in() const { return frames_in_.load(); }

 private:
  AgentConn(int fd, std::string name);
  void reader();
  void lose(const Error& e);
  void route(proto::Frame f);
  void on_connect(proto::Frame f);
  void on_exec_report(proto::Frame f);
  void on_dns(proto::Frame f);

  const int fd_;
  const std::string name_;
  UniqueFd wake_;  // eventfd that stops the reader
  std::thread reader_;
  std::atomic<bool> lost_{false};
  std::atomic<bool> closed_{false};
  std::atomic<uint32_t> next_stream_{1};
  std::atomic<uint64_t> frames_in_{0};

  std::mutex write_mu_;

  mutable std::mutex mu_;  // guards streams_, hello_, on_lost_, lost_error_, agent_streams_
  std::condition_variable hello_cv_;
  bool hello_ = false;
  std::map<uint32_t, std::shared_ptr<Stream>> streams_;
  std::function<void(const Error&)> on_lost_;
  std::optional<Error> lost_error_;
  size_t agent_streams_ = 0;                            // open streams with kAgentStreamBit
  size_t agent_stream_limit_ = proto::kMaxEgressConns;  // guarded by mu_

  // Held while the agent-stream or DNS handler runs, so resetting it waits for a running call.
  std::mutex handler_mu_;
  AgentStreamHandler on_agent_stream_;
  DnsHandler on_dns_;
  std::vector<std::pair<std::shared_ptr<Stream>, uint16_t>> pending_agent_streams_;

  // Held while the exec-report handler runs (apart from handler_mu_: that handler may block).
  std::mutex report_mu_;
  ExecReportHandler on_exec_report_;
  std::vector<std::string> pending_exec_reports_;
  size_t pending_exec_report_bytes_ = 0;
  bool warned_exec_reports_ = false;
};

}  // namespace space::daemon
