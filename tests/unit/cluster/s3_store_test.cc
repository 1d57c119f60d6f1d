// The S3 object store against a real S3-compatible server on loopback (s3rver behind a SigV4
// verifier, s3rver.h): objects written, read, listed across pages (ListObjectsV2 continuation),
// removed; size limits on reads; stores with different prefixes in one bucket apart; a wrong
// secret, a missing bucket, an unreachable endpoint each refused with an error that names the
// store and says what to check.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "cluster/object_store.h"
#include "s3rver.h"
#include "unit/snapshot/test_tree.h"

namespace space::cluster {
namespace {

using snapshot::testing::random_string;
using snapshot::testing::TempDir;
using snapshot::testing::write_file;

class S3StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<testing::S3rver>();
    if (!server_->available()) GTEST_SKIP() << "no S3 server for this test: " << server_->why();
  }
  void TearDown() override {
    if (server_ && server_->available() && expect_signed_) {
      EXPECT_EQ(server_->refusals(), "") << "the server refused some request's signature";
    }
  }
  std::unique_ptr<ObjectStore> open(const std::string& url, const std::string& secret = "S3RVER",
                                    int page = 1000) {
    const std::string creds = tmp_ / "s3.json";
    write_file(creds, nlohmann::json{{"access_key_id", testing::S3rver::kAccessKey},
                                     {"secret_access_key", secret}}
                          .dump());
    ObjectStoreOptions o;
    o.credentials_file = creds;
    o.list_page_keys = page;
    auto s = open_object_store(url, o);
    EXPECT_TRUE(s) << s.error().message();
    return s ? std::move(*s) : nullptr;
  }

  TempDir tmp_;
  std::unique_ptr<testing::S3rver> server_;
  bool expect_signed_ = true;
};

TEST_F(S3StoreTest, ObjectsRoundTrip) {
  auto s = open(server_->url("prod/eu"));
  ASSERT_TRUE(s);
  const std::string blob = random_string(3 << 20, 5);
  ASSERT_TRUE(s->put("profiles/p/chunks/aa", "one"));
  ASSERT_TRUE(s->put("profiles/p/chunks/bb", blob));
  ASSERT_TRUE(s->put("profiles/p/manifests/snap_1", ""));  // empty objects exist too
  ASSERT_TRUE(s->put("sandboxes/sb_1.json", "{}"));
  EXPECT_EQ(*s->get("profiles/p/chunks/aa", 100), "one");
  EXPECT_EQ(*s->get("profiles/p/chunks/bb", 4 << 20), blob);
  EXPECT_EQ(*s->get("profiles/p/chunks/bb", size_t{1} << 30), blob);  // read as a stream
  EXPECT_EQ(*s->get("profiles/p/manifests/snap_1", 10), "");
  auto big = s->get("profiles/p/chunks/bb", 1 << 20);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code(), Code::kPayloadTooLarge);
  big = s->get("profiles/p/chunks/bb", (size_t{1} << 30) + 0);
  ASSERT_TRUE(big);
  auto none = s->get("profiles/p/chunks/cc", 100);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Code::kNotFound);
  EXPECT_NE(none.error().message().find(s->url()), std::string::npos);
  none = s->get("profiles/p/chunks/cc", size_t{1} << 30);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Code::kNotFound);

  EXPECT_TRUE(*s->exists("profiles/p/chunks/aa"));
  EXPECT_FALSE(*s->exists("profiles/p/chunks/cc"));
  ASSERT_TRUE(s->put("profiles/p/chunks/aa", "replaced"));
  EXPECT_EQ(*s->get("profiles/p/chunks/aa", 100), "replaced");

  using V = std::vector<std::string>;
  EXPECT_EQ(*s->list("profiles/p/chunks/"), (V{"profiles/p/chunks/aa", "profiles/p/chunks/bb"}));
  EXPECT_EQ(s->list("")->size(), 4u);
  EXPECT_EQ(*s->list("sand"), (V{"sandboxes/sb_1.json"}));
  ASSERT_TRUE(s->remove("profiles/p/chunks/aa"));
  ASSERT_TRUE(s->remove("profiles/p/chunks/aa"));  // absent: fine
  EXPECT_FALSE(*s->exists("profiles/p/chunks/aa"));
  EXPECT_EQ(s->put("../x", "x").error().code(), Code::kInvalidArgument);

  // Another prefix in the same bucket is another store.
  auto other = open(server_->url("staging"));
  EXPECT_TRUE(other->list("")->empty());
  ASSERT_TRUE(other->put("profiles/p/chunks/bb", "staging's"));
  EXPECT_EQ(*s->get("profiles/p/chunks/bb", 4 << 20), blob);
  // So is the bucket's root (no prefix): it sees both, under their prefixes.
  auto root = open("s3://space-test?endpoint=" + server_->endpoint());
  auto all = root->list("");
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_EQ(all->size(), 4u);
  EXPECT_TRUE(std::find(all->begin(), all->end(), "staging/profiles/p/chunks/bb") != all->end());
}

