// space-gateway's pieces without a network: the tokens file, ids and URLs, and placement over
// node reports as GET /v1/node gives them.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "../temp_dir.h"
#include "gateway/config.h"
#include "gateway/nodes.h"
#include "gateway/tokens.h"

namespace space::gateway {
namespace {

using nlohmann::json;

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

TEST(GatewayTokens, MadeTokensAuthenticateAndNothingElseDoes) {
  auto t = make_token("ci", {"test"}, {"read", "exec"}, 3600);
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_TRUE(t->text.starts_with("spt_"));
  // The entry holds no secret: only its hash.
  EXPECT_EQ(t->entry.dump().find(t->text.substr(17)), std::string::npos);
  test_support::TempDir dir("gw-tokens");
  auto file = dir.path() / "tokens.json";
  write_file(file, json{{"tokens", {t->entry}}}.dump());
  auto tokens = TokenFile::open(file);
  ASSERT_TRUE(tokens) << tokens.error().message();
  auto rec = (*tokens)->authenticate("Bearer " + t->text);
  ASSERT_TRUE(rec) << rec.error().message();
  EXPECT_EQ(rec->name, "ci");
  EXPECT_EQ(rec->profiles, std::vector<std::string>{"test"});
  // A wrong secret for the same id, another scheme, garbage: refused, never echoed.
  std::string wrong = t->text.substr(0, t->text.size() - 1) + (t->text.back() == '0' ? "1" : "0");
  for (std::string h :
       {"Bearer " + wrong, "Basic " + t->text, std::string("Bearer x"), std::string("")}) {
    auto r = (*tokens)->authenticate(h);
    ASSERT_FALSE(r) << h;
    EXPECT_EQ(r.error().code(), Code::kUnauthenticated);
    EXPECT_EQ(r.error().message().find(t->text.substr(17)), std::string::npos);
  }
  // Removing the entry revokes it (the file is looked at again after a second).
  EXPECT_TRUE((*tokens)->still_valid(rec->id));
  write_file(file, R"({"tokens": []})");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE((*tokens)->still_valid(rec->id));
  EXPECT_FALSE((*tokens)->authenticate("Bearer " + t->text));
  // A broken file keeps what was read before.
  write_file(file, json{{"tokens", {t->entry}}}.dump());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE((*tokens)->authenticate("Bearer " + t->text));
  write_file(file, "{not json");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE((*tokens)->authenticate("Bearer " + t->text));
}

TEST(GatewayTokens, FileErrorsNameTheEntry) {
  auto t = make_token("ci", {"*"}, {"read"}, 60);
  ASSERT_TRUE(t);
  auto bad = [&](const char* key, json v) {
    json e = t->entry;
    e[key] = v;
    auto r = parse_tokens(json{{"tokens", {e}}}.dump());
    EXPECT_FALSE(r) << key;
    return r ? std::string() : r.error().message();
  };
  EXPECT_NE(bad("id", "xyz").find("tokens[0]"), std::string::npos);
  EXPECT_NE(bad("secret_sha256", "00").find("secret_sha256"), std::string::npos);
  EXPECT_NE(bad("ops", json::array({"fly"})).find("unknown operation"), std::string::npos);
  EXPECT_NE(bad("expires_at", "tomorrow").find("expires_at"), std::string::npos);
  EXPECT_FALSE(parse_tokens(json{{"tokens", {t->entry, t->entry}}}.dump()));
  // Expired tokens parse (they are refused when used).
  json e = t->entry;
  e["expires_at"] = "2020-01-01T00:00:00Z";
  EXPECT_TRUE(parse_tokens(json{{"tokens", {e}}}.dump()));
  EXPECT_FALSE(make_token("x", {}, {"read"}, 60));
  EXPECT_FALSE(make_token("x", {"test"}, {"root"}, 60));
  EXPECT_FALSE(make_token("x", {"test"}, {"read"}, 400 * 86400.0));
}

TEST(GatewayIds, NodesOfIdsAndUrls) {
  EXPECT_EQ(node_of_id("sb_0123456789ab-n1"), "n1");
  EXPECT_EQ(node_of_id("snap_0123456789abcdef01234567-ip-10-0-1-2.ec2.internal"),
            "ip-10-0-1-2.ec2.internal");
  EXPECT_EQ(node_of_id("sb_0123456789ab"), "");
  EXPECT_EQ(node_of_id("sb_0123456789ab-"), "");
  EXPECT_EQ(node_of_id("img-n1"), "");
  auto u = split_node_url("https://127.0.0.2:7443");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->first, "127.0.0.2");
  EXPECT_EQ(u->second, 7443);
  auto v6 = split_node_url("https://[fd00::5]:7443/");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->first, "fd00::5");
  for (std::string bad : {"http://10.0.0.1:7443", "https://10.0.0.1", "https://:7443",
                          "https://h:99999", "https://[::1:7443", "https://h:7a"})
    EXPECT_FALSE(split_node_url(bad)) << bad;
}

