// Counters about the API server itself (connections, requests by route and status), rendered
// in the Prometheus text format and appended to the daemon's own metrics at GET /metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace space::api {

class ApiMetrics {
 public:
  void connection_opened() { ++connections_total_, ++connections_active_; }
  void connection_closed() { --connections_active_; }
  void connection_rejected() { ++connections_rejected_; }
  // `route` is the matched pattern ("GET /v1/sandboxes/{id}") or "unmatched": a bounded set.
  void request_done(std::string_view route, int status);

  uint64_t active_connections() const { return connections_active_.load(); }
  std::string render() const;

 private:
  std::atomic<uint64_t> connections_total_{0};
  std::atomic<uint64_t> connections_active_{0};
  std::atomic<uint64_t> connections_rejected_{0};
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

}  // namespace space::api
