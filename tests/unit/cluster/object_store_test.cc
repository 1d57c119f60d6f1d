// The shared store's key rules and URLs, and the POSIX back end on real files: whole objects
// only (a reader racing a writer sees one version or the other, never a mix), listings that
// hide temporary files, and a store directory in which a planted symlink is never followed.
#include "cluster/object_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "cluster/posix_store.h"
#include "cluster/s3_store.h"
#include "unit/snapshot/test_tree.h"

namespace space::cluster {
namespace {

using snapshot::testing::read_file;
using snapshot::testing::TempDir;
using snapshot::testing::write_file;

std::unique_ptr<ObjectStore> open_dir_store(const std::string& dir) {
  auto s = open_object_store("file://" + dir);
  EXPECT_TRUE(s) << s.error().message();
  return s ? std::move(*s) : nullptr;
}

TEST(ObjectStoreKeys, AcceptsContractKeys) {
  for (const char* k : {"profiles/default/chunks/"
                        "0123456789abcdef0123456789abcdef"
                        "0123456789abcdef0123456789abcdef",
                        "profiles/p-1/manifests/snap_0123456789abcdef01234567-n1",
                        "sandboxes/sb_0123456789ab-n1.json", "a", "A.b_c-d"})
    EXPECT_TRUE(check_key(k)) << k;
}

TEST(ObjectStoreKeys, RefusesEscapesAndOddNames) {
  const std::string nul("a\0b", 3);
  for (const std::string& k :
       {std::string(""), std::string("/etc/passwd"), std::string(".."), std::string("../x"),
        std::string("a/../../x"), std::string("a/./b"), std::string("a//b"), std::string("a/"),
        std::string(".hidden"), std::string("a/.x.tmp"), std::string("a b"), std::string("a\\b"),
        std::string("ü"), nul, std::string(2000, 'a'), std::string(300, 'a')}) {
    auto r = check_key(k);
    ASSERT_FALSE(r) << "accepted key \"" << k << "\"";
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  }
  EXPECT_TRUE(check_prefix(""));
  EXPECT_TRUE(check_prefix("profiles/p/"));
  EXPECT_TRUE(check_prefix("profiles/p/chunks/ab"));
  EXPECT_FALSE(check_prefix("../"));
  EXPECT_FALSE(check_prefix("/profiles/"));
}

TEST(ObjectStoreUrl, PicksTheBackEndOrSaysWhatIsWrong) {
  TempDir tmp;
  EXPECT_TRUE(open_object_store("file://" + tmp.path()));
  EXPECT_TRUE(open_object_store("file://" + tmp.path() + "/new/"));  // made
  for (const char* bad :
       {"file://relative/dir", "file:relative", "http://x/y", "/abs/dir", "s3://",
        "s3://B/x?endpoint=http://127.0.0.1:1", "s3://bucket/a/../b?endpoint=http://127.0.0.1:1",
        "s3://bucket/x?endpoint=http://127.0.0.1:1&bogus=1"}) {
    auto s = open_object_store(bad);
    ASSERT_FALSE(s) << bad;
    EXPECT_EQ(s.error().code(), Code::kInvalidArgument) << s.error().message();
    EXPECT_NE(s.error().message().find("store"), std::string::npos) << s.error().message();
  }
}

TEST(ObjectStoreUrl, ParsesS3Urls) {
  auto loc = parse_s3_url(
      "s3://space-snapshots/prod/eu?endpoint=http%3A%2F%2F127.0.0.1%3A4568"
      "&region=eu-west-1");
  ASSERT_TRUE(loc) << loc.error().message();
  EXPECT_EQ(loc->bucket, "space-snapshots");
  EXPECT_EQ(loc->prefix, "prod/eu");
  EXPECT_EQ(loc->endpoint, "http://127.0.0.1:4568");
  EXPECT_EQ(loc->region, "eu-west-1");
  loc = parse_s3_url("s3://bucket");
  ASSERT_TRUE(loc) << loc.error().message();
  EXPECT_EQ(loc->prefix, "");
  EXPECT_EQ(loc->region, "us-east-1");
  EXPECT_EQ(loc->endpoint, "https://s3.us-east-1.amazonaws.com");
}

TEST(ObjectStoreUrl, S3WithoutCredentialsSaysWhereToPutThem) {
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  auto s = open_object_store("s3://bucket/p?endpoint=http://127.0.0.1:1");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("AWS_ACCESS_KEY_ID"), std::string::npos)
      << s.error().message();
  ObjectStoreOptions o;
  o.credentials_file = "/nonexistent/s3.json";
  s = open_object_store("s3://bucket/p?endpoint=http://127.0.0.1:1", o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("/nonexistent/s3.json"), std::string::npos)
      << s.error().message();
}

TEST(PosixStore, PutGetExistsListRemove) {
  TempDir tmp;
  auto s = open_dir_store(tmp.path());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->url(), "file://" + tmp.path());
  ASSERT_TRUE(s->put("profiles/p/chunks/aa", "one"));
  ASSERT_TRUE(s->put("profiles/p/chunks/bb", std::string(100000, 'x')));
  ASSERT_TRUE(s->put("profiles/p/manifests/snap_1", "m"));
  ASSERT_TRUE(s->put("profiles/q/chunks/aa", "other profile"));
  ASSERT_TRUE(s->put("sandboxes/sb_1.json", "{}"));
  EXPECT_EQ(read_file(tmp / "profiles/p/chunks/aa"), "one");  // the key is the path

