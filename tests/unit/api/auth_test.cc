// API authentication and authorization (docs/api-auth.md): the pure checks (operations, token
// requests, delegation, listen addresses), the ScopedService's hiding of other profiles, and
// the real ApiServer with a real token store in front of the FakeService, over its Unix socket
// and its loopback TCP listener.
#include "api/auth.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <set>
#include <thread>

#include "api/server.h"
#include "daemon/caller.h"
#include "daemon/store.h"
#include "fake_service.h"
#include "test_client.h"

namespace space::api {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Conn;
using testing::FakeService;

constexpr double kNow = 1'800'000'000;

Principal token_principal(std::vector<std::string> profiles, std::vector<std::string> ops,
                          double expires_at = kNow + 3600) {
  Principal p;
  p.token.id = "0123456789ab";
  p.token.name = "ci";
  p.token.profiles = std::move(profiles);
  p.token.ops = std::move(ops);
  p.token.expires_at = expires_at;
  return p;
}

TEST(Ops, ClosedSetRoundTrips) {
  EXPECT_EQ(op_list(), "read, create, exec, files, lifecycle, images, admin");
  for (Op op : all_ops()) EXPECT_EQ(parse_op(op_name(op)), op);
  EXPECT_FALSE(parse_op("none"));  // kNone cannot be granted
  EXPECT_FALSE(parse_op("READ"));
  EXPECT_FALSE(parse_op("*"));
}

TEST(Principals, RootTokenAndScopes) {
  Principal root{.root = true};
  EXPECT_TRUE(root.allows_op(Op::kAdmin));
  EXPECT_TRUE(root.allows_profile("live"));
  EXPECT_EQ(root.describe(), "root");
  EXPECT_EQ(root.token_id(), "");

  Principal t = token_principal({"test"}, {"read", "exec"});
  EXPECT_TRUE(t.allows_op(Op::kRead));
  EXPECT_TRUE(t.allows_op(Op::kNone));
  EXPECT_FALSE(t.allows_op(Op::kCreate));
  EXPECT_TRUE(t.allows_profile("test"));
  EXPECT_FALSE(t.allows_profile("live"));
  EXPECT_FALSE(t.allows_profile("*"));
  EXPECT_FALSE(t.all_profiles());
  EXPECT_EQ(t.describe(), "token 0123456789ab (ci)");
  EXPECT_TRUE(token_principal({"*"}, {"read"}).allows_profile("live"));

  auto refused = authorize(t, Op::kLifecycle, "DELETE /v1/sandboxes/{id}");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kPermissionDenied);
  EXPECT_NE(refused.error().message().find("\"lifecycle\""), std::string::npos);
  EXPECT_TRUE(authorize(t, Op::kExec, "POST /v1/sandboxes/{id}/exec"));
}

TEST(Authenticate, HeadersAndTransports) {
  auto root = authenticate(Transport::kUnix, "", nullptr, kNow);
  ASSERT_TRUE(root);
  EXPECT_TRUE(root->root);
  auto tcp = authenticate(Transport::kTcp, "", nullptr, kNow);
  ASSERT_FALSE(tcp);
  EXPECT_EQ(tcp.error().code(), Code::kUnauthenticated);
  // A header that is present but wrong never falls back to root, and is never repeated.
  for (std::string header :
       {"Basic dXNlcjpzZWNyZXQ=", "Bearer", "Bearer s3cr3t-garbage", "Token spt_0123456789ab_00"}) {
    for (Transport t : {Transport::kUnix, Transport::kTcp}) {
      auto r = authenticate(t, header, nullptr, kNow);
      ASSERT_FALSE(r) << header;
      EXPECT_EQ(r.error().code(), Code::kUnauthenticated);
      EXPECT_EQ(r.error().message().find(header), std::string::npos) << r.error().message();
      EXPECT_EQ(r.error().message().find("s3cr3t"), std::string::npos) << r.error().message();
    }
  }
}

