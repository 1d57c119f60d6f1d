// Node discovery: how the gateway learns which spaced nodes exist (docs/cluster.md).
// A node is a NodeRecord {name, url, labels}; a Discovery keeps the current list, sorted by
// name, with a version that moves on every change and an optional listener called after it.
// Three sources implement it:
//   - StaticFileDiscovery (here): {"nodes": [record, ...]} in a file, re-read when its mtime,
//     size or inode changes; a file that turns bad keeps the previous list and is logged once;
//   - EtcdDiscovery (etcd.h): range + watch of a key prefix that each spaced's Registration
//     keeps a leased record under;
//   - KubernetesDiscovery (kubernetes.h): the EndpointSlices of a headless Service.
// The sources' configuration (the gateway's "discovery" object, spaced's "cluster.etcd") is
// parsed here, with errors that name the offending field.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/http_client.h"
#include "common/error.h"
#include "common/fd.h"

namespace space::cluster {

// A node name: [a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])? (a DNS label, or a host name of up to 63).
bool is_valid_node_name(std::string_view name);

struct NodeRecord {
  std::string name;
  std::string url;  // https://HOST:PORT or http://HOST:PORT (spaced's api_listen)
  std::map<std::string, std::string> labels;
  bool operator==(const NodeRecord&) const = default;
};

// The name is a node name and the url an http(s):// URL with a host and no path.
[[nodiscard]] Result<void> validate_node_record(const NodeRecord& r);
// {"name", "url", "labels": {string: string}} (labels optional), validated.
[[nodiscard]] Result<NodeRecord> node_record_from_json(const nlohmann::json& j);
nlohmann::json node_record_to_json(const NodeRecord& r);
// A static nodes file's text: {"nodes": [record, ...]}, names unique.
[[nodiscard]] Result<std::vector<NodeRecord>> parse_nodes_file(std::string_view text);

class Discovery {
 public:
  // Called after each change with the new list and version, on the source's thread, with no
  // lock of the Discovery held.
  using Listener = std::function<void(const std::vector<NodeRecord>&, uint64_t version)>;

  virtual ~Discovery();
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // "static file /etc/space/nodes.json", "etcd http://127.0.0.1:2379 prefix /space/nodes/" ...
  virtual std::string describe() const = 0;
  // Starts following the source (a thread). A static file must read well here; etcd and
  // Kubernetes are retried in the background (logged) until they answer.
  [[nodiscard]] virtual Result<void> start() = 0;
  // Stops the thread; the last list stays. Idempotent; the destructor calls it.
  virtual void stop() = 0;

  // The current nodes, sorted by name.
  std::vector<NodeRecord> snapshot() const;
  // 0 until the source was read once (even empty); +1 at every change.
  uint64_t version() const;
  // Waits until version() > `seen`; false when `timeout` passes first.
  bool wait_for_version(uint64_t seen, std::chrono::milliseconds timeout) const;
  // Set before start().
  void on_change(Listener listener);

 protected:
  Discovery() = default;
  // Replaces the list (sorted here; a duplicate name keeps the first and is logged); a list
  // equal to the current one changes nothing, except that the first call sets version 1.
  void publish(std::vector<NodeRecord> nodes);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<NodeRecord> nodes_;
  uint64_t version_ = 0;
  Listener listener_;
  std::mutex listener_mu_;  // one listener call at a time, in version order
};

class StaticFileDiscovery : public Discovery {
 public:
  explicit StaticFileDiscovery(std::filesystem::path path,
                               std::chrono::milliseconds poll_interval = std::chrono::seconds(1));
  ~StaticFileDiscovery() override;

  std::string describe() const override;
  [[nodiscard]] Result<void> start() override;
  void stop() override;

  // Re-reads the file if its mtime, size or inode changed (what the thread does every
  // poll_interval). An error (the file unreadable or invalid) keeps the previous list.
  [[nodiscard]] Result<void> check();
  // The error of the last read, "" if it succeeded.
  std::string last_error() const;

 private:
  std::filesystem::path path_;
  std::chrono::milliseconds poll_interval_;
  struct FileId {
    int64_t mtime_ns = -1, size = -1, inode = -1;
    bool operator==(const FileId&) const = default;
  };
  FileId seen_;
  mutable std::mutex check_mu_;
  std::string last_error_;
  UniqueFd stop_fd_;
  std::thread thread_;
};

// --- configuration

// spaced's "cluster.etcd", and the gateway's "discovery.etcd":
// {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/space/nodes/", "ttl_s": 10,
//  "ca_file", "cert_file", "key_file" (optional, https:// endpoints)}.
struct EtcdConfig {
  std::vector<std::string> endpoints;
  std::string prefix = "/space/nodes/";
  int ttl_s = 10;
  HttpTlsOptions tls;
};
[[nodiscard]] Result<EtcdConfig> parse_etcd_config(const nlohmann::json& j);

// The gateway's "discovery.kubernetes": {"service": "space-nodes", "namespace": "space",
// "port_name": "api", "api_server", "token_file", "ca_file"} (all but service optional: the
// in-cluster defaults below).
struct KubernetesConfig {
  std::string service;
  std::string namespace_;  // "" = the service account's namespace file
  std::string port_name = "api";
  std::string api_server;  // "" = https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
};
[[nodiscard]] Result<KubernetesConfig> parse_kubernetes_config(const nlohmann::json& j);

// The gateway's "discovery": exactly one of {"static": "/path"}, {"etcd": {...}},
// {"kubernetes": {...}}.
struct DiscoveryConfig {
  enum class Kind { kStatic, kEtcd, kKubernetes };
  Kind kind = Kind::kStatic;
  std::filesystem::path static_file;
  EtcdConfig etcd;
  KubernetesConfig kubernetes;
};
[[nodiscard]] Result<DiscoveryConfig> parse_discovery_config(const nlohmann::json& j);

// The source a configuration names (not started).
[[nodiscard]] Result<std::unique_ptr<Discovery>> make_discovery(const DiscoveryConfig& config);

}  // namespace space::cluster