json node_info(double cpus_allocated, double running, std::vector<std::string> runtimes,
               bool draining = false, bool kvm = false, json warm = json::array()) {
  return {{"name", "x"},
          {"labels", json::object()},
          {"draining", draining},
          {"runtimes", runtimes},
          {"kvm", kvm},
          {"cpus", {{"total", 8}, {"allocated", cpus_allocated}}},
          {"memory", {{"total_bytes", 16ull << 30}, {"allocated_bytes", 0}}},
          {"sandboxes", {{"running", running}, {"paused", 0}, {"max", 100}}},
          {"warm", warm}};
}

TEST(GatewayPlacement, FiltersThenWarmThenLeastLoaded) {
  NodeTable::Options o;
  o.sample = 3;  // every candidate: the order is deterministic
  NodeTable t(o);
  t.set_nodes({{"busy", "https://10.0.0.1:7443", {{"zone", "a"}}},
               {"idle", "https://10.0.0.2:7443", {{"zone", "a"}}},
               {"draining", "https://10.0.0.3:7443", {{"zone", "a"}}},
               {"vm", "https://10.0.0.4:7443", {{"zone", "b"}}}});
  t.set_info_for_test("busy", node_info(6, 30, {"linux", "qemu"}));
  t.set_info_for_test("idle", node_info(1, 2, {"linux", "qemu"}));
  t.set_info_for_test("draining", node_info(0, 0, {"linux"}, true));
  t.set_info_for_test("vm", node_info(4, 10, {"linux", "qemu", "firecracker"}, false, true));

  PlacementRequest linux;
  EXPECT_EQ(t.place(linux), (std::vector<std::string>{"idle", "vm", "busy"}));
  PlacementRequest fc;
  fc.runtime = "firecracker";
  EXPECT_EQ(t.place(fc), (std::vector<std::string>{"vm"}));  // the one with KVM
  PlacementRequest zone_a;
  zone_a.node_selector = {{"zone", "a"}};
  EXPECT_EQ(t.place(zone_a), (std::vector<std::string>{"idle", "busy"}));
  PlacementRequest nowhere;
  nowhere.node_selector = {{"zone", "c"}};
  EXPECT_TRUE(t.place(nowhere).empty());

  // A warm sandbox of the template beats load.
  t.set_info_for_test("busy", node_info(6, 30, {"linux", "qemu"}, false, false,
                                        json::array({{{"runtime", "linux"},
                                                      {"image", "host"},
                                                      {"profile", "test"},
                                                      {"memory", 0},
                                                      {"cpus", 1.0},
                                                      {"ready", 2}}})));
  EXPECT_EQ(t.place(linux).front(), "busy");
  PlacementRequest live = linux;
  live.profile = "live";  // not that template: by load again
  EXPECT_EQ(t.place(live).front(), "idle");

  // Creates placed since the last poll count: enough of them make "idle" the busier one.
  for (int i = 0; i < 5; ++i) {
    t.reserve("idle");
    t.release("idle", true);
  }
  EXPECT_EQ(t.place(live).front(), "vm");
}

TEST(GatewayPlacement, LostAndUnknownNodes) {
  NodeTable t(NodeTable::Options{});
  t.set_nodes({{"n1", "https://10.0.0.1:7443", {}}, {"n2", "https://10.0.0.2:7443", {}}});
  t.set_info_for_test("n1", node_info(0, 0, {"linux"}));
  t.set_info_for_test("n2", node_info(0, 0, {"linux"}));
  EXPECT_EQ(t.status("n2"), NodeStatus::kActive);
  t.set_nodes({{"n1", "https://10.0.0.1:7443", {}}});  // n2 left discovery
  EXPECT_EQ(t.status("n2"), NodeStatus::kLost);
  EXPECT_EQ(t.status("n9"), std::nullopt);
  EXPECT_EQ(t.place(PlacementRequest{}), (std::vector<std::string>{"n1"}));
  EXPECT_EQ(t.active(), (std::vector<std::string>{"n1"}));
  // Back in discovery: active again.
  t.set_nodes({{"n1", "https://10.0.0.1:7443", {}}, {"n2", "https://10.0.0.2:7443", {}}});
  EXPECT_EQ(t.status("n2"), NodeStatus::kActive);
}

TEST(GatewayConfig, ErrorsSayWhatIsMissing) {
  test_support::TempDir dir("gw-config");
  auto file = dir.path() / "gw.json";
  auto load = [&](const json& j) {
    write_file(file, j.dump());
    return GatewayConfig::load(file);
  };
  json ok = {{"listen", "127.0.0.1:8443"},
             {"node_tls", {{"cert", "/c.pem"}, {"key", "/c.key"}, {"ca", "/ca.pem"}}},
             {"discovery", {{"static", "/nodes.json"}}},
             {"tokens_file", "/tokens.json"}};
  auto c = load(ok);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->sample, 2u);
  for (const char* k : {"node_tls", "discovery", "tokens_file"}) {
    json j = ok;
    j.erase(k);
    auto r = load(j);
    ASSERT_FALSE(r) << k;
    EXPECT_NE(r.error().message().find(k), std::string::npos) << r.error().message();
  }
  json rel = ok;
  rel["tokens_file"] = "tokens.json";
  EXPECT_FALSE(load(rel));
  json typo = ok;
  typo["placment"] = json::object();
  EXPECT_FALSE(load(typo));
}

}  // namespace
}  // namespace space::gateway
