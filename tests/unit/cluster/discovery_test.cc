// Node records, the discovery configuration parsers, and the static file source: read at start,
// re-read when the file changes, a broken file keeping the previous list.
#include "cluster/discovery.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "unit/temp_dir.h"

namespace space::cluster {
namespace {

using json = nlohmann::json;

TEST(NodeRecord, Names) {
  for (const std::string& ok : std::vector<std::string>{
           "n1", "a", "node-7", "0", std::string(63, 'x'), "ip-10-0-1-2.ec2.internal"}) {
    EXPECT_TRUE(is_valid_node_name(ok)) << ok;
  }
  for (const std::string& bad : std::vector<std::string>{"", "-a", "a-", ".a", "a.", "N1", "a_b",
                                                         "a/b", std::string(64, 'x'), "é"}) {
    EXPECT_FALSE(is_valid_node_name(bad)) << bad;
  }
}

TEST(NodeRecord, FromJson) {
  auto r = node_record_from_json(
      json::parse(R"({"name": "n1", "url": "https://127.0.0.2:7443", "labels": {"zone": "a"}})"));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, (NodeRecord{"n1", "https://127.0.0.2:7443", {{"zone", "a"}}}));
  EXPECT_EQ(node_record_from_json(node_record_to_json(*r)).value(), *r);
  r = node_record_from_json(json::parse(R"({"name": "n2", "url": "http://[::1]:7070"})"));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r->labels.empty());

  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : std::initializer_list<Bad>{
           {R"([])", "object"},
           {R"({"url": "https://h:1"})", "\"name\" is required"},
           {R"({"name": "Bad_Name", "url": "https://h:1"})", "is not a node name"},
           {R"({"name": "n1"})", "\"url\" is required"},
           {R"({"name": "n1", "url": "ftp://h"})", "not an http:// or https:// URL"},
           {R"({"name": "n1", "url": "https://h:1/path"})", "without a path"},
           {R"({"name": "n1", "url": "https://h:1", "labels": {"a": 1}})", "label \"a\""},
           {R"({"name": "n1", "url": "https://h:1", "lables": {}})", "unknown field \"lables\""},
       }) {
    auto e = node_record_from_json(json::parse(b.text));
    ASSERT_FALSE(e) << b.text;
    EXPECT_EQ(e.error().code(), Code::kInvalidArgument);
    EXPECT_NE(e.error().message().find(b.says), std::string::npos)
        << b.text << " -> " << e.error().message();
  }
}

TEST(NodesFile, Parses) {
  auto nodes = parse_nodes_file(R"({"nodes": [{"name": "n2", "url": "https://10.0.0.6:7443"},
                                              {"name": "n1", "url": "https://10.0.0.5:7443"}]})");
  ASSERT_TRUE(nodes) << nodes.error().message();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "n2");
  auto dup = parse_nodes_file(R"({"nodes": [{"name": "n1", "url": "https://a:1"},
                                            {"name": "n1", "url": "https://b:1"}]})");
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message().find("nodes[1]: node \"n1\" appears twice"), std::string::npos);
  auto bad = parse_nodes_file(R"({"nodes": [{"name": "n1", "url": "https://a:1"}, {"name": ""}]})");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().message().starts_with("nodes[1]: ")) << bad.error().message();
  EXPECT_FALSE(parse_nodes_file("{"));
  EXPECT_FALSE(parse_nodes_file(R"({"node": []})"));
}

TEST(DiscoveryConfig, Parses) {
  auto s = parse_discovery_config(json::parse(R"({"static": "/etc/space/nodes.json"})"));
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->kind, DiscoveryConfig::Kind::kStatic);
  EXPECT_EQ(s->static_file, "/etc/space/nodes.json");

  auto e = parse_discovery_config(json::parse(
      R"({"etcd": {"endpoints": ["http://127.0.0.1:2379", "https://etcd-1:2379"],
                   "prefix": "/c1/nodes/", "ttl_s": 6, "ca_file": "/ca.pem"}})"));
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e->kind, DiscoveryConfig::Kind::kEtcd);
  EXPECT_EQ(e->etcd.endpoints.size(), 2u);
  EXPECT_EQ(e->etcd.prefix, "/c1/nodes/");
  EXPECT_EQ(e->etcd.ttl_s, 6);
  EXPECT_EQ(e->etcd.tls.ca_file, "/ca.pem");
  auto defaults = parse_etcd_config(json::parse(R"({"endpoints": ["http://etcd:2379"]})"));
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->prefix, "/space/nodes/");
  EXPECT_EQ(defaults->ttl_s, 10);

  auto k = parse_discovery_config(json::parse(
      R"({"kubernetes": {"service": "space-nodes", "namespace": "space", "port_name": "api",
                         "api_server": "https://127.0.0.1:6443", "token_file": "/t"}})"));
  ASSERT_TRUE(k) << k.error().message();
  EXPECT_EQ(k->kind, DiscoveryConfig::Kind::kKubernetes);
  EXPECT_EQ(k->kubernetes.service, "space-nodes");
  EXPECT_EQ(k->kubernetes.namespace_, "space");
  EXPECT_EQ(k->kubernetes.api_server, "https://127.0.0.1:6443");
  EXPECT_EQ(k->kubernetes.token_file, "/t");
  EXPECT_EQ(k->kubernetes.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");

  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : std::initializer_list<Bad>{
           {R"({})", "expected one of"},
           {R"({"static": "/a", "etcd": {}})", "expected one of"},
           {R"({"consul": {}})", "expected one of"},
           {R"({"static": "relative.json"})", "absolute path"},
           {R"({"etcd": {}})", "discovery: etcd: \"endpoints\" must be a non-empty list"},
           {R"({"etcd": {"endpoints": ["etcd:2379"]}})", "discovery: etcd: endpoints: "},
           {R"({"etcd": {"endpoints": ["http://e:1"], "prefix": "/x"}})", "must end with '/'"},
           {R"({"etcd": {"endpoints": ["http://e:1"], "ttl_s": 1}})", "from 3 to 3600"},
           {R"({"etcd": {"endpoints": ["http://e:1"], "ttl": 5}})", "unknown field \"ttl\""},
           {R"({"etcd": {"endpoints": ["http://e:1"], "cert_file": "/c"}})", "go together"},
           {R"({"kubernetes": {}})", "\"service\" is required"},
           {R"({"kubernetes": {"service": "Space"}})", "not a Service name"},
           {R"({"kubernetes": {"service": "s", "api_server": "10.0.0.1"}})", "api_server"},
       }) {
    auto r = parse_discovery_config(json::parse(b.text));
    ASSERT_FALSE(r) << b.text;
    EXPECT_NE(r.error().message().find(b.says), std::string::npos)
        << b.text << " -> " << r.error().message();
  }
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  std::filesystem::rename(tmp, p);
}

TEST(StaticFileDiscovery, ReadsAndFollowsTheFile) {
  test_support::TempDir dir("space-discovery");
  auto path = dir.path() / "nodes.json";
  write_text(path, R"({"nodes": [{"name": "n2", "url": "https://127.0.0.3:7443"},
                                 {"name": "n1", "url": "https://127.0.0.2:7443",
                                  "labels": {"zone": "a"}}]})");
  StaticFileDiscovery d(path, std::chrono::milliseconds(50));
  std::vector<uint64_t> versions;
  std::mutex mu;
  d.on_change([&](const std::vector<NodeRecord>&, uint64_t v) {
    std::lock_guard lock(mu);
    versions.push_back(v);
  });
  ASSERT_TRUE(d.start());
  EXPECT_EQ(d.version(), 1u);
  auto nodes = d.snapshot();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0], (NodeRecord{"n1", "https://127.0.0.2:7443", {{"zone", "a"}}}));
  EXPECT_EQ(nodes[1].name, "n2");  // sorted by name

  // A change is seen by the polling thread.
  write_text(path, R"({"nodes": [{"name": "n1", "url": "https://127.0.0.2:7443"}]})");
  ASSERT_TRUE(d.wait_for_version(1, std::chrono::seconds(5)));
  EXPECT_EQ(d.snapshot().size(), 1u);
  EXPECT_TRUE(d.snapshot()[0].labels.empty());

  // A broken file keeps the previous list, and is reported.
  write_text(path, R"({"nodes": [{"name": "n1"}]})");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (d.last_error().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(d.last_error().find("nodes file " + path.string() + ": nodes[0]"), std::string::npos)
      << d.last_error();
  EXPECT_EQ(d.version(), 2u);
  EXPECT_EQ(d.snapshot().size(), 1u);
  EXPECT_FALSE(d.check());  // still broken: the same error, nothing new

  // Fixed again: the new list, one more version.
  write_text(path, R"({"nodes": [{"name": "n1", "url": "https://127.0.0.2:7443"},
                                 {"name": "n3", "url": "https://127.0.0.4:7443"}]})");
  ASSERT_TRUE(d.wait_for_version(2, std::chrono::seconds(5)));
  EXPECT_EQ(d.snapshot().size(), 2u);
  EXPECT_TRUE(d.last_error().empty());

  // Rewritten with the same content: no new version.
  write_text(path, R"({"nodes": [{"name": "n1", "url": "https://127.0.0.2:7443"},
                                 {"name": "n3", "url": "https://127.0.0.4:7443"}]})");
  ASSERT_TRUE(d.check());
  EXPECT_EQ(d.version(), 3u);
  d.stop();
  std::lock_guard lock(mu);
  EXPECT_EQ(versions, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(StaticFileDiscovery, SameSizeRewriteInPlaceIsSeen) {
  test_support::TempDir dir("space-discovery");
  auto path = dir.path() / "nodes.json";
  { std::ofstream(path) << R"({"nodes": [{"name": "n1", "url": "https://127.0.0.2:7443"}]})"; }
  StaticFileDiscovery d(path, std::chrono::hours(1));  // no polling: check() by hand
  ASSERT_TRUE(d.start());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  { std::ofstream(path) << R"({"nodes": [{"name": "n9", "url": "https://127.0.0.9:7443"}]})"; }
  ASSERT_TRUE(d.check());
  ASSERT_EQ(d.snapshot().size(), 1u);
  EXPECT_EQ(d.snapshot()[0].name, "n9");
}

TEST(StaticFileDiscovery, StartFailsOnABadOrMissingFile) {
  test_support::TempDir dir("space-discovery");
  StaticFileDiscovery missing(dir.path() / "none.json");
  auto r = missing.start();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("none.json"), std::string::npos);
  auto path = dir.path() / "bad.json";
  write_text(path, "{\"nodes\": 5}");
  StaticFileDiscovery bad(path);
  r = bad.start();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("expected {\"nodes\""), std::string::npos);
}

TEST(MakeDiscovery, BuildsTheConfiguredSource) {
  test_support::TempDir dir("space-discovery");
  auto path = dir.path() / "nodes.json";
  write_text(path, R"({"nodes": []})");
  auto c = parse_discovery_config(json{{"static", path.string()}});
  ASSERT_TRUE(c);
  auto d = make_discovery(*c);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ((*d)->describe(), "static file " + path.string());
  ASSERT_TRUE((*d)->start());
  EXPECT_EQ((*d)->version(), 1u);
  EXPECT_TRUE((*d)->snapshot().empty());

  c = parse_discovery_config(json::parse(R"({"etcd": {"endpoints": ["http://127.0.0.1:1"]}})"));
  ASSERT_TRUE(c);
  d = make_discovery(*c);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ((*d)->describe(), "etcd http://127.0.0.1:1 prefix /space/nodes/");
}

}  // namespace
}  // namespace space::cluster