TEST(Authenticate, MutualTlsAndForwardedPrincipals) {
  // A cluster member over mutual TLS without a header acts as the node's root operator.
  auto member = authenticate(Transport::kMutualTls, "", nullptr, kNow);
  ASSERT_TRUE(member);
  EXPECT_TRUE(member->root);
  // What a gateway forwards: a token's scope, enforced as a token's.
  const std::set<std::string> profiles = {"test", "live"};
  json p = {{"id", "0123456789ab"},
            {"name", "ci"},
            {"profiles", {"test"}},
            {"ops", {"read", "exec"}},
            {"expires_at", kNow + 60}};
  auto fwd = forwarded_principal(p.dump(), profiles, kNow);
  ASSERT_TRUE(fwd) << fwd.error().message();
  EXPECT_FALSE(fwd->root);
  EXPECT_TRUE(fwd->forwarded);
  EXPECT_TRUE(fwd->allows_profile("test"));
  EXPECT_FALSE(fwd->allows_profile("live"));
  EXPECT_TRUE(fwd->allows_op(Op::kExec));
  EXPECT_FALSE(fwd->allows_op(Op::kAdmin));
  EXPECT_NE(fwd->describe().find("via a gateway"), std::string::npos);
  // Expired, unknown profiles and operations, malformed: refused, never root.
  auto with = [&](const char* k, json v) {
    json q = p;
    if (v.is_null())
      q.erase(k);
    else
      q[k] = v;
    return forwarded_principal(q.dump(), profiles, kNow);
  };
  for (auto r : {with("expires_at", kNow - 1), with("expires_at", nullptr),
                 with("profiles", json::array({"prod"})), with("profiles", json::array()),
                 with("ops", json::array({"root"})), with("ops", json::array({"none"})),
                 with("id", "not-a-token-id"), with("id", nullptr)}) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kUnauthenticated) << r.error().message();
  }
  for (std::string bad : std::vector<std::string>{"", "null", "[]", "{", std::string(9000, ' ')}) {
    auto r = forwarded_principal(bad, profiles, kNow);
    ASSERT_FALSE(r) << bad;
  }
  // "*" is every profile, as for a token.
  auto all = with("profiles", json::array({"*"}));
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->allows_profile("live"));
}

TEST(TokenRequests, ValidationListsWhatIsValid) {
  std::set<std::string> profiles = {"test", "live"};
  auto ok = parse_token_request(json{{"name", "ci-runner"},
                                     {"profiles", {"test"}},
                                     {"ops", {"exec", "read", "exec"}},
                                     {"ttl", "24h"}},
                                profiles);
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok->ops, (std::vector<std::string>{"read", "exec"}));  // canonical order, unique
  EXPECT_EQ(ok->ttl_s, 86400);
  auto star = parse_token_request(
      json{{"name", "all"}, {"profiles", {"test", "*"}}, {"ops", {"admin"}}, {"ttl", 60}},
      profiles);
  ASSERT_TRUE(star);
  EXPECT_EQ(star->profiles, std::vector<std::string>{"*"});

  struct Case {
    json body;
    std::string needle;
  };
  json base = {{"name", "ci"}, {"profiles", {"test"}}, {"ops", {"read"}}, {"ttl", "1h"}};
  auto with = [&](const char* key, json v) {
    json b = base;
    if (v.is_null())
      b.erase(key);
    else
      b[key] = v;
    return b;
  };
  for (const Case& c : std::vector<Case>{
           {with("ops", {"read", "sudo"}), "read, create, exec, files, lifecycle, images, admin"},
           {with("ops", json::array()), "non-empty"},
           {with("ops", {1}), "strings"},
           {with("profiles", {"prod"}), "live, test"},
           {with("profiles", "test"), "array"},
           {with("ttl", nullptr), "required"},
           {with("ttl", "366d"), "365 days"},
           {with("ttl", "0s"), "greater than 0"},
           {with("ttl", "soon"), "ttl"},
           {with("ttl", -5), "greater than 0"},
           {with("name", ""), "name"},
           {with("name", "bad\nname"), "name"},
           {with("name", nullptr), "name"},
           {with("extra", 1), "unknown key \"extra\""},
           {json::array(), "JSON object"},
       }) {
    auto r = parse_token_request(c.body, profiles);
    ASSERT_FALSE(r) << c.body.dump();
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(r.error().message().find(c.needle), std::string::npos)
        << c.body.dump() << " -> " << r.error().message();
  }
}

