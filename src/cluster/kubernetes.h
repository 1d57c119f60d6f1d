// Kubernetes discovery: the spaced pods behind a headless Service, from its EndpointSlices
// (discovery.k8s.io/v1), listed and then watched:
//   GET /apis/discovery.k8s.io/v1/namespaces/<ns>/endpointslices
//       ?labelSelector=kubernetes.io%2Fservice-name%3D<svc>
//   then the same with &watch=1&resourceVersion=<rv>&allowWatchBookmarks=true
// Watch events: ADDED / MODIFIED replace a slice, DELETED drops it, BOOKMARK only moves the
// resourceVersion on, ERROR (410 Gone: the version is too old; or any other) lists again. A watch
// that the server ends (timeoutSeconds) is started again from the last resourceVersion.
//
// Mapping (docs/cluster.md): every endpoint of every slice of the service whose
// conditions.ready is not false is a node; its name is nodeName (else targetRef.name), its url
// https://<addresses[0]>:<the port named port_name> (an IPv6 address in brackets), its labels
// {"zone": zone} when the endpoint has one. The same name in two slices (an endpoint moving
// between slices) counts once, a ready one first.
//
// Credentials in a pod: the service account's token (read again for every request: kubelet
// rotates it), its ca.crt and namespace, and KUBERNETES_SERVICE_HOST/PORT for the API server.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cluster/discovery.h"
#include "cluster/http_client.h"
#include "common/error.h"
#include "common/fd.h"

namespace space::cluster {

// The nodes that `slices` (EndpointSlice objects) stand for, by the mapping above. What is left
// out and why (a slice without the port, an endpoint without a usable name or address) goes to
// `problems` when given.
std::vector<NodeRecord> nodes_from_endpoint_slices(const std::vector<nlohmann::json>& slices,
                                                   std::string_view port_name,
                                                   std::vector<std::string>* problems = nullptr);

class KubernetesDiscovery : public Discovery {
 public:
  // Resolves the in-cluster defaults (namespace file, KUBERNETES_SERVICE_HOST/PORT) and loads
  // the CA; the token is read at each request.
  [[nodiscard]] static Result<std::unique_ptr<KubernetesDiscovery>> create(
      const KubernetesConfig& config);
  ~KubernetesDiscovery() override;

  std::string describe() const override;
  [[nodiscard]] Result<void> start() override;
  void stop() override;

  // Lists done (1 + one per relist) and watches started, for tests and metrics.
  uint64_t lists() const { return lists_.load(); }
  uint64_t watches() const { return watches_.load(); }

 private:
  KubernetesDiscovery() = default;
  void run();
  // One list, then watches until one fails or asks for a relist; returns why.
  Error follow();
  Result<std::unique_ptr<HttpStream>> get(const std::string& target);
  void publish_slices();
  std::string slices_path() const;

  KubernetesConfig config_;
  std::string namespace_;
  std::unique_ptr<HttpClient> client_;
  UniqueFd stop_fd_;
  std::thread thread_;
  std::map<std::string, nlohmann::json> slices_;  // by metadata.name, on the thread only
  std::string resource_version_;
  std::vector<std::string> reported_;  // problems already logged
  std::atomic<uint64_t> lists_{0}, watches_{0};
};

}  // namespace space::cluster
