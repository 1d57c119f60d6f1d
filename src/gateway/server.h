// space-gateway's front end (docs/cluster.md, "The gateway"): spaced's public API, served by
// passing each request to the node that holds its sandbox.
//
// Per request: authenticate the token (tokens file), authorize the route's operation exactly as
// spaced does (api::match_route, api::authorize), pick the node (a create: placement; an id:
// the node it names; a list: every node), and forward the request with the caller's scope in
// Space-Principal over the node's mutual TLS, where the node checks it again. Bodies and
// answers stream through as they come (exec output, file transfers, followed logs); an exec,
// a port or a terminal (a chunked request body or an Upgrade) gets a connection of its own,
// relayed both ways until either side ends.
//
// A thread per client connection, as spaced's own server. stop() stops accepting; requests in
// flight get `grace` to finish before their connections are cut.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "gateway/nodes.h"
#include "gateway/tokens.h"

namespace space::gateway {

// What the gateway tells a caller whose sandbox's node is lost: the latest snapshot of it in
// the shared store, if any ({"snapshot", "created_at", ...} of sandboxes/<id>.json), or null.
using LastSnapshotFn = std::function<nlohmann::json(const std::string& sandbox_id)>;

class GatewayServer {
 public:
  struct Options {
    std::string listen;            // "0.0.0.0:8443"
    std::shared_ptr<SSL_CTX> tls;  // null: plain HTTP (loopback only)
    std::chrono::milliseconds grace{30'000};
    size_t max_connections = 4096;
  };
  static Result<std::unique_ptr<GatewayServer>> listen(Options options, NodeTable& nodes,
                                                       TokenFile& tokens,
                                                       LastSnapshotFn last_snapshot);
  ~GatewayServer();

  void serve();  // until stop(); returns when every connection has ended
  void stop();   // async-signal-safe
  uint16_t port() const { return port_; }

 private:
  GatewayServer(Options options, NodeTable& nodes, TokenFile& tokens, LastSnapshotFn last);
  void serve_connection(UniqueFd fd);
  void accept_one();

  Options options_;
  NodeTable& nodes_;
  TokenFile& tokens_;
  LastSnapshotFn last_snapshot_;
  UniqueFd listen_fd_, stop_fd_, cut_fd_;  // stop: no more accepts; cut: end every connection
  uint16_t port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t active_ = 0;  // connections being served; guarded by mu_
  // TLS terminators still relaying (the last bytes of an answer after its connection was
  // served); guarded by mu_.
  size_t tls_relays_ = 0;
  // For GET /metrics.
  std::atomic<uint64_t> requests_{0}, creates_placed_{0}, creates_refused_{0}, node_lost_{0};
  friend class GatewayConnection;
};

}  // namespace space::gateway