TEST_F(S3StoreTest, ListingFollowsContinuationTokens) {
  auto s = open(server_->url(), "S3RVER", /*page=*/3);
  std::vector<std::string> keys;
  for (int i = 0; i < 11; ++i) {
    keys.push_back("profiles/p/chunks/k" + std::to_string(100 + i));
    ASSERT_TRUE(s->put(keys.back(), "x"));
  }
  ASSERT_TRUE(s->put("profiles/q/chunks/k1", "not listed"));
  auto listed = s->list("profiles/p/");
  ASSERT_TRUE(listed) << listed.error().message();
  EXPECT_EQ(*listed, keys);
}

TEST_F(S3StoreTest, WrongSecretIsRefusedWithWhatToCheck) {
  expect_signed_ = false;
  auto s = open(server_->url(), "not-the-secret");
  auto r = s->put("profiles/p/chunks/aa", "x");
  ASSERT_FALSE(r) << "the server accepted a request signed with the wrong secret";
  EXPECT_EQ(r.error().code(), Code::kPermissionDenied);
  EXPECT_NE(r.error().message().find("SignatureDoesNotMatch"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("check the access key"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find(s->url()), std::string::npos) << r.error().message();
  EXPECT_NE(server_->refusals().find("SIGV4 REFUSED"), std::string::npos);
  EXPECT_FALSE(s->exists("profiles/p/chunks/aa").has_value());
}

TEST_F(S3StoreTest, MissingBucketSaysSo) {
  auto s = open("s3://no-such-bucket/x?endpoint=" + server_->endpoint());
  auto r = s->put("k", "x");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNotFound);
  EXPECT_NE(r.error().message().find("no-such-bucket"), std::string::npos) << r.error().message();
}

TEST_F(S3StoreTest, CredentialsFromTheEnvironment) {
  ::setenv("AWS_ACCESS_KEY_ID", testing::S3rver::kAccessKey, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", testing::S3rver::kSecretKey, 1);
  auto s = open_object_store(server_->url());
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_TRUE((*s)->put("a/b", "c"));
  EXPECT_EQ(*(*s)->get("a/b", 10), "c");
}

TEST_F(S3StoreTest, CredentialsFileAsTheConfigNamesIt) {
  const std::string creds = tmp_ / "creds.json";
  write_file(creds, R"({"access_key_id": "S3RVER", "secret_access_key": "S3RVER"})");
  auto s = open_object_store(server_->url(), creds);
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_TRUE((*s)->put("a/b", "c"));
  write_file(creds, R"({"access_key_id": "S3RVER"})");
  auto bad = open_object_store(server_->url(), creds);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("secret_access_key"), std::string::npos);
}

TEST(S3StoreUnreachable, ErrorNamesTheStore) {
  ::setenv("AWS_ACCESS_KEY_ID", "x", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "y", 1);
  // Port 1 on loopback: nothing listens there.
  auto s = open_object_store("s3://bucket/p?endpoint=http://127.0.0.1:1");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ASSERT_TRUE(s) << s.error().message();
  auto r = (*s)->exists("k");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_NE(r.error().message().find("s3://bucket/p"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace space::cluster
