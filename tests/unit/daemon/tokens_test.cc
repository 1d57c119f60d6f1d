// API tokens in a real SQLite file (migrated by the real Store): the text format, hashing,
// authentication outcomes and their messages, revocation, and that the database never holds
// a token's secret.
#include "daemon/tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/store.h"

namespace space::daemon {
namespace {

namespace fs = std::filesystem;

const std::string kSecret(64, 'a');
const std::string kWellFormed = "spt_0123456789ab_" + kSecret;

TEST(TokenText, ParsesOnlyTheExactShape) {
  auto t = parse_token_text(kWellFormed);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->id, "0123456789ab");
  EXPECT_EQ(t->secret, kSecret);
  for (std::string bad :
       {std::string(""), std::string("spt_"), "spt_0123456789ab" + kSecret,  // no separator
        "spx_0123456789ab_" + kSecret, "spt_0123456789AB_" + kSecret,        // upper case
        "spt_0123456789ab_" + kSecret + "0", "spt_0123456789ab_" + kSecret.substr(1),
        "spt_0123456789a_" + kSecret + "0", "spt_0123456789ab_" + std::string(63, 'a') + "g",
        " " + kWellFormed, "Bearer " + kWellFormed, std::string("spt_0123456789ab_\0", 18)}) {
    EXPECT_FALSE(parse_token_text(bad)) << bad;
  }
  EXPECT_TRUE(is_token_id("0123456789ab"));
  EXPECT_FALSE(is_token_id("0123456789a"));
  EXPECT_FALSE(is_token_id("0123456789aZ"));
  EXPECT_FALSE(is_token_id("../etc/pass"));
}

TEST(TokenText, Sha256) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

class TokenStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-tokens-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto store = Store::open(dir_ / "space.db");
    ASSERT_TRUE(store) << store.error().message();
    store_ = std::move(*store);
    auto tokens = TokenStore::open(dir_ / "space.db");
    ASSERT_TRUE(tokens) << tokens.error().message();
    tokens_ = std::move(*tokens);
  }
  void TearDown() override {
    tokens_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  // Every byte SQLite wrote (database and WAL).
  std::string database_bytes() {
    std::string all;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      all += ss.str();
    }
    return all;
  }

  fs::path dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<TokenStore> tokens_;
  static constexpr double kNow = 1'800'000'000;
};

TEST_F(TokenStoreTest, OpenNeedsTheMigratedSchema) {
  auto other = TokenStore::open(dir_ / "empty.db");
  EXPECT_FALSE(other);
  auto missing = TokenStore::open(dir_ / "no" / "such.db");
  EXPECT_FALSE(missing);
}

TEST_F(TokenStoreTest, CreateAndAuthenticate) {
  auto issued = tokens_->create("ci", {"test"}, {"read", "exec"}, 3600, kNow);
  ASSERT_TRUE(issued) << issued.error().message();
  auto parts = parse_token_text(issued->text);
  ASSERT_TRUE(parts) << "issued text has the documented shape";
  EXPECT_EQ(parts->id, issued->record.id);
  EXPECT_EQ(issued->record.expires_at, kNow + 3600);

  auto rec = tokens_->authenticate(issued->text, kNow + 10);
  ASSERT_TRUE(rec) << rec.error().message();
  EXPECT_EQ(rec->id, issued->record.id);
  EXPECT_EQ(rec->name, "ci");
  EXPECT_EQ(rec->profiles, std::vector<std::string>{"test"});
  EXPECT_EQ(rec->ops, (std::vector<std::string>{"read", "exec"}));
  ASSERT_TRUE(rec->last_used_at);
  EXPECT_EQ(*rec->last_used_at, kNow + 10);

  // Two tokens never share an id or a secret.
  auto second = tokens_->create("ci", {"test"}, {"read"}, 3600, kNow);
  ASSERT_TRUE(second);
  EXPECT_NE(second->record.id, issued->record.id);
  EXPECT_NE(parse_token_text(second->text)->secret, parts->secret);

  auto list = tokens_->list();
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), 2u);
  auto got = tokens_->get(issued->record.id);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->last_used_at, kNow + 10);
}

TEST_F(TokenStoreTest, TheDatabaseHoldsOnlyTheHash) {
  auto issued = tokens_->create("ci", {"*"}, {"admin"}, 3600, kNow);
  ASSERT_TRUE(issued);
  std::string secret = parse_token_text(issued->text)->secret;
  std::string bytes = database_bytes();
  EXPECT_EQ(bytes.find(secret), std::string::npos) << "the secret is in the database";
  EXPECT_EQ(bytes.find(issued->text), std::string::npos);
  EXPECT_NE(bytes.find(sha256_hex(secret)), std::string::npos) << "its hash is what is kept";
}

TEST_F(TokenStoreTest, RefusalsAreUnauthenticatedAndNeverEchoTheText) {
  auto issued = tokens_->create("ci", {"test"}, {"read"}, 60, kNow);
  ASSERT_TRUE(issued);
  std::string id = issued->record.id;
  std::string wrong_secret = "spt_" + id + "_" + std::string(64, '0');
  std::string unknown_id = "spt_ffffffffffff_" + parse_token_text(issued->text)->secret;
  std::string invalid_message;
  for (const std::string& text : {wrong_secret, unknown_id, std::string("spt_garbage"),
                                  std::string("hello"), std::string()}) {
    auto r = tokens_->authenticate(text, kNow);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code(), Code::kUnauthenticated);
    if (!text.empty()) {
      EXPECT_EQ(r.error().message().find(text), std::string::npos);
    }
    // One message whether the id is unknown or the secret wrong: ids cannot be probed.
    if (invalid_message.empty()) invalid_message = r.error().message();
    EXPECT_EQ(r.error().message(), invalid_message);
  }

  auto expired = tokens_->authenticate(issued->text, kNow + 60);
  ASSERT_FALSE(expired);
  EXPECT_EQ(expired.error().code(), Code::kUnauthenticated);
  EXPECT_NE(expired.error().message().find("expired at 2027-01-15T08:01:00"), std::string::npos)
      << expired.error().message();
  EXPECT_EQ(expired.error().message().find(issued->text), std::string::npos);

  auto revoked = tokens_->revoke(id, kNow + 5);
  ASSERT_TRUE(revoked) << revoked.error().message();
  EXPECT_EQ(revoked->revoked_at, kNow + 5);
  auto again = tokens_->revoke(id, kNow + 9);  // idempotent: keeps the first time
  ASSERT_TRUE(again);
  EXPECT_EQ(again->revoked_at, kNow + 5);
  auto r = tokens_->authenticate(issued->text, kNow + 10);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnauthenticated);
  EXPECT_NE(r.error().message().find("revoked"), std::string::npos) << r.error().message();

  auto unknown = tokens_->revoke("ffffffffffff", kNow);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), Code::kNotFound);
}

TEST_F(TokenStoreTest, SurvivesReopening) {
  auto issued = tokens_->create("ci", {"live", "test"}, {"read"}, 3600, kNow);
  ASSERT_TRUE(issued);
  tokens_.reset();
  store_.reset();
  store_ = std::move(*Store::open(dir_ / "space.db"));
  tokens_ = std::move(*TokenStore::open(dir_ / "space.db"));
  auto rec = tokens_->authenticate(issued->text, kNow + 1);
  ASSERT_TRUE(rec) << rec.error().message();
  EXPECT_EQ(rec->profiles, (std::vector<std::string>{"live", "test"}));
}

}  // namespace
}  // namespace space::daemon
