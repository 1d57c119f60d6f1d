// space-gateway's configuration (docs/cluster.md, "The gateway"): a JSON file, every path
// absolute. The gateway keeps no state of its own: everything it knows comes from this file,
// the tokens file, discovery and the nodes themselves, so any number of replicas can run.
//
//   {"listen": "0.0.0.0:8443",
//    "tls": {"cert": "/etc/space/tls/gateway.pem", "key": "/etc/space/tls/gateway.key"},
//    "node_tls": {"cert": ".../client.pem", "key": ".../client.key", "ca": ".../ca.pem"},
//    "discovery": {"static": "/etc/space/nodes.json"} | {"etcd": {...}} | {"kubernetes": {...}},
//    "tokens_file": "/etc/space/tokens/tokens.json",
//    "store": "s3://...", "store_credentials_file": "...",
//    "placement": {"sample": 2}, "node_lost_after_s": 15, "poll_interval_s": 1}
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

namespace space::gateway {

struct GatewayConfig {
  std::string listen = "127.0.0.1:8443";
  // The public listener's TLS (empty cert: plain HTTP, loopback only, as spaced's api_listen).
  std::filesystem::path tls_cert, tls_key;
  // The gateway's client certificate for the nodes' mutual TLS, and the CA their server
  // certificates chain to.
  std::filesystem::path node_cert, node_key, node_ca;
  // The name every node's certificate is checked for, where nodes share one certificate (pods
  // on Kubernetes: their addresses are not known when it is issued). Empty: the host of each
  // node's URL.
  std::string node_server_name;
  nlohmann::json discovery;  // {"static": FILE} | {"etcd": {...}} | {"kubernetes": {...}}
  std::filesystem::path tokens_file;
  std::string store;  // the nodes' shared snapshot store, read for 410 node_lost answers
  std::filesystem::path store_credentials_file;
  size_t sample = 2;              // placement: least loaded of this many candidates
  double node_lost_after_s = 15;  // a node unreachable this long is lost (its ids answer 410)
  double poll_interval_s = 1;     // GET /v1/node on every node this often
  double shutdown_grace_s = 30;   // SIGTERM: requests in flight get this long to finish

  [[nodiscard]] static Result<GatewayConfig> load(const std::filesystem::path& file);
};

}  // namespace space::gateway