TEST(TokenRequests, ATokenCannotMintAStrongerOne) {
  Principal root{.root = true};
  Principal t = token_principal({"test"}, {"read", "exec", "admin"});
  TokenRequest within{"x", {"test"}, {"read"}, 600};
  EXPECT_TRUE(check_can_issue(root, within, kNow));
  EXPECT_TRUE(check_can_issue(t, within, kNow));
  for (const TokenRequest& bad :
       {TokenRequest{"x", {"live"}, {"read"}, 600}, TokenRequest{"x", {"*"}, {"read"}, 600},
        TokenRequest{"x", {"test"}, {"create"}, 600},
        TokenRequest{"x", {"test"}, {"read"}, 7200}}) {
    auto r = check_can_issue(t, bad, kNow);
    ASSERT_FALSE(r) << bad.profiles[0] << " " << bad.ops[0] << " " << bad.ttl_s;
    EXPECT_EQ(r.error().code(), Code::kPermissionDenied);
  }
  Principal all = token_principal({"*"}, {"read", "admin"});
  EXPECT_TRUE(check_can_issue(all, TokenRequest{"x", {"*"}, {"read"}, 60}, kNow));
  EXPECT_TRUE(covers(all, {"live"}, {"admin"}));
  EXPECT_FALSE(covers(t, {"test"}, {"bogus"}));
}

TEST(ListenAddress, LoopbackOnly) {
  auto v4 = parse_listen_address("127.0.0.1:7070");
  ASSERT_TRUE(v4) << v4.error().message();
  EXPECT_EQ(v4->family, AF_INET);
  EXPECT_EQ(v4->port, 7070);
  EXPECT_TRUE(parse_listen_address("127.1.2.3:0"));
  auto v6 = parse_listen_address("[::1]:80");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->family, AF_INET6);
  EXPECT_EQ(v6->host, "::1");
  auto lh = parse_listen_address("localhost:7070");
  ASSERT_TRUE(lh);
  EXPECT_EQ(lh->host, "127.0.0.1");
  for (const char* public_address :
       {"0.0.0.0:7070", "10.0.0.1:7070", "[::]:7070", "example.com:7070", "192.168.1.2:80"}) {
    auto r = parse_listen_address(public_address);
    ASSERT_FALSE(r) << public_address;
    EXPECT_NE(r.error().message().find("TLS"), std::string::npos) << r.error().message();
  }
  for (const char* malformed :
       {"127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", ":7070", "127.0.0.1:7x", "[::1:80", ""}) {
    EXPECT_FALSE(parse_listen_address(malformed)) << malformed;
  }
}

TEST(ListenAddress, AnyNumericAddressWithTls) {
  for (const char* text : {"0.0.0.0:7443", "10.0.0.1:7443", "[::]:7443", "127.0.0.1:7443"}) {
    auto r = parse_listen_address(text, true);
    EXPECT_TRUE(r) << text << ": " << (r ? "" : r.error().message());
  }
  auto name = parse_listen_address("example.com:7443", true);
  ASSERT_FALSE(name);
  EXPECT_NE(name.error().message().find("numeric address"), std::string::npos);
  auto plain = parse_listen_address("0.0.0.0:7070");
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.error().message().find("api_tls"), std::string::npos);
  EXPECT_FALSE(parse_listen_address("0.0.0.0", true));
}

// --- the scoped service over the fake -------------------------------------------------------

