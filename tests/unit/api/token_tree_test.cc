// Revoking a token revokes the tokens it minted (docs/api-auth.md "Revoking a token revokes what
// it minted"): the token store's tree in a real SQLite file migrated by the real Store — the
// cascade, minting only under a valid issuer, the issued_by column added to older databases —
// and the same through the real API server: an admin token's children and grandchildren get 401
// once it is revoked, and nothing outside its tree does.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "api/server.h"
#include "daemon/store.h"
#include "daemon/tokens.h"
#include "fake_service.h"
#include "test_client.h"

namespace space::api {
namespace {

namespace fs = std::filesystem;
using daemon::TokenStore;
using nlohmann::json;

constexpr double kNow = 1'800'000'000;

class TokenTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-token-tree.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_ = dir_ / "space.db";
    auto store = daemon::Store::open(db_);
    ASSERT_TRUE(store) << store.error().message();
    store_ = std::move(*store);
  }
  void TearDown() override {
    tokens_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  void open_tokens() {
    auto t = TokenStore::open(db_);
    ASSERT_TRUE(t) << t.error().message();
    tokens_ = std::move(*t);
  }
  // Makes a token, minted by `issuer` ("" = root); returns {id, text}.
  std::pair<std::string, std::string> mint(const std::string& name, const std::string& issuer = "",
                                           double ttl = 3600) {
    auto t = tokens_->create(name, {"*"}, {"read", "admin"}, ttl, kNow, issuer);
    EXPECT_TRUE(t) << t.error().message();
    if (!t) return {};
    EXPECT_EQ(t->record.issued_by, issuer);
    return {t->record.id, t->text};
  }
  bool valid(const std::string& text, double at = kNow + 1) {
    return tokens_->authenticate(text, at).has_value();
  }
  // Runs SQL on the database through a connection of its own.
  void sql(const std::string& statement) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    int rc = sqlite3_exec(db, statement.c_str(), nullptr, nullptr, &err);
    std::string msg = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << msg;
  }

  fs::path dir_, db_;
  std::unique_ptr<daemon::Store> store_;
  std::unique_ptr<TokenStore> tokens_;
};

TEST_F(TokenTreeTest, RevokingCascadesDownTheTreeAndNowhereElse) {
  open_tokens();
  auto [a, a_text] = mint("a");
  auto [b, b_text] = mint("b", a);
  auto [c, c_text] = mint("c", b);
  auto [d, d_text] = mint("d", a);
  auto [sibling, sibling_text] = mint("sibling");
  auto [cousin, cousin_text] = mint("cousin", sibling);
  for (const auto& t : {a_text, b_text, c_text, d_text, sibling_text, cousin_text})
    ASSERT_TRUE(valid(t));

  // Revoking the middle of the tree takes its subtree only.
  std::vector<std::string> below;
  auto rb = tokens_->revoke(b, kNow + 10, &below);
  ASSERT_TRUE(rb) << rb.error().message();
  EXPECT_EQ(below, std::vector<std::string>{c});
  EXPECT_FALSE(valid(b_text));
  EXPECT_FALSE(valid(c_text));
  EXPECT_TRUE(valid(a_text));
  EXPECT_TRUE(valid(d_text));

  // Revoking the root of it takes the rest; the revocation time of B and C stays the first.
  auto ra = tokens_->revoke(a, kNow + 20, &below);
  ASSERT_TRUE(ra) << ra.error().message();
  EXPECT_EQ(below, std::vector<std::string>{d}) << "only tokens not revoked yet are reported";
  for (const auto& t : {a_text, b_text, c_text, d_text}) {
    auto r = tokens_->authenticate(t, kNow + 30);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kUnauthenticated);
    EXPECT_NE(r.error().message().find("was revoked at"), std::string::npos) << r.error().message();
  }
  EXPECT_EQ((*tokens_->get(c))->revoked_at, kNow + 10);
  EXPECT_EQ((*tokens_->get(d))->revoked_at, kNow + 20);
  // Outside the tree nothing changed.
  EXPECT_TRUE(valid(sibling_text, kNow + 30));
  EXPECT_TRUE(valid(cousin_text, kNow + 30));
  // The list says who issued what.
  auto all = tokens_->list();
  ASSERT_TRUE(all);
  for (const auto& r : *all) {
    if (r.id == b || r.id == d) {
      EXPECT_EQ(r.issued_by, a);
    }
    if (r.id == c) {
      EXPECT_EQ(r.issued_by, b);
    }
    if (r.id == a || r.id == sibling) {
      EXPECT_EQ(r.issued_by, "");
    }
  }
}

