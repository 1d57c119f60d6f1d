// etcd v3 for the cluster, through etcd's JSON gateway on its client URL (etcd 3.4, Debian's
// etcd-server): POST /v3/kv/range, /v3/kv/put, /v3/watch (a stream of JSON lines),
// /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke. Keys and values travel base64
// (common/base64.h), 64-bit numbers as JSON strings, and fields equal to zero are left out
// (grpc-gateway's JSON).
//
//   - EtcdClient: those calls, trying the configured endpoints in turn when one cannot be
//     reached.
//   - Registration (spaced): puts <prefix><name> = the node's record under a lease of ttl_s,
//     keeps the lease alive every ttl_s/3 on a thread, grants a new lease and puts the record
//     again when the lease was lost (etcd restarted without it, or this node was cut off longer
//     than the TTL), and revokes it on stop so the node disappears at once.
//   - EtcdDiscovery (the gateway): range(prefix) for the list and its revision, then
//     watch(prefix) from revision + 1; a PUT adds or replaces a node, a DELETE (or an expired
//     lease) removes it. A broken stream or a compacted revision starts over with a fresh range.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/discovery.h"
#include "cluster/http_client.h"
#include "common/error.h"
#include "common/fd.h"

namespace space::cluster {

// etcd's range_end for every key that starts with `prefix` (the prefix with its last byte below
// 0xff incremented; "\0" for an empty prefix: every key).
std::string etcd_prefix_end(std::string_view prefix);

struct EtcdKeyValue {
  std::string key, value;  // decoded
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  int64_t revision = 0;  // the store's revision the range was read at
  std::vector<EtcdKeyValue> kvs;
};

struct EtcdEvent {
  bool deleted = false;  // DELETE (or the lease expired); else PUT
  EtcdKeyValue kv;       // for a DELETE: the key and its mod_revision only
};

// One message of a watch stream.
struct EtcdWatchResponse {
  int64_t revision = 0;  // header revision
  bool created = false;
  bool canceled = false;
  int64_t compact_revision = 0;  // non-zero: start_revision was compacted away
  std::string cancel_reason;
  std::vector<EtcdEvent> events;
};

class EtcdWatch {
 public:
  // The next message; nullopt when etcd ended the stream.
  [[nodiscard]] Result<std::optional<EtcdWatchResponse>> next();

 private:
  friend class EtcdClient;
  std::unique_ptr<HttpStream> stream_;
  std::string origin_;
};

class EtcdClient {
 public:
  // `stop_fd` (an eventfd, -1 = none) aborts every call once readable.
  [[nodiscard]] static Result<std::unique_ptr<EtcdClient>> create(const EtcdConfig& config,
                                                                  int stop_fd = -1);

  [[nodiscard]] Result<EtcdRange> range_prefix(std::string_view prefix);
  // The new key's revision.
  [[nodiscard]] Result<int64_t> put(std::string_view key, std::string_view value,
                                    int64_t lease = 0);
  // A new lease's id.
  [[nodiscard]] Result<int64_t> lease_grant(int ttl_s);
  // The lease's TTL after the refresh; 0 when etcd does not know the lease (expired, revoked).
  [[nodiscard]] Result<int64_t> lease_keepalive(int64_t id);
  // Revokes the lease and deletes its keys; a lease etcd no longer knows is not an error.
  [[nodiscard]] Result<void> lease_revoke(int64_t id);
  // Every change under `prefix` from `start_revision` on.
  [[nodiscard]] Result<std::unique_ptr<EtcdWatch>> watch_prefix(std::string_view prefix,
                                                                int64_t start_revision);

  // The endpoint calls go to first (the one that answered last).
  std::string endpoint() const;

 private:
  EtcdClient() = default;
  // POST `path` with a JSON body to the endpoints in turn; the JSON answer (an etcd error
  // answer becomes an Error).
  Result<nlohmann::json> call(const std::string& path, const nlohmann::json& body);

  std::vector<std::unique_ptr<HttpClient>> endpoints_;
  std::atomic<size_t> current_{0};
};

class Registration {
 public:
  // Checks the configuration and the record; starts nothing.
  [[nodiscard]] static Result<std::unique_ptr<Registration>> create(const EtcdConfig& config,
                                                                    NodeRecord self);
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  // Starts the thread that registers (retrying every second, logged, while etcd cannot be
  // reached) and keeps the lease alive.
  void start();
  // Stops the thread. With `revoke` the lease is revoked, so the record goes at once; without,
  // it stays until the lease expires (what a node that vanished leaves behind). Idempotent.
  void stop(bool revoke = true);
  // Puts a changed record (same name) under the current lease, or at the next registration.
  [[nodiscard]] Result<void> update(NodeRecord self);

  // True once the record is in etcd under a live lease; false when `timeout` passes first.
  bool wait_registered(std::chrono::milliseconds timeout) const;
  int64_t lease_id() const;
  // How many times a lease was granted and the record put (1 after the first registration).
  uint64_t registrations() const;
  std::string key() const { return config_.prefix + self_.name; }

 private:
  Registration() = default;
  void run();
  Result<void> register_once();

  EtcdConfig config_;
  NodeRecord self_;  // guarded by mu_
  std::unique_ptr<EtcdClient> client_;
  UniqueFd stop_fd_;
  std::thread thread_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int64_t lease_ = 0;
  uint64_t registrations_ = 0;
  bool stopped_ = false;
};

class EtcdDiscovery : public Discovery {
 public:
  [[nodiscard]] static Result<std::unique_ptr<EtcdDiscovery>> create(const EtcdConfig& config);
  ~EtcdDiscovery() override;

  std::string describe() const override;
  [[nodiscard]] Result<void> start() override;
  void stop() override;

  // How many times the list was read with a range (1 + one per restart of the watch).
  uint64_t ranges() const { return ranges_.load(); }

 private:
  EtcdDiscovery() = default;
  void run();
  // One range + watch until the watch breaks; returns why.
  Error follow();
  // The nodes of the keys (records that do not parse, or whose name is not their key's, are
  // logged once each and left out).
  void publish_keys();

  EtcdConfig config_;
  std::unique_ptr<EtcdClient> client_;
  UniqueFd stop_fd_;
  std::thread thread_;
  std::map<std::string, std::string> keys_;  // key -> value, on the thread only
  std::set<std::string> reported_;           // bad values already logged
  std::atomic<uint64_t> ranges_{0};
};

}  // namespace space::cluster