TEST(ScopedService, OtherProfilesDoNotExist) {
  FakeService fake;
  daemon::CreateRequest live;
  live.profile = "live";
  std::string live_id = fake.create(live)->id;
  daemon::CreateRequest test;
  std::string test_id = fake.create(test)->id;

  Principal p = token_principal({"test"}, {"read"});
  ScopedService scoped(fake, p);
  auto created = scoped.create(live);
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().code(), Code::kPermissionDenied);
  EXPECT_NE(created.error().message().find("may not use profile live"), std::string::npos);
  EXPECT_TRUE(scoped.create(test));

  auto list = scoped.list();
  ASSERT_TRUE(list);
  for (const auto& s : *list) EXPECT_EQ(s.profile, "test");
  EXPECT_EQ(list->size(), 2u);

  EXPECT_TRUE(scoped.inspect(test_id));
  auto unknown = fake.inspect("sb_nope");
  ASSERT_FALSE(unknown);
  auto hidden = scoped.inspect(live_id);
  ASSERT_FALSE(hidden);
  EXPECT_EQ(hidden.error().code(), Code::kNotFound);
  // The very message an unknown id gets, with this id in it.
  std::string expected = unknown.error().message();
  expected.replace(expected.find("sb_nope"), 7, live_id);
  EXPECT_EQ(hidden.error().message(), expected);
  for (auto r : {scoped.destroy(live_id, true), scoped.pause(live_id), scoped.kill(live_id, 1, 9),
                 scoped.remove(live_id, "/x", false)}) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kNotFound);
  }
  EXPECT_FALSE(scoped.exec(live_id, daemon::ExecRequest{{"echo"}}));
  EXPECT_FALSE(scoped.diff(live_id));
  EXPECT_EQ(fake.inspect(live_id)->state, daemon::SandboxState::kRunning) << "nothing reached it";
}

TEST(ScopedService, SnapshotsOfOtherProfilesDoNotExist) {
  FakeService fake;
  daemon::CreateRequest live;
  live.profile = "live";
  std::string live_id = fake.create(live)->id;
  std::string test_id = fake.create(daemon::CreateRequest{})->id;
  // The same name in both profiles: the token must find its own, never the other.
  std::string live_snap = fake.snapshot(live_id, {"base"})->id;
  std::string live_only = fake.snapshot(live_id, {"live-only"})->id;
  std::string test_snap = fake.snapshot(test_id, {"base"})->id;

  Principal p = token_principal({"test"}, {"read", "create", "lifecycle"});
  ScopedService scoped(fake, p);
  auto unknown = fake.get_snapshot("snap_nope");
  ASSERT_FALSE(unknown);
  auto expect_hidden = [&](const auto& r, const std::string& ref) {
    ASSERT_FALSE(r) << ref;
    EXPECT_EQ(r.error().code(), Code::kNotFound);
    // The very message an unknown snapshot gets, with this reference in it.
    std::string expected = unknown.error().message();
    expected.replace(expected.find("snap_nope"), 9, ref);
    EXPECT_EQ(r.error().message(), expected);
  };
  for (const std::string& ref : {live_snap, live_only, std::string("live-only")}) {
    SCOPED_TRACE(ref);
    expect_hidden(scoped.get_snapshot(ref), ref);
    expect_hidden(scoped.delete_snapshot(ref), ref);
    expect_hidden(scoped.restore(ref, std::nullopt), ref);
    expect_hidden(scoped.rollback(test_id, ref), ref);
    expect_hidden(scoped.diff_since(test_id, ref), ref);
  }
  expect_hidden(scoped.get_snapshot("snap_nope"), "snap_nope");
  EXPECT_TRUE(fake.get_snapshot(live_only)) << "nothing reached it";

  // By name, the token's own snapshot.
  auto own = scoped.get_snapshot("base");
  ASSERT_TRUE(own) << own.error().message();
  EXPECT_EQ(own->id, test_snap);
  auto all = scoped.all_snapshots();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].id, test_snap);
  EXPECT_EQ(fake.all_snapshots()->size(), 3u);

  // Sandboxes: the live one's snapshots cannot be listed, taken or rolled back.
  auto hidden_list = scoped.list_snapshots(live_id);
  ASSERT_FALSE(hidden_list);
  EXPECT_EQ(hidden_list.error().message(), scoped.inspect(live_id).error().message());
  EXPECT_FALSE(scoped.snapshot(live_id, {}));
  auto rb_live = scoped.rollback(live_id, "base");
  ASSERT_FALSE(rb_live);
  EXPECT_EQ(rb_live.error().code(), Code::kNotFound);
  EXPECT_NE(rb_live.error().message().find("unknown sandbox"), std::string::npos);
  EXPECT_EQ(fake.list_snapshots(live_id)->size(), 2u) << "no snapshot was taken of it";

  // What the token may do, it can.
  EXPECT_EQ(scoped.list_snapshots(test_id)->size(), 1u);
  auto rb = scoped.rollback(test_id, "base");
  ASSERT_TRUE(rb) << rb.error().message();
  ASSERT_TRUE(rb->rollback);
  EXPECT_EQ(rb->rollback->snapshot, test_snap);
  EXPECT_TRUE(scoped.diff_since(test_id, "base"));
  auto into_live = scoped.restore("base", "live");
  ASSERT_FALSE(into_live);
  EXPECT_EQ(into_live.error().code(), Code::kPermissionDenied);
  EXPECT_NE(into_live.error().message().find("may not use profile live"), std::string::npos);
  auto restored = scoped.restore("base", std::nullopt);
  ASSERT_TRUE(restored) << restored.error().message();
  EXPECT_EQ(restored->profile, "test");
  EXPECT_EQ(fake.restored_from, test_snap);

  // A destroyed sandbox: its snapshots stay listable for its profile only, also once its
  // record is gone (the fake forgets destroyed sandboxes at once).
  ASSERT_TRUE(fake.destroy(test_id, true));
  ASSERT_TRUE(fake.destroy(live_id, true));
  auto kept = scoped.list_snapshots(test_id);
  ASSERT_TRUE(kept) << kept.error().message();
  EXPECT_EQ(kept->size(), 2u);  // "base" and the one saved by the rollback
  auto gone = scoped.list_snapshots(live_id);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().message(), scoped.inspect(live_id).error().message());

  EXPECT_TRUE(scoped.delete_snapshot("base"));
  EXPECT_FALSE(fake.get_snapshot(test_snap));
  EXPECT_TRUE(fake.get_snapshot(live_snap));
}