TEST_F(TokenTreeTest, OnlyAValidTokenMints) {
  open_tokens();
  auto [a, a_text] = mint("a", "", 100);
  ASSERT_TRUE(tokens_->revoke(a, kNow + 1));
  auto from_revoked = tokens_->create("x", {"*"}, {"read"}, 10, kNow + 2, a);
  ASSERT_FALSE(from_revoked);
  EXPECT_EQ(from_revoked.error().code(), Code::kUnauthenticated);
  EXPECT_NE(from_revoked.error().message().find("minting a token: API token " + a +
                                                " (a) was "
                                                "revoked at"),
            std::string::npos)
      << from_revoked.error().message();

  auto [e, e_text] = mint("e", "", 100);
  auto from_expired = tokens_->create("x", {"*"}, {"read"}, 10, kNow + 100, e);
  ASSERT_FALSE(from_expired);
  EXPECT_NE(from_expired.error().message().find("expired at"), std::string::npos)
      << from_expired.error().message();

  auto from_unknown = tokens_->create("x", {"*"}, {"read"}, 10, kNow, "ffffffffffff");
  ASSERT_FALSE(from_unknown);
  EXPECT_NE(from_unknown.error().message().find("no longer exists"), std::string::npos);

  // None of the refused mints left a row.
  auto all = tokens_->list();
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 2u);
}

