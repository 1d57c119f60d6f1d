// Kubernetes discovery against recorded API server answers (fixtures/endpointslices_*), served
// by a loopback fake API server: the EndpointSlice -> node mapping (ready condition, nodeName or
// targetRef, IPv6 in brackets, several slices of one service), then list + watch through
// MODIFIED (an endpoint turns not ready), BOOKMARK (the next watch starts from its version), the
// end of a watch, DELETED, and an ERROR 410 Gone that forces a fresh list.
#include "cluster/kubernetes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "unit/cluster/fake_http_server.h"
#include "unit/cluster/test_pki.h"
#include "unit/temp_dir.h"

namespace space::cluster {
namespace {

using json = nlohmann::json;
using test_support::fake_response;
using test_support::FakeConn;
using test_support::FakeHttpServer;
using test_support::FakeRequest;

std::string k8s_fixture(const std::string& name) {
  std::filesystem::path p = std::filesystem::path(__FILE__).parent_path() / "fixtures" / name;
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<json> k8s_items(const std::string& fixture) {
  std::vector<json> items;
  json list = json::parse(k8s_fixture(fixture));
  for (auto& i : list["items"]) items.push_back(i);
  return items;
}

std::vector<std::string> k8s_names(const std::vector<NodeRecord>& nodes) {
  std::vector<std::string> names;
  for (const auto& n : nodes) names.push_back(n.name);
  return names;
}

TEST(EndpointSlices, MapToNodes) {
  std::vector<std::string> problems;
  auto nodes = nodes_from_endpoint_slices(k8s_items("endpointslices_list.json"), "api", &problems);
  for (const auto& p : problems) ADD_FAILURE() << p;
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0], (NodeRecord{"n1", "https://10.244.1.5:7443", {{"zone", "zone-a"}}}));
  EXPECT_EQ(nodes[1], (NodeRecord{"n2", "https://10.244.2.7:7443", {{"zone", "zone-b"}}}));
  // No nodeName: the pod's name; no ready condition: ready; IPv6 in brackets.
  EXPECT_EQ(nodes[2], (NodeRecord{"space-node-4", "https://[fd00:10:244::8]:7443", {}}));
  EXPECT_TRUE(problems.empty());
  // n3 (ready: false) is not a node.
  for (const auto& n : nodes) EXPECT_NE(n.name, "n3");
}

TEST(EndpointSlices, LeavesOutWhatCannotBeANode) {
  auto slices = k8s_items("endpointslices_list.json");
  slices[1]["ports"][0]["name"] = "metrics";  // the IPv6 slice has no "api" port
  slices[0]["endpoints"][0].erase("nodeName");
  slices[0]["endpoints"][0].erase("targetRef");  // n1: no name at all
  slices[0]["endpoints"][1]["nodeName"] = "N2_bad";
  std::vector<std::string> problems;
  auto nodes = nodes_from_endpoint_slices(slices, "api", &problems);
  EXPECT_TRUE(nodes.empty());
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_NE(problems[0].find("no usable name"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("N2_bad"), std::string::npos) << problems[1];
  EXPECT_NE(problems[2].find("no port named \"api\""), std::string::npos) << problems[2];
}

TEST(EndpointSlices, SameNodeInTwoSlicesCountsOnceReadyFirst) {
  auto slices = k8s_items("endpointslices_list.json");
  json moved = slices[0];
  moved["metadata"]["name"] = "space-nodes-zzzzz";
  moved["endpoints"] = json::array({slices[0]["endpoints"][2]});
  moved["endpoints"][0]["conditions"]["ready"] = true;  // n3 ready in the second slice
  moved["endpoints"][0]["addresses"] = json::array({"10.244.3.10"});
  slices.push_back(moved);
  auto nodes = nodes_from_endpoint_slices(slices, "api");
  ASSERT_EQ(k8s_names(nodes), (std::vector<std::string>{"n1", "n2", "n3", "space-node-4"}));
  EXPECT_EQ(nodes[2].url, "https://10.244.3.10:7443");
}

// The query parameter `name` of a request target, "" if absent.
std::string k8s_param(const std::string& target, const std::string& name) {
  size_t q = target.find('?');
  if (q == std::string::npos) return "";
  std::string query = target.substr(q + 1);
  for (size_t start = 0; start <= query.size();) {
    size_t amp = query.find('&', start);
    std::string kv = query.substr(start, amp == std::string::npos ? amp : amp - start);
    if (kv.starts_with(name + "=")) return kv.substr(name.size() + 1);
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return "";
}

// A fake API server that replays the fixtures: list 1, watch 1 (from 1000: MODIFIED, BOOKMARK,
// then ends), watch 2 (from the bookmark's 1007: DELETED, ERROR 410), list 2, watch 3 (from
// 2000: stays open).
class FakeApiServer {
 public:
  explicit FakeApiServer(std::shared_ptr<SSL_CTX> tls = nullptr)
      : server_([this](const FakeRequest& r, FakeConn& c) { return handle(r, c); },
                std::move(tls)) {}

  std::string url() const { return server_.url(); }
  std::vector<FakeRequest> requests() { return server_.requests(); }
  void stop() { server_.stop(); }

 private:
  bool handle(const FakeRequest& r, FakeConn& c) {
    if (r.header("Authorization") != "Bearer test-token") {
      return c.write(fake_response(
          401, R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)"
               R"("message":"Unauthorized","reason":"Unauthorized","code":401})"));
    }
    const std::string path = r.target.substr(0, r.target.find('?'));
    if (path != "/apis/discovery.k8s.io/v1/namespaces/space/endpointslices" ||
        k8s_param(r.target, "labelSelector") != "kubernetes.io%2Fservice-name%3Dspace-nodes") {
      return c.write(fake_response(404, R"({"kind":"Status","code":404})"));
    }
    if (k8s_param(r.target, "watch") != "1") {
      int n;
      {
        std::lock_guard lock(mu_);
        n = ++lists_;
      }
      return c.write(fake_response(
          200, k8s_fixture(n == 1 ? "endpointslices_list.json" : "endpointslices_list_2.json")));
    }
    c.write(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n");
    const std::string rv = k8s_param(r.target, "resourceVersion");
    std::string events;
    if (rv == "1000") events = k8s_fixture("endpointslices_watch_1.jsonl");
    if (rv == "1007") events = k8s_fixture("endpointslices_watch_2.jsonl");
    if (events.empty()) {
      c.wait_client_gone(30'000);  // nothing more happens
      return false;
    }
    std::istringstream lines(events);
    for (std::string line; std::getline(lines, line);) {
      c.sleep_ms(30);
      if (!c.chunk(line + "\n")) return false;
    }
    c.write("0\r\n\r\n");
    return true;
  }

  std::mutex mu_;
  int lists_ = 0;
  FakeHttpServer server_;
};

TEST(KubernetesDiscovery, ListWatchBookmarkDeleteAndRelistAfterGone) {
  test_support::TempDir dir("space-k8s");
  { std::ofstream(dir.path() / "token") << "test-token\n"; }
  FakeApiServer api;
  KubernetesConfig config;
  config.service = "space-nodes";
  config.namespace_ = "space";
  config.api_server = api.url();
  config.token_file = dir.path() / "token";
  auto d = KubernetesDiscovery::create(config);
  ASSERT_TRUE(d) << d.error().message();

  std::mutex mu;
  std::vector<std::vector<std::string>> history;
  (*d)->on_change([&](const std::vector<NodeRecord>& nodes, uint64_t) {
    std::lock_guard lock(mu);
    history.push_back(k8s_names(nodes));
  });
  ASSERT_TRUE((*d)->start());
  const std::vector<std::vector<std::string>> want = {
      {"n1", "n2", "space-node-4"},  // list 1
      {"n1", "space-node-4"},        // MODIFIED: n2 not ready
      {"n1"},                        // DELETED: the IPv6 slice
      {"n1", "n2", "n5"},            // 410 Gone -> list 2
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mu);
      if (history.size() >= want.size()) break;
    }
    (*d)->wait_for_version((*d)->version(), std::chrono::milliseconds(200));
  }
  // Wait for the third watch to be under way before looking at the requests.
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((*d)->watches() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(history, want);
  }
  auto nodes = (*d)->snapshot();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[1].url, "https://10.244.2.11:7443");  // n2's new pod
  EXPECT_EQ(nodes[2], (NodeRecord{"n5", "https://10.244.5.3:7443", {{"zone", "zone-c"}}}));
  EXPECT_EQ((*d)->version(), 4u);
  EXPECT_EQ((*d)->lists(), 2u);
  EXPECT_EQ((*d)->watches(), 3u);

  std::vector<std::string> seen;
  for (const auto& r : api.requests()) {
    bool watch = k8s_param(r.target, "watch") == "1";
    seen.push_back(watch ? "watch " + k8s_param(r.target, "resourceVersion") : "list");
    if (watch) {
      EXPECT_EQ(k8s_param(r.target, "allowWatchBookmarks"), "true");
    }
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"list", "watch 1000", "watch 1007", "list", "watch 2000"}));
  (*d)->stop();
}