TEST(ScopedService, SnapshotNameInTwoOfTheTokensProfiles) {
  FakeService fake;
  daemon::CreateRequest ci;
  ci.profile = "ci";
  std::string ci_id = fake.create(ci)->id;
  std::string test_id = fake.create(daemon::CreateRequest{})->id;
  ASSERT_TRUE(fake.snapshot(ci_id, {"base"}));
  ASSERT_TRUE(fake.snapshot(test_id, {"base"}));
  Principal p = token_principal({"ci", "test"}, {"read"});
  ScopedService scoped(fake, p);
  // No sandbox to resolve it in: a name two snapshots have is refused, naming both.
  auto r = scoped.get_snapshot("base");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_NE(r.error().message().find("2 snapshots are named \"base\""), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("give the one you mean by its id"), std::string::npos);
  EXPECT_NE(r.error().message().find(ci_id), std::string::npos);
  EXPECT_NE(r.error().message().find(test_id), std::string::npos);
}

// --- the server ---------------------------------------------------------------------------

// Records the caller the daemon would put in audit events.
class RecordingService : public FakeService {
 public:
  Result<daemon::SandboxInfo> create(const daemon::CreateRequest& req) override {
    const daemon::Caller* c = daemon::current_caller();
    seen_caller = c ? "[" + c->token_id + "]" : "none";
    return FakeService::create(req);
  }
  std::string seen_caller;
};

class AuthServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-auth-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ / "space.sock";
    store_ = std::move(*daemon::Store::open(dir_ / "space.db"));
    tokens_ = std::move(*daemon::TokenStore::open(dir_ / "space.db"));
    ApiServer::Options o;
    o.tcp_listen = "127.0.0.1:0";
    o.tokens = tokens_.get();
    o.profiles = {"test", "live"};
    auto s = ApiServer::listen(socket_, svc_, o);
    ASSERT_TRUE(s) << s.error().message();
    server_ = std::move(*s);
    ASSERT_NE(server_->tcp_port(), 0);
    thread_ = std::thread([this] { server_->serve(); });
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      thread_.join();
      server_.reset();
    }
    tokens_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  UniqueFd connect_tcp() {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->tcp_port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return {};
    return fd;
  }
  testing::Response unix_req(const std::string& method, const std::string& target,
                             std::string body = "", const std::string& token = "") {
    std::map<std::string, std::string> h;
    if (!token.empty()) h["Authorization"] = "Bearer " + token;
    return testing::request(socket_, method, target, std::move(body), h);
  }
  testing::Response tcp_req(const std::string& method, const std::string& target,
                            std::string body = "", const std::string& token = "") {
    std::map<std::string, std::string> h;
    if (!token.empty()) h["Authorization"] = "Bearer " + token;
    Conn c(connect_tcp());
    return c.request(method, target, std::move(body), h);
  }
  std::string make_token(const json& body) {
    auto r = unix_req("POST", "/v1/tokens", body.dump());
    EXPECT_EQ(r.status, 201) << r.body;
    return r.body_json().value("token", "");
  }

  RecordingService svc_;
  fs::path dir_, socket_;
  std::unique_ptr<daemon::Store> store_;
  std::unique_ptr<daemon::TokenStore> tokens_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
};

TEST_F(AuthServerTest, TcpNeedsATokenUnixRootDoesNot) {
  auto anon = tcp_req("GET", "/v1/sandboxes");
  EXPECT_EQ(anon.status, 401) << anon.body;
  EXPECT_EQ(anon.header("www-authenticate"), "Bearer realm=\"spaced\"");
  EXPECT_EQ(anon.body_json()["error"]["code"], "unauthenticated");
  // Not even the route table answers an anonymous TCP caller.
  EXPECT_EQ(tcp_req("GET", "/v1/nothing").status, 401);
  EXPECT_EQ(tcp_req("GET", "/v1/health").status, 401);

  EXPECT_EQ(unix_req("GET", "/v1/sandboxes").status, 200);
  std::string token =
      make_token({{"name", "ci"}, {"profiles", {"test"}}, {"ops", {"read"}}, {"ttl", "1h"}});
  EXPECT_EQ(tcp_req("GET", "/v1/sandboxes", "", token).status, 200);
  EXPECT_EQ(tcp_req("GET", "/v1/health", "", token).status, 200);

  auto garbage = tcp_req("GET", "/v1/sandboxes", "", "spt_0123456789ab_" + std::string(64, '0'));
  EXPECT_EQ(garbage.status, 401);
  EXPECT_EQ(garbage.header("www-authenticate"), "Bearer realm=\"spaced\", error=\"invalid_token\"");
  // A bad token on the Unix socket is refused too: it does not fall back to root.
  EXPECT_EQ(unix_req("GET", "/v1/sandboxes", "", "nonsense").status, 401);
}

TEST_F(AuthServerTest, OperationsAndProfiles) {
  auto live = unix_req("POST", "/v1/sandboxes", R"({"profile": "live"})");
  ASSERT_EQ(live.status, 201);
  std::string live_id = live.body_json()["id"];
  EXPECT_EQ(svc_.seen_caller, "[]") << "root: a caller without a token";

  std::string token = make_token(
      {{"name", "ci"}, {"profiles", {"test"}}, {"ops", {"read", "create", "exec"}}, {"ttl", "1h"}});
  auto own = unix_req("POST", "/v1/sandboxes", "{}", token);
  ASSERT_EQ(own.status, 201) << own.body;
  std::string own_id = own.body_json()["id"];
  EXPECT_EQ(svc_.seen_caller, "[" + token.substr(4, 12) + "]");

  auto forbidden = unix_req("POST", "/v1/sandboxes", R"({"profile": "live"})", token);
  EXPECT_EQ(forbidden.status, 403) << forbidden.body;
  EXPECT_NE(forbidden.body.find("may not use profile live"), std::string::npos);

  auto lifecycle = unix_req("DELETE", "/v1/sandboxes/" + own_id, "", token);
  EXPECT_EQ(lifecycle.status, 403);
  EXPECT_NE(lifecycle.body.find("\\\"lifecycle\\\""), std::string::npos) << lifecycle.body;
  EXPECT_EQ(unix_req("GET", "/v1/tokens", "", token).status, 403);
  EXPECT_EQ(unix_req("GET", "/metrics", "", token).status, 403);

  // The live sandbox: the same 404 body as an id that never existed.
  auto hidden = unix_req("GET", "/v1/sandboxes/" + live_id, "", token);
  auto unknown = unix_req("GET", "/v1/sandboxes/sb_9999", "", token);
  EXPECT_EQ(hidden.status, 404);
  std::string expected = unknown.body;
  expected.replace(expected.find("sb_9999"), 7, live_id);
  EXPECT_EQ(hidden.body, expected);
  auto exec = unix_req("POST", "/v1/sandboxes/" + live_id + "/exec", R"({"cmd": ["echo"]})", token);
  EXPECT_EQ(exec.status, 404);
  auto list = unix_req("GET", "/v1/sandboxes", "", token).body_json();
  ASSERT_EQ(list["sandboxes"].size(), 1u) << list.dump();
  EXPECT_EQ(list["sandboxes"][0]["id"], own_id);
  EXPECT_EQ(unix_req("GET", "/v1/sandboxes").body_json()["sandboxes"].size(), 2u);
}