  EXPECT_EQ(*s->get("profiles/p/chunks/aa", 100), "one");
  EXPECT_EQ(s->get("profiles/p/chunks/bb", 1 << 20)->size(), 100000u);
  auto big = s->get("profiles/p/chunks/bb", 99999);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code(), Code::kPayloadTooLarge);
  auto none = s->get("profiles/p/chunks/cc", 100);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Code::kNotFound);
  EXPECT_NE(none.error().message().find("profiles/p/chunks/cc"), std::string::npos);
  EXPECT_EQ(s->get("nowhere/at/all", 100).error().code(), Code::kNotFound);

  EXPECT_TRUE(*s->exists("profiles/p/chunks/aa"));
  EXPECT_FALSE(*s->exists("profiles/p/chunks/cc"));
  EXPECT_FALSE(*s->exists("profiles/z/chunks/aa"));
  EXPECT_FALSE(*s->exists("profiles/p/chunks"));  // a directory is no object

  ASSERT_TRUE(s->put("profiles/p/chunks/aa", "replaced"));
  EXPECT_EQ(*s->get("profiles/p/chunks/aa", 100), "replaced");

  using V = std::vector<std::string>;
  EXPECT_EQ(*s->list("profiles/p/"),
            (V{"profiles/p/chunks/aa", "profiles/p/chunks/bb", "profiles/p/manifests/snap_1"}));
  EXPECT_EQ(*s->list("profiles/p/chunks/"), (V{"profiles/p/chunks/aa", "profiles/p/chunks/bb"}));
  EXPECT_EQ(*s->list("profiles/p/chunks/a"), (V{"profiles/p/chunks/aa"}));
  EXPECT_EQ(*s->list("profiles/"), (V{"profiles/p/chunks/aa", "profiles/p/chunks/bb",
                                      "profiles/p/manifests/snap_1", "profiles/q/chunks/aa"}));
  EXPECT_EQ(s->list("")->size(), 5u);
  EXPECT_EQ(*s->list("sand"), (V{"sandboxes/sb_1.json"}));
  EXPECT_TRUE(s->list("profiles/none/")->empty());

  ASSERT_TRUE(s->remove("profiles/p/chunks/aa"));
  ASSERT_TRUE(s->remove("profiles/p/chunks/aa"));  // absent: fine
  ASSERT_TRUE(s->remove("no/such/dir"));
  EXPECT_FALSE(*s->exists("profiles/p/chunks/aa"));

  for (const char* bad : {"../escape", "/abs", "a/../b", ".hidden"}) {
    EXPECT_EQ(s->put(bad, "x").error().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(s->get(bad, 10).error().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(s->exists(bad).error().code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(s->remove(bad).error().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(tmp.path()).parent_path() / "escape"));
}

TEST(PosixStore, TemporaryFilesAreNeitherListedNorLeft) {
  TempDir tmp;
  auto s = open_dir_store(tmp.path());
  ASSERT_TRUE(s->put("d/k", "v"));
  // What a writer that died mid-put leaves behind.
  write_file(tmp / "d/.k.0123456789abcdef.tmp", "partial");
  EXPECT_EQ(*s->list("d/"), std::vector<std::string>{"d/k"});
  EXPECT_EQ(*s->list(""), std::vector<std::string>{"d/k"});
  // No temporary file of a completed put remains.
  for (auto& e : std::filesystem::directory_iterator(tmp / "d"))
    EXPECT_TRUE(e.path().filename() == "k" || e.path().filename() == ".k.0123456789abcdef.tmp")
        << e.path();
}

// A reader racing a writer of the same key sees one whole version or the other.
TEST(PosixStore, PutIsAtomicForConcurrentReaders) {
  TempDir tmp;
  auto s = open_dir_store(tmp.path());
  const std::string a(1 << 20, 'a'), b(1 << 20, 'b');
  ASSERT_TRUE(s->put("race/obj", a));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread reader([&] {
    auto r = open_dir_store(tmp.path());
    while (!stop) {
      auto got = r->get("race/obj", 2 << 20);
      if (!got || (*got != a && *got != b)) ++torn;
      ++reads;
    }
  });
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(s->put("race/obj", i % 2 ? a : b));
  while (reads < 20) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(torn, 0) << "a reader saw a missing or partial object";
}

// Anyone who can write to the shared volume can plant symlinks; the store follows none, not
// as a directory on the way to a key, not as the key itself, and a listing does not descend.
TEST(PosixStore, SymlinksInTheStoreAreNotFollowed) {
  TempDir tmp;
  const std::string root = tmp / "store", outside = tmp / "outside";
  ASSERT_EQ(::mkdir(outside.c_str(), 0700), 0);
  write_file(outside + "/secret", "host secret");
  auto s = open_dir_store(root);
  ASSERT_TRUE(s);
  ASSERT_EQ(::symlink(outside.c_str(), (root + "/profiles").c_str()), 0);
  ASSERT_EQ(::symlink((outside + "/secret").c_str(), (root + "/leaf").c_str()), 0);

  auto g = s->get("profiles/secret", 1000);
  ASSERT_FALSE(g) << "read through a symlinked directory";
  EXPECT_NE(g.error().message().find("symlinks are not followed"), std::string::npos)
      << g.error().message();
  EXPECT_FALSE(s->put("profiles/new", "x")) << "wrote through a symlinked directory";
  EXPECT_FALSE(std::filesystem::exists(outside + "/new"));
  auto e = s->exists("profiles/secret");
  EXPECT_TRUE(!e || !*e) << "found an object through a symlinked directory";

  auto leaf = s->get("leaf", 1000);
  ASSERT_FALSE(leaf) << "read a symlink's target";
  EXPECT_FALSE(*s->exists("leaf"));
  // A put replaces the symlink itself; its target stays as it was.
  ASSERT_TRUE(s->put("leaf", "mine"));
  EXPECT_EQ(read_file(outside + "/secret"), "host secret");
  EXPECT_EQ(*s->get("leaf", 100), "mine");

  EXPECT_EQ(*s->list(""), std::vector<std::string>{"leaf"});  // "profiles" not descended
  auto l = s->list("profiles/");
  EXPECT_TRUE(!l || l->empty()) << "listed through a symlinked directory";
  auto r = s->remove("profiles/secret");
  EXPECT_FALSE(r) << "removed through a symlinked directory";
  EXPECT_EQ(read_file(outside + "/secret"), "host secret");
}

TEST(PosixStore, FifoUnderAKeyDoesNotHang) {
  TempDir tmp;
  auto s = open_dir_store(tmp.path());
  ASSERT_EQ(::mkfifo((tmp / "fifo").c_str(), 0600), 0);
  auto g = s->get("fifo", 100);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code(), Code::kProtocol);
  EXPECT_FALSE(*s->exists("fifo"));
}

}  // namespace
}  // namespace space::cluster
