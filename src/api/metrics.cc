// Prometheus text rendering of the API server's counters (see metrics.h).
#include "api/metrics.h"

namespace space::api {

void ApiMetrics::request_done(std::string_view route, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(route), status}];
}

std::string ApiMetrics::render() const {
  std::string out;
  out += "# HELP space_api_connections_active Open connections to the API socket.\n";
  out += "# TYPE space_api_connections_active gauge\n";
  out += "space_api_connections_active " + std::to_string(connections_active_.load()) + "\n";
  out += "# HELP space_api_connections_total Connections accepted on the API socket.\n";
  out += "# TYPE space_api_connections_total counter\n";
  out += "space_api_connections_total " + std::to_string(connections_total_.load()) + "\n";
  out += "# HELP space_api_connections_rejected_total Connections refused (limit reached).\n";
  out += "# TYPE space_api_connections_rejected_total counter\n";
  out +=
      "space_api_connections_rejected_total " + std::to_string(connections_rejected_.load()) + "\n";
  out += "# HELP space_api_requests_total API requests by route and HTTP status.\n";
  out += "# TYPE space_api_requests_total counter\n";
  std::lock_guard lock(mu_);
  for (const auto& [key, count] : requests_) {
    // Route patterns contain only [A-Za-z0-9/{}_ ] characters: nothing to escape.
    out += "space_api_requests_total{route=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  }
  return out;
}

}  // namespace space::api