TEST_F(AuthServerTest, SnapshotsOfOtherProfiles) {
  auto live = unix_req("POST", "/v1/sandboxes", R"({"profile": "live"})");
  ASSERT_EQ(live.status, 201);
  std::string live_id = live.body_json()["id"];
  auto live_snap = unix_req("POST", "/v1/sandboxes/" + live_id + "/snapshots", R"({"name": "n"})");
  ASSERT_EQ(live_snap.status, 201) << live_snap.body;
  std::string snap = live_snap.body_json()["id"];

  std::string token = make_token({{"name", "ci"},
                                  {"profiles", {"test"}},
                                  {"ops", {"read", "create", "lifecycle"}},
                                  {"ttl", "1h"}});
  auto own = unix_req("POST", "/v1/sandboxes", "{}", token);
  ASSERT_EQ(own.status, 201);
  std::string own_id = own.body_json()["id"];
  auto own_snap = unix_req("POST", "/v1/sandboxes/" + own_id + "/snapshots", "", token);
  ASSERT_EQ(own_snap.status, 201) << own_snap.body;

  // The live snapshot: the same 404 body as one that never existed, on every route.
  const std::string fake_snap = "snap_ffffffffffffffffffffffff";
  auto body_for = [&](const std::string& ref, const testing::Response& r) {
    std::string b = r.body;
    if (auto at = b.find(ref); at != std::string::npos) b.replace(at, ref.size(), "SNAP");
    return b;
  };
  struct Call {
    std::string method, target_prefix, target_suffix, body;
  };
  for (const Call& c :
       std::vector<Call>{{"GET", "/v1/snapshots/", "", ""},
                         {"DELETE", "/v1/snapshots/", "", ""},
                         {"POST", "/v1/snapshots/", "/restore", "{}"},
                         {"GET", "/v1/sandboxes/" + own_id + "/diff?since=", "", ""}}) {
    SCOPED_TRACE(c.method + " " + c.target_prefix + c.target_suffix);
    auto hidden = unix_req(c.method, c.target_prefix + snap + c.target_suffix, c.body, token);
    auto unknown = unix_req(c.method, c.target_prefix + fake_snap + c.target_suffix, c.body, token);
    EXPECT_EQ(hidden.status, 404) << hidden.body;
    EXPECT_EQ(unknown.status, 404) << unknown.body;
    EXPECT_EQ(body_for(snap, hidden), body_for(fake_snap, unknown));
  }
  for (const std::string& ref : {snap, fake_snap}) {
    auto rb = unix_req("POST", "/v1/sandboxes/" + own_id + "/rollback",
                       json{{"snapshot", ref}}.dump(), token);
    EXPECT_EQ(rb.status, 404) << rb.body;
    EXPECT_NE(rb.body.find("unknown snapshot " + ref), std::string::npos) << rb.body;
  }
  EXPECT_EQ(unix_req("GET", "/v1/sandboxes/" + live_id + "/snapshots", "", token).status, 404);

  auto listed = unix_req("GET", "/v1/snapshots", "", token);
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.body_json()["snapshots"].size(), 1u) << listed.body;
  EXPECT_EQ(listed.body_json()["snapshots"][0]["sandbox"], own_id);
  EXPECT_EQ(unix_req("GET", "/v1/snapshots").body_json()["snapshots"].size(), 2u);
  EXPECT_EQ(unix_req("GET", "/v1/snapshots/" + snap).status, 200) << "root sees it";

  // Operations: restoring needs "create"; a read-only token may list but not delete.
  std::string reader =
      make_token({{"name", "r"}, {"profiles", {"test"}}, {"ops", {"read"}}, {"ttl", "1h"}});
  std::string own_snap_id = own_snap.body_json()["id"];
  EXPECT_EQ(unix_req("GET", "/v1/snapshots/" + own_snap_id, "", reader).status, 200);
  EXPECT_EQ(unix_req("DELETE", "/v1/snapshots/" + own_snap_id, "", reader).status, 403);
  EXPECT_EQ(unix_req("POST", "/v1/snapshots/" + own_snap_id + "/restore", "", reader).status, 403);
  EXPECT_EQ(unix_req("POST", "/v1/snapshots/" + own_snap_id + "/restore", "", token).status, 201);
}

