// etcd discovery against a real etcd (Debian's etcd-server, /usr/bin/etcd) that the test starts
// on loopback with free ports and a temporary data directory: two nodes register and the
// watcher sees them; a record update; a node that vanishes without revoking expires within the
// TTL; a revoked one goes at once; a lease lost behind a registration's back is granted again;
// etcd restarted under a running watcher and registration. Skipped without /usr/bin/etcd.
#include "cluster/etcd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "common/base64.h"
#include "common/tcp_listen.h"
#include "unit/cluster/fake_http_server.h"
#include "unit/temp_dir.h"

extern char** environ;

namespace space::cluster {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kEtcdBinary = "/usr/bin/etcd";

TEST(EtcdCodec, Base64AndPrefixEnd) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("/space/nodes/"), "L3NwYWNlL25vZGVzLw==");
  EXPECT_EQ(base64_decode("L3NwYWNlL25vZGVzLw==").value(), "/space/nodes/");
  EXPECT_EQ(base64_decode("eA==").value(), "x");
  EXPECT_EQ(base64_decode("eHk=").value(), "xy");
  EXPECT_EQ(base64_decode("").value(), "");
  EXPECT_FALSE(base64_decode("eA="));
  EXPECT_FALSE(base64_decode("e=A="));
  EXPECT_FALSE(base64_decode("eA=\n"));
  std::string bytes("\0\xff\x10z", 4);
  EXPECT_EQ(base64_decode(base64_encode(bytes)).value(), bytes);
  EXPECT_EQ(etcd_prefix_end("/space/nodes/"), "/space/nodes0");
  EXPECT_EQ(etcd_prefix_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(etcd_prefix_end(""), std::string(1, '\0'));
}

uint16_t etcd_free_port() {
  auto l = listen_tcp(ListenAddress{AF_INET, "127.0.0.1", 0, true});
  EXPECT_TRUE(l.has_value());
  return l ? l->second : 0;  // closed again: etcd binds it right after
}

// An etcd process of the test's own.
class TestEtcd {
 public:
  explicit TestEtcd(const std::filesystem::path& dir)
      : dir_(dir), client_port_(etcd_free_port()), peer_port_(etcd_free_port()) {}
  ~TestEtcd() { kill(); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }

  // Starts etcd and waits until it answers a range (up to 30 s).
  bool start() {
    std::string client = url();
    std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {kEtcdBinary,
                                     "--name",
                                     "default",
                                     "--data-dir",
                                     (dir_ / "data").string(),
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "default=" + peer};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    std::string out = (dir_ / "etcd.out").string();
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&pid_, kEtcdBinary, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      return false;
    }
    EtcdConfig c;
    c.endpoints = {client};
    auto probe = EtcdClient::create(c);
    if (!probe) return false;
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      if ((*probe)->range_prefix("/").has_value()) return true;
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  std::filesystem::path dir_;
  uint16_t client_port_, peer_port_;
  pid_t pid_ = -1;
};

std::vector<std::string> etcd_names(const std::vector<NodeRecord>& nodes) {
  std::vector<std::string> names;
  for (const auto& n : nodes) names.push_back(n.name);
  return names;
}

// Waits until `pred(snapshot)` holds; returns how long it took, or nullopt after `timeout`.
std::optional<Clock::duration> etcd_wait_for(
    const Discovery& d, const std::function<bool(const std::vector<NodeRecord>&)>& pred,
    std::chrono::milliseconds timeout) {
  auto t0 = Clock::now();
  while (Clock::now() - t0 < timeout) {
    uint64_t v = d.version();
    if (v > 0 && pred(d.snapshot())) return Clock::now() - t0;
    d.wait_for_version(v, std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

bool etcd_has(const std::vector<NodeRecord>& nodes, const std::string& name) {
  for (const auto& n : nodes) {
    if (n.name == name) return true;
  }
  return false;
}

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kEtcdBinary, X_OK) != 0) {
      GTEST_SKIP() << kEtcdBinary
                   << " is missing: install Debian's etcd-server (scripts/install-deps.sh "
                      "--test) to run the etcd discovery tests";
    }
    etcd_ = std::make_unique<TestEtcd>(dir_.path());
    ASSERT_TRUE(etcd_->start()) << "etcd did not start; see " << dir_.path() / "etcd.out";
    config_.endpoints = {etcd_->url()};
    config_.prefix = "/test/nodes/";
    config_.ttl_s = 3;
  }
  void TearDown() override { etcd_.reset(); }

  test_support::TempDir dir_{"space-etcd"};
  std::unique_ptr<TestEtcd> etcd_;
  EtcdConfig config_;
};