TEST(KubernetesDiscovery, WrongTokenKeepsRetryingWithoutNodes) {
  test_support::TempDir dir("space-k8s");
  { std::ofstream(dir.path() / "token") << "stale\n"; }
  FakeApiServer api;
  KubernetesConfig config;
  config.service = "space-nodes";
  config.namespace_ = "space";
  config.api_server = api.url();
  config.token_file = dir.path() / "token";
  auto d = KubernetesDiscovery::create(config);
  ASSERT_TRUE(d);
  ASSERT_TRUE((*d)->start());
  EXPECT_FALSE((*d)->wait_for_version(0, std::chrono::milliseconds(800)));
  EXPECT_GE(api.requests().size(), 2u);  // retried
  // The token file is read at each request: a rotated token is picked up.
  { std::ofstream(dir.path() / "token") << "test-token\n"; }
  EXPECT_TRUE((*d)->wait_for_version(0, std::chrono::seconds(15)));
  EXPECT_EQ((*d)->snapshot().size(), 3u);
}

// The API server over https, trusted through ca_file (as the service account's ca.crt).
TEST(KubernetesDiscovery, OverHttpsWithTheClusterCa) {
  auto pki = test_support::make_pki({"127.0.0.1"});
  auto ctx = tls::server_context(pki->server);
  ASSERT_TRUE(ctx) << ctx.error().message();
  FakeApiServer api(*ctx);
  test_support::TempDir dir("space-k8s");
  { std::ofstream(dir.path() / "token") << "test-token"; }
  KubernetesConfig config;
  config.service = "space-nodes";
  config.namespace_ = "space";
  config.api_server = api.url();
  ASSERT_TRUE(config.api_server.starts_with("https://"));
  config.token_file = dir.path() / "token";
  config.ca_file = pki->ca_file;
  auto d = KubernetesDiscovery::create(config);
  ASSERT_TRUE(d) << d.error().message();
  ASSERT_TRUE((*d)->start());
  ASSERT_TRUE((*d)->wait_for_version(0, std::chrono::seconds(10)));
  EXPECT_EQ(k8s_names((*d)->snapshot()), (std::vector<std::string>{"n1", "n2", "space-node-4"}));
  (*d)->stop();
}

TEST(KubernetesDiscovery, ConfigurationErrors) {
  KubernetesConfig config;
  config.service = "space-nodes";
  config.namespace_file = "/nonexistent/namespace";
  auto d = KubernetesDiscovery::create(config);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("namespace"), std::string::npos);
  config.namespace_ = "space";
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  d = KubernetesDiscovery::create(config);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  config.api_server = "https://127.0.0.1:6443";
  config.ca_file = "/nonexistent/ca.crt";
  d = KubernetesDiscovery::create(config);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("/nonexistent/ca.crt"), std::string::npos);
}

}  // namespace
}  // namespace space::cluster