TEST_F(AuthServerTest, TokenManagement) {
  auto created = unix_req("POST", "/v1/tokens",
                          R"({"name": "ops", "profiles": ["*"], "ops": ["admin", "read"],
                              "ttl": "2h"})");
  ASSERT_EQ(created.status, 201) << created.body;
  json j = created.body_json();
  EXPECT_EQ(created.header("cache-control"), "no-store");
  for (const char* key : {"id", "token", "name", "profiles", "ops", "expires_at"})
    EXPECT_TRUE(j.contains(key)) << key;
  std::string admin = j["token"];

  auto bad = unix_req("POST", "/v1/tokens",
                      R"({"name": "x", "profiles": ["prod"], "ops": ["read"], "ttl": "1h"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("live, test"), std::string::npos) << bad.body;

  // An admin token may mint narrower tokens, not broader or longer-lived ones.
  auto narrower =
      unix_req("POST", "/v1/tokens",
               R"({"name": "n", "profiles": ["test"], "ops": ["read"], "ttl": "1h"})", admin);
  ASSERT_EQ(narrower.status, 201) << narrower.body;
  std::string narrow = narrower.body_json()["token"];
  EXPECT_EQ(unix_req("POST", "/v1/tokens",
                     R"({"name": "n", "profiles": ["test"], "ops": ["exec"], "ttl": "1h"})", admin)
                .status,
            403);
  EXPECT_EQ(unix_req("POST", "/v1/tokens",
                     R"({"name": "n", "profiles": ["test"], "ops": ["read"], "ttl": "3h"})", admin)
                .status,
            403);

  auto list = unix_req("GET", "/v1/tokens", "", admin);
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body_json()["tokens"].size(), 2u);
  EXPECT_EQ(list.body.find(admin.substr(17)), std::string::npos) << "a secret in the list";
  EXPECT_EQ(list.body.find(narrow.substr(17)), std::string::npos) << "a secret in the list";

  std::string narrow_id = narrow.substr(4, 12);
  EXPECT_EQ(unix_req("GET", "/v1/sandboxes", "", narrow).status, 200);
  EXPECT_EQ(unix_req("DELETE", "/v1/tokens/" + narrow_id, "", admin).status, 204);
  auto revoked = unix_req("GET", "/v1/sandboxes", "", narrow);
  EXPECT_EQ(revoked.status, 401);
  EXPECT_NE(revoked.body.find("revoked"), std::string::npos) << revoked.body;
  EXPECT_EQ(unix_req("DELETE", "/v1/tokens/ffffffffffff").status, 404);
  EXPECT_EQ(unix_req("DELETE", "/v1/tokens/not-a-token-id").status, 404);
  auto after = unix_req("GET", "/v1/tokens").body_json()["tokens"];
  for (const auto& t : after)
    if (t["id"] == narrow_id) {
      EXPECT_EQ(t["state"], "revoked");
    }
}

}  // namespace
}  // namespace space::api