TEST_F(EtcdTest, RegisteredNodesAreDiscoveredAndLeave) {
  auto d = EtcdDiscovery::create(config_);
  ASSERT_TRUE(d) << d.error().message();
  ASSERT_TRUE((*d)->start());
  ASSERT_TRUE((*d)->wait_for_version(0, std::chrono::seconds(10)));
  EXPECT_TRUE((*d)->snapshot().empty());

  NodeRecord n1{"n1", "https://127.0.0.2:7443", {{"zone", "a"}}};
  NodeRecord n2{"n2", "https://127.0.0.3:7443", {}};
  auto r1 = Registration::create(config_, n1);
  auto r2 = Registration::create(config_, n2);
  ASSERT_TRUE(r1 && r2);
  (*r1)->start();
  (*r2)->start();
  ASSERT_TRUE((*r1)->wait_registered(std::chrono::seconds(10)));
  ASSERT_TRUE((*r2)->wait_registered(std::chrono::seconds(10)));
  EXPECT_EQ((*r1)->key(), "/test/nodes/n1");

  ASSERT_TRUE(etcd_wait_for(
      **d,
      [](const auto& nodes) {
        return etcd_names(nodes) == std::vector<std::string>{"n1", "n2"};
      },
      std::chrono::seconds(10)));
  EXPECT_EQ((*d)->snapshot()[0], n1);
  EXPECT_EQ((*d)->snapshot()[1], n2);

  // A changed record is put under the same lease and seen.
  n1.labels["zone"] = "b";
  ASSERT_TRUE((*r1)->update(n1));
  ASSERT_TRUE(etcd_wait_for(
      **d, [](const auto& nodes) { return !nodes.empty() && nodes[0].labels.at("zone") == "b"; },
      std::chrono::seconds(10)));
  EXPECT_FALSE((*r1)->update(NodeRecord{"other", "https://127.0.0.2:7443", {}}));

  // Keepalives outlive the TTL: both are still there after 2 TTLs.
  std::this_thread::sleep_for(std::chrono::seconds(2 * config_.ttl_s));
  EXPECT_EQ(etcd_names((*d)->snapshot()), (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ((*r1)->registrations(), 1u);

  // n2 vanishes without revoking: its record expires within the TTL (etcd checks leases about
  // every 500 ms), not at once.
  (*r2)->stop(/*revoke=*/false);
  auto gone = etcd_wait_for(
      **d, [](const auto& nodes) { return !etcd_has(nodes, "n2"); },
      std::chrono::seconds(config_.ttl_s + 3));
  ASSERT_TRUE(gone) << "n2 did not expire";
  EXPECT_GT(*gone, std::chrono::milliseconds(500));
  EXPECT_LT(*gone, std::chrono::seconds(config_.ttl_s + 2));
  EXPECT_EQ(etcd_names((*d)->snapshot()), std::vector<std::string>{"n1"});

  // n1 stops cleanly: revoked, gone at once.
  (*r1)->stop();
  auto revoked = etcd_wait_for(
      **d, [](const auto& nodes) { return nodes.empty(); },
      std::chrono::seconds(config_.ttl_s + 3));
  ASSERT_TRUE(revoked);
  EXPECT_LT(*revoked, std::chrono::milliseconds(1500));
  EXPECT_EQ((*d)->ranges(), 1u);  // one watch all along
}

TEST_F(EtcdTest, LostLeaseIsGrantedAgain) {
  auto d = EtcdDiscovery::create(config_);
  ASSERT_TRUE(d);
  ASSERT_TRUE((*d)->start());
  auto r = Registration::create(config_, NodeRecord{"n3", "http://127.0.0.4:7070", {}});
  ASSERT_TRUE(r);
  (*r)->start();
  ASSERT_TRUE((*r)->wait_registered(std::chrono::seconds(10)));
  ASSERT_TRUE(etcd_wait_for(
      **d, [](const auto& n) { return etcd_has(n, "n3"); }, std::chrono::seconds(10)));
  int64_t first = (*r)->lease_id();

  // Someone revokes the lease (as an etcd that lost it would): the record goes, and the next
  // keepalive (every ttl/3) finds out and registers again.
  auto admin = EtcdClient::create(config_);
  ASSERT_TRUE(admin);
  ASSERT_TRUE((*admin)->lease_revoke(first));
  ASSERT_TRUE(etcd_wait_for(
      **d, [](const auto& n) { return !etcd_has(n, "n3"); }, std::chrono::seconds(5)));
  ASSERT_TRUE(etcd_wait_for(
      **d, [](const auto& n) { return etcd_has(n, "n3"); },
      std::chrono::seconds(config_.ttl_s + 3)));
  // The watcher may see the put before the registration thread has counted it.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while ((*r)->registrations() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*r)->registrations(), 2u);
  EXPECT_NE((*r)->lease_id(), first);
  EXPECT_NE((*r)->lease_id(), 0);
  // Revoking a lease etcd no longer knows is no error.
  EXPECT_TRUE((*admin)->lease_revoke(first));
}

TEST_F(EtcdTest, WatcherAndRegistrationSurviveAnEtcdRestart) {
  auto d = EtcdDiscovery::create(config_);
  ASSERT_TRUE(d);
  ASSERT_TRUE((*d)->start());
  auto r = Registration::create(config_, NodeRecord{"n1", "https://127.0.0.2:7443", {}});
  ASSERT_TRUE(r);
  (*r)->start();
  ASSERT_TRUE(etcd_wait_for(
      **d, [](const auto& n) { return etcd_has(n, "n1"); }, std::chrono::seconds(10)));

  etcd_->kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(etcd_->start()) << "etcd did not restart; see " << dir_.path() / "etcd.out";
  // The watcher starts over with a fresh range; a node registering now is seen.
  auto r2 = Registration::create(config_, NodeRecord{"n2", "https://127.0.0.3:7443", {}});
  ASSERT_TRUE(r2);
  (*r2)->start();
  ASSERT_TRUE(etcd_wait_for(
      **d,
      [](const auto& n) {
        return etcd_names(n) == std::vector<std::string>{"n1", "n2"};
      },
      std::chrono::seconds(20)))
      << "seen: " << etcd_names((*d)->snapshot()).size() << " nodes";
  EXPECT_GE((*d)->ranges(), 2u);
  // n1's lease survived the restart (etcd keeps leases) or was granted again: still listed
  // after more than a TTL.
  std::this_thread::sleep_for(std::chrono::seconds(config_.ttl_s + 1));
  EXPECT_TRUE(etcd_has((*d)->snapshot(), "n1"));
  (*r)->stop();
  (*r2)->stop();
  ASSERT_TRUE(etcd_wait_for(
      **d, [](const auto& n) { return n.empty(); }, std::chrono::seconds(5)));
}

// EtcdDiscovery against a fake etcd gateway, for what a real etcd does not do on demand: a watch
// canceled because its start revision was compacted starts over with a fresh range; a record
// that is not JSON, or that names another node than its key, is left out.
TEST(EtcdDiscoveryFake, CompactionStartsOverWithAFreshRange) {
  using nlohmann::json;
  using test_support::FakeConn;
  using test_support::FakeRequest;
  auto kv = [](const std::string& key, const std::string& value, int rev) {
    return json{{"key", base64_encode(key)},
                {"value", base64_encode(value)},
                {"create_revision", std::to_string(rev)},
                {"mod_revision", std::to_string(rev)},
                {"version", "1"}};
  };
  const std::string rec1 = R"({"name":"n1","url":"https://127.0.0.2:7443","labels":{}})";
  const std::string rec2 = R"({"name":"n2","url":"https://127.0.0.3:7443","labels":{}})";
  std::mutex mu;
  int ranges = 0;
  std::vector<std::string> watch_starts;
  test_support::FakeHttpServer server([&](const FakeRequest& r, FakeConn& c) {
    json body = json::parse(r.body, nullptr, false);
    if (r.target == "/v3/kv/range") {
      int n;
      {
        std::lock_guard lock(mu);
        n = ++ranges;
      }
      json kvs = json::array({kv("/space/nodes/n1", rec1, 3)});
      if (n >= 2) kvs.push_back(kv("/space/nodes/n2", rec2, 8));
      json answer = {{"header", {{"cluster_id", "1"}, {"revision", n == 1 ? "5" : "10"}}},
                     {"kvs", kvs},
                     {"count", std::to_string(kvs.size())}};
      return c.write(test_support::fake_response(200, answer.dump()));
    }
    if (r.target != "/v3/watch") return c.write(test_support::fake_response(404, "{}"));
    std::string start = body["create_request"]["start_revision"].get<std::string>();
    {
      std::lock_guard lock(mu);
      watch_starts.push_back(start);
    }
    c.write(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n");
    c.chunk(R"({"result":{"header":{"revision":"10"},"created":true}})"
            "\n");
    if (start == "6") {
      c.chunk(R"({"result":{"header":{"revision":"10"},"compact_revision":"9","canceled":true,)"
              R"("cancel_reason":"mvcc: required revision has been compacted"}})"
              "\n");
    } else {
      json bad = {{"result",
                   {{"header", {{"revision", "12"}}},
                    {"events",
                     {{{"kv", kv("/space/nodes/n3", "not json", 11)}},
                      {{"kv", kv("/space/nodes/n4", rec2, 12)}}}}}}};
      c.chunk(bad.dump() + "\n");
      json del = {
          {"result",
           {{"header", {{"revision", "13"}}},
            {"events",
             {{{"type", "DELETE"},
               {"kv", {{"key", base64_encode("/space/nodes/n1")}, {"mod_revision", "13"}}}}}}}}};
      c.chunk(del.dump() + "\n");
    }
    c.wait_client_gone(30'000);
    return false;
  });
  EtcdConfig config;
  config.endpoints = {server.url()};
  auto d = EtcdDiscovery::create(config);
  ASSERT_TRUE(d);
  std::vector<std::vector<std::string>> history;
  (*d)->on_change([&](const std::vector<NodeRecord>& nodes, uint64_t) {
    std::lock_guard lock(mu);
    history.push_back(etcd_names(nodes));
  });
  ASSERT_TRUE((*d)->start());
  ASSERT_TRUE(etcd_wait_for(
      **d, [](const auto& n) { return etcd_names(n) == std::vector<std::string>{"n2"}; },
      std::chrono::seconds(10)));
  (*d)->stop();
  std::lock_guard lock(mu);
  EXPECT_EQ(history, (std::vector<std::vector<std::string>>{{"n1"}, {"n1", "n2"}, {"n2"}}));
  EXPECT_EQ(watch_starts, (std::vector<std::string>{"6", "11"}));
  EXPECT_EQ((*d)->ranges(), 2u);
}

TEST(EtcdClientErrors, UnreachableEndpointsAreNamed) {
  uint16_t p1 = etcd_free_port(), p2 = etcd_free_port();
  EtcdConfig c;
  c.endpoints = {"http://127.0.0.1:" + std::to_string(p1),
                 "http://127.0.0.1:" + std::to_string(p2)};
  auto client = EtcdClient::create(c);
  ASSERT_TRUE(client);
  auto r = (*client)->range_prefix("/x/");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  // The last endpoint tried.
  EXPECT_EQ(r.error().message(), "etcd at " + c.endpoints[1] + ": connection refused");
}

}  // namespace
}  // namespace space::cluster