TEST_F(TokenTreeTest, ConcurrentMintsAndRevokeLeaveNoValidChild) {
  open_tokens();
  auto [p, p_text] = mint("p");
  auto [q, q_text] = mint("q", p);
  std::vector<std::string> minted;
  std::thread minter([&, q = q] {
    for (int i = 0; i < 200; ++i) {
      auto t = tokens_->create("m" + std::to_string(i), {"*"}, {"read"}, 60, kNow, q);
      if (t) minted.push_back(t->text);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(tokens_->revoke(p, kNow + 1));
  minter.join();
  for (const auto& t : minted) EXPECT_FALSE(valid(t, kNow + 2));
}

TEST_F(TokenTreeTest, OlderDatabasesGainTheColumnAndKeepTheirTokens) {
  // A token row as spaced wrote it before issuers were recorded.
  const std::string secret(64, 'b');
  sql("INSERT INTO api_tokens (id, name, secret_hash, profiles, ops, created_at, expires_at) "
      "VALUES ('0123456789ab', 'old', '" +
      daemon::sha256_hex(secret) + "', '[\"*\"]', '[\"read\",\"admin\"]', " + std::to_string(kNow) +
      ", " + std::to_string(kNow + 3600) + ")");
  open_tokens();
  const std::string old_text = "spt_0123456789ab_" + secret;
  auto old = tokens_->authenticate(old_text, kNow + 1);
  ASSERT_TRUE(old) << old.error().message();
  EXPECT_EQ(old->issued_by, "");
  // Opening again (a restart) finds the column and changes nothing.
  tokens_.reset();
  open_tokens();
  EXPECT_TRUE(valid(old_text));
  // The old token mints children that cascade like any others.
  auto [child, child_text] = mint("child", "0123456789ab");
  ASSERT_TRUE(tokens_->revoke("0123456789ab", kNow + 5));
  EXPECT_FALSE(valid(child_text, kNow + 6));
}

TEST_F(TokenTreeTest, StillValidTracksRevocationAndExpiry) {
  open_tokens();
  auto [a, a_text] = mint("a", "", 100);
  auto [b, b_text] = mint("b", a, 50);
  EXPECT_TRUE(tokens_->check_still_valid(b, kNow + 1));
  auto expired = tokens_->check_still_valid(b, kNow + 60);
  ASSERT_FALSE(expired);
  EXPECT_EQ(expired.error().code(), Code::kUnauthenticated);
  EXPECT_NE(expired.error().message().find("expired at"), std::string::npos);
  ASSERT_TRUE(tokens_->revoke(a, kNow + 2));
  auto revoked = tokens_->check_still_valid(b, kNow + 3);
  ASSERT_FALSE(revoked);
  EXPECT_NE(revoked.error().message().find("API token " + b + " (b) was revoked at"),
            std::string::npos)
      << revoked.error().message();
  auto gone = tokens_->check_still_valid("ffffffffffff", kNow);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code(), Code::kUnauthenticated);
}

// --- through the API ---------------------------------------------------------------------------

class TokenTreeServerTest : public TokenTreeTest {
 protected:
  void SetUp() override {
    TokenTreeTest::SetUp();
    open_tokens();
    socket_ = dir_ / "space.sock";
    ApiServer::Options o;
    o.tokens = tokens_.get();
    o.profiles = {"test", "live"};
    auto s = ApiServer::listen(socket_, svc_, o);
    ASSERT_TRUE(s) << s.error().message();
    server_ = std::move(*s);
    thread_ = std::thread([this] { server_->serve(); });
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      thread_.join();
      server_.reset();
    }
    TokenTreeTest::TearDown();
  }
  testing::Response req(const std::string& method, const std::string& target,
                        const std::string& body = "", const std::string& token = "") {
    std::map<std::string, std::string> h;
    if (!token.empty()) h["Authorization"] = "Bearer " + token;
    return testing::request(socket_, method, target, body, h);
  }
  std::string api_mint(const std::string& name, const std::string& ops, const std::string& ttl,
                       const std::string& as = "") {
    auto r = req("POST", "/v1/tokens",
                 R"({"name": ")" + name + R"(", "profiles": ["test"], "ops": )" + ops +
                     R"(, "ttl": ")" + ttl + R"("})",
                 as);
    EXPECT_EQ(r.status, 201) << r.body;
    return r.body_json().value("token", "");
  }

  testing::FakeService svc_;
  fs::path socket_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
};

TEST_F(TokenTreeServerTest, RevokingAnAdminTokenRevokesWhatItMinted) {
  std::string a = api_mint("ci", R"(["read", "admin"])", "2h");
  std::string b = api_mint("job", R"(["read", "admin"])", "1h", a);
  std::string c = api_mint("step", R"(["read"])", "30m", b);
  std::string other = api_mint("other", R"(["read"])", "1h");
  for (const auto& t : {a, b, c, other}) ASSERT_EQ(req("GET", "/v1/sandboxes", "", t).status, 200);

  EXPECT_EQ(req("DELETE", "/v1/tokens/" + a.substr(4, 12)).status, 204);
  for (const auto& t : {a, b, c}) {
    auto r = req("GET", "/v1/sandboxes", "", t);
    EXPECT_EQ(r.status, 401) << r.body;
    EXPECT_NE(r.body.find("was revoked at"), std::string::npos) << r.body;
  }
  EXPECT_EQ(req("GET", "/v1/sandboxes", "", other).status, 200);
  // A revoked child cannot mint either.
  auto mint = req("POST", "/v1/tokens",
                  R"({"name": "x", "profiles": ["test"], "ops": ["read"], "ttl": "1m"})", b);
  EXPECT_EQ(mint.status, 401) << mint.body;
  auto list = req("GET", "/v1/tokens").body_json()["tokens"];
  int revoked = 0;
  for (const auto& t : list) revoked += t["state"] == "revoked";
  EXPECT_EQ(revoked, 3);
}

}  // namespace
}  // namespace space::api
