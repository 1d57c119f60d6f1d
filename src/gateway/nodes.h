// What the gateway knows of the nodes (docs/cluster.md, "Placement" and "Failure"): the set
// discovery gives, each node's last GET /v1/node, whether it answers, and connections to it.
//
// Connections: HTTP/1.1 over mutual TLS (the gateway's client certificate, nodes' certificates
// checked against the cluster CA and the node URL's host), each a tls::ClientTunnel whose
// plaintext end the proxy reads and writes like a socket. Idle ones are kept per node for
// reuse (at most kMaxIdlePerNode), so a request pays no handshake.
//
// A node is
//   active       in discovery and answering (or not yet polled),
//   unreachable  in discovery, its last polls failed, for less than node_lost_after_s,
//   lost         gone from discovery, or unreachable for longer: its ids answer 410.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "common/fd_stream.h"
#include "tls/tunnel.h"

namespace space::gateway {

// A node as discovery names it.
struct NodeAddress {
  std::string name;
  std::string url;  // https://HOST:PORT
  std::map<std::string, std::string> labels;
};

// A connection to one node: the plaintext side of a TLS tunnel.
struct NodeConn {
  std::string node;
  std::unique_ptr<tls::ClientTunnel> tunnel;
  std::unique_ptr<FdStream> stream;
  boost::beast::flat_buffer buffer;
  std::chrono::steady_clock::time_point idle_since;
};

enum class NodeStatus { kActive, kUnreachable, kLost };

// What a create asks for, as placement reads it from the request body.
struct PlacementRequest {
  std::string runtime = "linux", image = "host", profile = "test";
  double cpus = 0;                                   // 0: the node's default
  uint64_t memory = 0;                               // 0: the node's default
  std::map<std::string, std::string> node_selector;  // labels every candidate must have
};

class NodeTable {
 public:
  struct Options {
    std::shared_ptr<SSL_CTX> tls;  // client context with the gateway's certificate
    double poll_interval_s = 1;
    double node_lost_after_s = 15;
    size_t sample = 2;
    std::chrono::milliseconds connect_timeout{3000};
    std::string server_name;  // checked in every node's certificate; "" = its URL's host
  };
  explicit NodeTable(Options options);
  ~NodeTable();  // stops the poller

  // Replaces the set of nodes (discovery changed). Nodes that left are lost from now on.
  void set_nodes(std::vector<NodeAddress> nodes);
  // Polls every node now and then every poll_interval_s, in a thread of its own.
  void start();

  // Where an id's node stands; nullopt when discovery never named such a node.
  std::optional<NodeStatus> status(const std::string& node);
  std::optional<NodeAddress> address(const std::string& node);
  // Names of active nodes.
  std::vector<std::string> active();
  // The nodes as GET /v1/nodes shows them: name, url, labels, status, info (GET /v1/node).
  nlohmann::json describe();

  // Candidates for a create, best first: active, not draining, with the runtime (and KVM for
  // firecracker) and the labels asked; those with a warm sandbox of the template first, then
  // the least loaded of `sample` drawn at random, then the rest by load. Load counts creates in
  // flight through this gateway (reserve/release).
  std::vector<std::string> place(const PlacementRequest& req);
  void reserve(const std::string& node);
  // `placed`: the node took the create; it counts towards the node's load until its next
  // poll shows it, so that a burst between two polls does not pile onto one node.
  void release(const std::string& node, bool placed = false);
  // Tests: the node's GET /v1/node as if polled (it becomes active).
  void set_info_for_test(const std::string& node, nlohmann::json info);

  // A connection to `node`: an idle one if any (fresh: a new TLS handshake otherwise).
  Result<std::unique_ptr<NodeConn>> connect(const std::string& node);
  // Returns a connection whose last exchange ended cleanly, for reuse.
  void put_back(std::unique_ptr<NodeConn> conn);

  // A small request to a node as the cluster (no principal): status and body.
  struct Answer {
    unsigned status = 0;
    std::string body;
  };
  Result<Answer> call(const std::string& node, const std::string& method, const std::string& target,
                      const std::string& extra_headers = "", const std::string& body = "");

  static constexpr size_t kMaxIdlePerNode = 16;

 private:
  struct Node {
    NodeAddress addr;
    bool present = true;  // in discovery
    nlohmann::json info;  // last GET /v1/node; null before the first answer
    std::optional<std::chrono::steady_clock::time_point> failing_since;
    std::chrono::steady_clock::time_point gone_at;  // when it left discovery
    int inflight = 0;
    int placed_since_poll = 0;
    std::deque<std::unique_ptr<NodeConn>> idle;
  };
  void poll_loop();
  void poll_once();
  NodeStatus status_of(const Node& n, std::chrono::steady_clock::time_point now) const;
  double load_of(const Node& n) const;

  Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Node> nodes_;  // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  std::thread poller_;
};

// "https://HOST:PORT" -> host (without brackets) and port; kInvalidArgument otherwise.
Result<std::pair<std::string, uint16_t>> split_node_url(const std::string& url);

// The node an id names ("sb_<hex>-<node>", "snap_<hex>-<node>"), or "" for an id without one.
std::string node_of_id(std::string_view id);

}  // namespace space::gateway
