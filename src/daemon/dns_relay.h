// DNS for microVMs, the daemon's half: a VM has no network device, so its agent receives the
// guest's DNS queries on the stub's address in the guest (space-agent --dns-listen) and carries
// each one over the channel as a `dns` frame on a stream of its own (docs/agent-protocol.md,
// "DNS"). DnsRelay sends each query to the sandbox's DNS stub (the gateway's UDP listener at
// 127.0.0.53:53 in the sandbox's network namespace, the one linux sandboxes use directly) and
// returns the stub's answer on the query's stream. The gateway is unchanged: it sees an ordinary
// local client, answers by its policy (allowed names -> 127.0.0.1, the rest NXDOMAIN) and
// counts and audits the query for this sandbox, whose listener it came to.
//
// The destination is fixed when the relay starts (`open`): nothing the agent sends names
// another. One UDP socket per sandbox, connected to the stub; queries share it, each under an
// id the relay picks (the guest's id is put back into the answer), so answers from the stub are
// matched to queries without trusting anything but the stub. One thread per sandbox does the
// socket I/O; the channel's reader thread only queues.
//
// Bounded: at most proto::kMaxDnsInFlight queries are queued or waiting for the stub (more are
// dropped, and counted: the agent keeps the same bound, so only a broken agent exceeds it); a
// query the stub has not answered within `timeout` is answered empty (no answer) and
// forgotten. Memory is therefore at most kMaxDnsInFlight datagrams of kMaxDnsDatagram bytes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/fd.h"
#include "daemon/agent_conn.h"

namespace space::daemon {

// A UDP socket made inside the network namespace `netns_fd` (socket_in_netns) and connected to
// ip:port there, so that it sends only there and receives only from there. Blocking mode is
// left off (non-blocking), close-on-exec.
[[nodiscard]] Result<UniqueFd> connect_udp_in_netns(int netns_fd, const std::string& ip,
                                                    uint16_t port);

class DnsRelay {
 public:
  // Makes the socket queries go out on: a UDP socket connected to the sandbox's DNS stub
  // (spaced: connect_udp_in_netns(netns, egress::kDnsStubAddress, egress::kDnsStubPort)).
  using Open = std::function<Result<UniqueFd>()>;
  static constexpr std::chrono::milliseconds kDefaultTimeout{2000};

  // `conn` must outlive the relay (or at least its stop()). `name` prefixes log lines.
  // `timeout` must stay below the agent's own (5 s), so that the empty answer frees the
  // agent's slot before the agent gives up on it.
  DnsRelay(AgentConn& conn, std::string name, std::chrono::milliseconds timeout = kDefaultTimeout);
  ~DnsRelay();  // stop()
  DnsRelay(const DnsRelay&) = delete;
  DnsRelay& operator=(const DnsRelay&) = delete;

  // Opens the socket (open()), starts the relay's thread and installs the AgentConn's DNS
  // handler. On failure nothing is installed (queries are then dropped by AgentConn).
  Result<void> start(const Open& open);
  // Uninstalls the handler and joins the thread; queries still waiting get no answer (the
  // channel is about to close). Call it before closing the AgentConn. Idempotent.
  void stop();

  struct Stats {
    uint64_t relayed = 0;    // queries sent to the stub
    uint64_t answered = 0;   // answers returned to the agent
    uint64_t dropped = 0;    // queries refused: kMaxDnsInFlight were queued or waiting
    uint64_t timed_out = 0;  // queries answered empty: no answer in time, or the send failed
    size_t in_flight = 0;    // queued or waiting for the stub now
  };
  Stats stats() const;

 private:
  struct Query {
    uint32_t stream = 0;
    std::string datagram;
  };
  struct Waiting {
    uint32_t stream = 0;
    uint16_t guest_id = 0;  // the query's own id, put back into the answer
    std::chrono::steady_clock::time_point deadline;
  };
  void on_query(uint32_t stream, std::string datagram);  // AgentConn's reader thread
  void loop();
  void forward(Query& q);
  void receive(std::string& buf);
  void expire();
  void answer(uint32_t stream, std::string_view datagram);

  AgentConn& conn_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  UniqueFd sock_;
  UniqueFd wake_;  // eventfd: a query was queued, or stop()
  std::thread thread_;

  mutable std::mutex mu_;  // guards queue_, in_flight_, stopping_ and the counters in stats_
  std::deque<Query> queue_;
  size_t in_flight_ = 0;  // queued or waiting: taken by on_query, given back by answer
  bool started_ = false;
  bool stopping_ = false;
  Stats stats_;

  // The loop thread's own.
  std::map<uint16_t, Waiting> waiting_;  // by the id the stub saw
  uint16_t next_id_ = 0;
};

}  // namespace space::daemon
