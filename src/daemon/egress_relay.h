// Egress for microVMs, the daemon's half: a VM has no network device, so its agent accepts
// guest TCP connections (space-agent --egress-listen) and carries each one over the channel on
// an agent-initiated stream (`connect`, `data`, `credit`, `reset`; docs/agent-protocol.md,
// "Egress"). EgressRelay serves those streams: for each it calls `dial` (which connects to the
// sandbox's egress gateway, e.g. connect_in_netns(netns, "127.0.0.1", 3128)), answers the
// connect, and relays bytes both ways with flow control until both directions ended or either
// side reset. The gateway itself is unchanged: it sees an ordinary local TCP client.
//
// Threads: two per connection (agent -> socket and socket -> agent), at most the sandbox's
// egress max_connections per agent (AgentConn::set_agent_stream_limit; never more than
// proto::kMaxEgressConns): AgentConn refuses more. Memory per connection
// is bounded by the stream window (kStreamWindow) in each direction.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "daemon/agent_conn.h"

namespace space::daemon {

// Makes an AF_INET socket of `type` (SOCK_STREAM, SOCK_DGRAM) inside the network namespace
// `netns_fd`, from a short-lived thread that setns()es into it (the socket keeps that namespace;
// no other daemon thread ever enters it). Non-blocking and close-on-exec. Needs CAP_SYS_ADMIN
// over the namespace's owning user namespace (spaced has it).
[[nodiscard]] Result<UniqueFd> socket_in_netns(int netns_fd, int type);

// Makes a socket of `type` in `netns_fd` (socket_in_netns) and connect()s it to ip:port there
// (an IPv4 address). Returns it with `where` (its description for errors) and whether the
// connect is still in progress (a TCP socket: it is non-blocking); any other failure fails.
struct NetnsConnect {
  UniqueFd fd;
  std::string where;
  bool in_progress = false;
};
[[nodiscard]] Result<NetnsConnect> start_connect_in_netns(int netns_fd, int type,
                                                          const std::string& ip, uint16_t port);

// Makes a TCP socket inside the network namespace `netns_fd` (from a short-lived thread that
// setns()es into it; the socket keeps that namespace) and connects it to ip:port there, waiting
// at most `timeout`. Returns a blocking, close-on-exec socket. Needs CAP_SYS_ADMIN over the
// namespace's owning user namespace (spaced has it).
[[nodiscard]] Result<UniqueFd> connect_in_netns(
    int netns_fd, const std::string& ip, uint16_t port,
    std::chrono::milliseconds timeout = std::chrono::seconds(5));

class EgressRelay {
 public:
  // Connects one egress connection; `port` is the guest listener's it came to (the agent's
  // `connect` frame), which names the gateway listener to reach: a dial refuses ports that are
  // not the gateway's.
  using Dial = std::function<Result<UniqueFd>(uint16_t port)>;

  // `conn` must outlive the relay (or at least its stop()). `name` prefixes log lines.
  EgressRelay(AgentConn& conn, Dial dial, std::string name);
  ~EgressRelay();  // stop()
  EgressRelay(const EgressRelay&) = delete;
  EgressRelay& operator=(const EgressRelay&) = delete;

  // Starts serving: installs the AgentConn's agent-stream handler (connects the agent made
  // before this call are served now).
  void start();
  // Cuts every connection (the agent gets `reset`, the gateway a TCP reset), joins all threads
  // and uninstalls the handler. Call it before closing the AgentConn. Safe after the channel
  // was lost, and idempotent. A dial in progress is waited for (bounded by the dial's timeout).
  void stop();

  size_t active() const;                              // connections being served now
  uint64_t served() const { return served_.load(); }  // connections accepted since start

 private:
  struct Conn;
  void on_stream(std::shared_ptr<Stream> s, uint16_t port);
  void serve(Conn& c);
  void agent_to_socket(Conn& c);
  void socket_to_agent(Conn& c);
  void cut(Conn& c, bool tell_agent);
  // Joins the threads of finished connections, all but `keep`'s (a connection's own thread
  // reaps the others as it ends, so finished threads' stacks are not kept until the next
  // connect).
  void reap_finished(const Conn* keep = nullptr);

  AgentConn& conn_;
  const Dial dial_;
  const std::string name_;
  mutable std::mutex mu_;
  bool started_ = false;
  bool stopping_ = false;
  std::map<uint32_t, std::shared_ptr<Conn>> conns_;
  std::vector<std::shared_ptr<Conn>> finished_;  // their threads are ending; joined later
  std::atomic<uint64_t> served_{0};
};

}  // namespace space::daemon
