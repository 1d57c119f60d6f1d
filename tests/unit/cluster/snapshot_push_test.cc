// Snapshots that move, end to end on real stores, once against a POSIX directory and once
// against an S3-compatible server on loopback (s3rver, s3rver.h): a snapshot taken by one node's
// local store, pushed, pulled by another node's local store (another directory, the same key)
// restores the same tree; pushes share chunks (a sibling snapshot uploads only its new chunks,
// two nodes with the same content upload them once); an altered manifest or chunk, a missing
// chunk, another cluster's key are refused on pull with nothing installed; a push that dies
// between its chunks and its manifest leaves no visible snapshot, and the next push completes
// it.
#include "cluster/snapshot_push.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <set>
#include <thread>

#include "cluster/object_store.h"
#include "s3rver.h"
#include "unit/snapshot/test_tree.h"

namespace space::cluster {
namespace {

using nlohmann::json;
using snapshot::testing::compare_trees;
using snapshot::testing::open_dir;
using snapshot::testing::random_string;
using snapshot::testing::TempDir;
using snapshot::testing::write_file;

const std::string kProfile = "default";
const std::string kClusterKey(32, 'c');

// A store that passes everything to another but refuses puts of keys containing `refuse`: a
// node that dies (or loses the store) at that point of a push.
class RefusingStore final : public ObjectStore {
 public:
  RefusingStore(ObjectStore& inner, std::string refuse)
      : inner_(inner), refuse_(std::move(refuse)) {}
  const std::string& url() const override { return inner_.url(); }
  Result<void> put(const std::string& key, std::string_view data) override {
    if (key.find(refuse_) != std::string::npos)
      return fail(Code::kUnavailable, "test: the node died before writing " + key);
    return inner_.put(key, data);
  }
  Result<bool> exists(const std::string& key) override { return inner_.exists(key); }
  Result<std::string> get(const std::string& key, size_t max) override {
    return inner_.get(key, max);
  }
  Result<std::vector<std::string>> list(const std::string& prefix) override {
    return inner_.list(prefix);
  }
  Result<void> remove(const std::string& key) override { return inner_.remove(key); }

 private:
  ObjectStore& inner_;
  std::string refuse_;
};

// One node: its own local store of profile "default" under its own state directory.
struct Node {
  Node(const TempDir& tmp, const std::string& name, const std::string& key = kClusterKey)
      : root(tmp / ("node-" + name + "/snapshots/default")) {
    auto s = snapshot::Store::open(root, key);
    EXPECT_TRUE(s) << s.error().message();
    store = std::move(*s);
  }
  std::string root;
  std::unique_ptr<snapshot::Store> store;
};

class SnapshotPushTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "posix") {
      auto s = open_object_store("file://" + tmp_ / "shared");
      ASSERT_TRUE(s) << s.error().message();
      remote_ = std::move(*s);
    } else {
      s3_ = std::make_unique<testing::S3rver>();
      if (!s3_->available()) GTEST_SKIP() << "no S3 server for this test: " << s3_->why();
      const std::string creds = tmp_ / "s3.json";
      write_file(creds, json{{"access_key_id", testing::S3rver::kAccessKey},
                             {"secret_access_key", testing::S3rver::kSecretKey}}
                            .dump());
      ObjectStoreOptions o;
      o.credentials_file = creds;
      auto s = open_object_store(s3_->url(), o);
      ASSERT_TRUE(s) << s.error().message();
      remote_ = std::move(*s);
    }
    src_ = tmp_ / "src";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((src_ + "/data").c_str(), 0755), 0);
    write_file(src_ + "/data/big", random_string(3 << 20, 1));  // several chunks
    write_file(src_ + "/data/small", "small file\n");
    write_file(src_ + "/empty", "");
    ASSERT_EQ(::symlink("data/small", (src_ + "/link").c_str()), 0);
    ASSERT_EQ(::chmod((src_ + "/data/small").c_str(), 0640), 0);
  }

  void TearDown() override {
    if (s3_ && s3_->available()) {
      EXPECT_EQ(s3_->refusals(), "") << "the server refused some request's signature";
    }
  }

  snapshot::Manifest take(Node& n, const std::string& id, const std::string& dir,
                          const snapshot::Manifest* parent = nullptr) {
    UniqueFd fd = open_dir(dir);
    auto m = n.store->take(fd.get(), id, parent, {{"sandbox", "sb_1"}});
    EXPECT_TRUE(m) << m.error().message();
    return m ? *m : snapshot::Manifest{};
  }

  // Restores `id` from node `n`'s store into a fresh directory and compares it with `dir`.
  void expect_restores(Node& n, const std::string& id, const std::string& dir) {
    auto m = n.store->load(id);
    ASSERT_TRUE(m) << m.error().message();
    const std::string out = tmp_ / ("restored-" + std::to_string(++restores_));
    ASSERT_EQ(::mkdir(out.c_str(), 0755), 0);
    UniqueFd fd = open_dir(out);
    auto r = n.store->restore(*m, fd.get());
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(compare_trees(dir, out), "");
  }

  std::vector<std::string> remote_chunks() {
    auto keys = remote_->list("profiles/" + kProfile + "/chunks/");
    EXPECT_TRUE(keys) << keys.error().message();
    return keys ? *keys : std::vector<std::string>{};
  }

  // Flips one byte in the middle of a remote object.
  void flip_byte(const std::string& key) {
    auto data = remote_->get(key, 64 << 20);
    ASSERT_TRUE(data) << data.error().message();
    (*data)[data->size() / 2] ^= 0x01;
    ASSERT_TRUE(remote_->put(key, *data));
  }

  void expect_nothing_installed(Node& n, const std::string& id) {
    auto m = n.store->load(id);
    ASSERT_FALSE(m) << "a refused snapshot was installed";
    EXPECT_EQ(m.error().code(), Code::kNotFound);
    EXPECT_TRUE(n.store->list().empty());
  }

  TempDir tmp_;
  std::unique_ptr<testing::S3rver> s3_;
  std::unique_ptr<ObjectStore> remote_;
  std::string src_;
  int restores_ = 0;
};

TEST_P(SnapshotPushTest, PushThenPullOnAnotherNodeRestoresTheTree) {
  Node a(tmp_, "a"), b(tmp_, "b");
  snapshot::Manifest m = take(a, "snap_1-a", src_);
  const size_t chunks = snapshot::Store::stored_chunks(m).size();
  ASSERT_GE(chunks, 3u);

  auto pushed = push_snapshot(*a.store, kProfile, "snap_1-a", *remote_);
  ASSERT_TRUE(pushed) << pushed.error().message();
  EXPECT_EQ(pushed->chunks_uploaded, chunks);
  EXPECT_EQ(pushed->chunks_skipped, 0u);
  EXPECT_GT(pushed->bytes_uploaded, 0u);
  EXPECT_EQ(remote_chunks().size(), chunks);
  EXPECT_EQ(*list_pushed_snapshots(*remote_, kProfile), std::vector<std::string>{"snap_1-a"});
  // The shared store holds the local files byte for byte.
  auto sealed = a.store->load_sealed("snap_1-a");
  ASSERT_TRUE(sealed);
  EXPECT_EQ(*remote_->get("profiles/default/manifests/snap_1-a", 1 << 20), sealed->file);

  auto pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store);
  ASSERT_TRUE(pulled) << pulled.error().message();
  EXPECT_EQ(pulled->chunks_downloaded, chunks);
  EXPECT_EQ(pulled->chunks_present, 0u);
  EXPECT_FALSE(pulled->already_present);
  expect_restores(b, "snap_1-a", src_);
  auto verified = b.store->verify(*b.store->load("snap_1-a"));
  EXPECT_TRUE(verified) << verified.error().message();

  // Again: nothing to do.
  pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store);
  ASSERT_TRUE(pulled) << pulled.error().message();
  EXPECT_TRUE(pulled->already_present);
  EXPECT_EQ(pulled->chunks_downloaded, 0u);
  // The path-based overloads open the stores themselves.
  Node c(tmp_, "c");
  pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", c.root, kClusterKey);
  ASSERT_TRUE(pulled) << pulled.error().message();
  expect_restores(c, "snap_1-a", src_);
  pushed = push_snapshot(a.root, kProfile, "snap_1-a", kClusterKey, *remote_);
  ASSERT_TRUE(pushed) << pushed.error().message();
  EXPECT_EQ(pushed->chunks_uploaded, 0u);
  EXPECT_EQ(pushed->chunks_skipped, chunks);

  auto missing = pull_snapshot(*remote_, kProfile, "snap_nope", *b.store);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  EXPECT_NE(missing.error().message().find(remote_->url()), std::string::npos);
}

// Two pulls of one snapshot at once (two requests restoring it on the same node) both succeed.
TEST_P(SnapshotPushTest, ConcurrentPullsOfOneSnapshotBothSucceed) {
  Node a(tmp_, "a"), b(tmp_, "b");
  take(a, "snap_1-a", src_);
  ASSERT_TRUE(push_snapshot(*a.store, kProfile, "snap_1-a", *remote_));
  for (int round = 0; round < 3; ++round) {
    Node n(tmp_, "n" + std::to_string(round));
    Result<PullResult> r1 = PullResult{}, r2 = PullResult{};
    std::thread t1([&] { r1 = pull_snapshot(*remote_, kProfile, "snap_1-a", *n.store); });
    std::thread t2([&] { r2 = pull_snapshot(*remote_, kProfile, "snap_1-a", *n.store); });
    t1.join();
    t2.join();
    ASSERT_TRUE(r1) << r1.error().message();
    ASSERT_TRUE(r2) << r2.error().message();
    expect_restores(n, "snap_1-a", src_);
  }
}

TEST_P(SnapshotPushTest, SiblingSnapshotUploadsOnlyItsNewChunks) {
  Node a(tmp_, "a"), b(tmp_, "b");
  snapshot::Manifest m1 = take(a, "snap_1-a", src_);
  ASSERT_TRUE(push_snapshot(*a.store, kProfile, "snap_1-a", *remote_));
  write_file(src_ + "/data/new", random_string(2 << 20, 7));
  snapshot::Manifest m2 = take(a, "snap_2-a", src_, &m1);
  std::set<std::string> old_chunks;
  for (const auto& c : snapshot::Store::stored_chunks(m1)) old_chunks.insert(c);
  uint64_t fresh = 0;
  for (const auto& c : snapshot::Store::stored_chunks(m2)) fresh += !old_chunks.contains(c);
  ASSERT_GT(fresh, 0u);

  auto pushed = push_snapshot(*a.store, kProfile, "snap_2-a", *remote_);
  ASSERT_TRUE(pushed) << pushed.error().message();
  EXPECT_EQ(pushed->chunks_uploaded, fresh);
  EXPECT_EQ(pushed->chunks_skipped, snapshot::Store::stored_chunks(m2).size() - fresh);

  // A node that has the first snapshot downloads only the new chunks of the second.
  ASSERT_TRUE(pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store));
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_2-a", *b.store);
  ASSERT_TRUE(pulled) << pulled.error().message();
  EXPECT_EQ(pulled->chunks_downloaded, fresh);
  EXPECT_EQ(pulled->chunks_present, snapshot::Store::stored_chunks(m2).size() - fresh);
  expect_restores(b, "snap_2-a", src_);
}

TEST_P(SnapshotPushTest, TwoNodesWithTheSameContentShareChunks) {
  Node a(tmp_, "a"), b(tmp_, "b");
  snapshot::Manifest ma = take(a, "snap_1-a", src_);
  snapshot::Manifest mb = take(b, "snap_1-b", src_);  // the same files on another node
  auto pa = push_snapshot(*a.store, kProfile, "snap_1-a", *remote_);
  ASSERT_TRUE(pa) << pa.error().message();
  auto pb = push_snapshot(*b.store, kProfile, "snap_1-b", *remote_);
  ASSERT_TRUE(pb) << pb.error().message();
  EXPECT_EQ(pb->chunks_uploaded, 0u);
  EXPECT_EQ(pb->chunks_skipped, snapshot::Store::stored_chunks(mb).size());
  EXPECT_EQ(remote_chunks().size(), snapshot::Store::stored_chunks(ma).size());
  EXPECT_EQ(*list_pushed_snapshots(*remote_, kProfile),
            (std::vector<std::string>{"snap_1-a", "snap_1-b"}));
  Node c(tmp_, "c");
  ASSERT_TRUE(pull_snapshot(*remote_, kProfile, "snap_1-a", *c.store));
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_1-b", *c.store);
  ASSERT_TRUE(pulled) << pulled.error().message();
  EXPECT_EQ(pulled->chunks_downloaded, 0u);
  expect_restores(c, "snap_1-b", src_);
}

TEST_P(SnapshotPushTest, AlteredManifestIsRefusedBeforeAnythingIsFetched) {
  Node a(tmp_, "a"), b(tmp_, "b");
  take(a, "snap_1-a", src_);
  ASSERT_TRUE(push_snapshot(*a.store, kProfile, "snap_1-a", *remote_));
  flip_byte("profiles/default/manifests/snap_1-a");
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store);
  ASSERT_FALSE(pulled) << "an altered manifest was pulled";
  EXPECT_EQ(pulled.error().code(), Code::kProtocol);
  EXPECT_NE(pulled.error().message().find("manifest snap_1-a"), std::string::npos)
      << pulled.error().message();
  EXPECT_NE(pulled.error().message().find("MAC"), std::string::npos) << pulled.error().message();
  expect_nothing_installed(b, "snap_1-a");
  EXPECT_EQ(b.store->stats().chunks, 0u) << "chunks were fetched for an unverified manifest";
}

TEST_P(SnapshotPushTest, AlteredChunkIsRefusedAndNothingInstalled) {
  Node a(tmp_, "a"), b(tmp_, "b");
  snapshot::Manifest m = take(a, "snap_1-a", src_);
  ASSERT_TRUE(push_snapshot(*a.store, kProfile, "snap_1-a", *remote_));
  const std::string victim = snapshot::Store::stored_chunks(m).back();
  flip_byte("profiles/default/chunks/" + victim);
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store);
  ASSERT_FALSE(pulled) << "an altered chunk was pulled";
  EXPECT_EQ(pulled.error().code(), Code::kProtocol);
  EXPECT_NE(pulled.error().message().find("chunk " + victim), std::string::npos)
      << pulled.error().message();
  expect_nothing_installed(b, "snap_1-a");
  EXPECT_FALSE(*b.store->has_chunk(victim));
}

TEST_P(SnapshotPushTest, SwappedOrMissingChunkIsRefused) {
  Node a(tmp_, "a"), b(tmp_, "b");
  snapshot::Manifest m = take(a, "snap_1-a", src_);
  ASSERT_TRUE(push_snapshot(*a.store, kProfile, "snap_1-a", *remote_));
  const auto chunks = snapshot::Store::stored_chunks(m);
  // A valid chunk under another chunk's name.
  auto other = remote_->get("profiles/default/chunks/" + chunks[0], 8 << 20);
  ASSERT_TRUE(other);
  ASSERT_TRUE(remote_->put("profiles/default/chunks/" + chunks[1], *other));
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store);
  ASSERT_FALSE(pulled);
  EXPECT_NE(pulled.error().message().find("chunk " + chunks[1]), std::string::npos)
      << pulled.error().message();
  expect_nothing_installed(b, "snap_1-a");

  ASSERT_TRUE(remote_->remove("profiles/default/chunks/" + chunks[1]));
  pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store);
  ASSERT_FALSE(pulled);
  EXPECT_EQ(pulled.error().code(), Code::kProtocol);
  EXPECT_NE(pulled.error().message().find("profiles/default/chunks/" + chunks[1]),
            std::string::npos)
      << pulled.error().message();
  expect_nothing_installed(b, "snap_1-a");
}

// A valid manifest stored under another snapshot's name (replayed, or renamed) is refused.
TEST_P(SnapshotPushTest, ManifestUnderAnotherNameIsRefused) {
  Node a(tmp_, "a"), b(tmp_, "b");
  take(a, "snap_1-a", src_);
  ASSERT_TRUE(push_snapshot(*a.store, kProfile, "snap_1-a", *remote_));
  auto file = remote_->get("profiles/default/manifests/snap_1-a", 1 << 20);
  ASSERT_TRUE(file);
  ASSERT_TRUE(remote_->put("profiles/default/manifests/snap_2-a", *file));
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_2-a", *b.store);
  ASSERT_FALSE(pulled);
  EXPECT_EQ(pulled.error().code(), Code::kProtocol);
  EXPECT_NE(pulled.error().message().find("holds snapshot snap_1-a"), std::string::npos)
      << pulled.error().message();
  expect_nothing_installed(b, "snap_2-a");
}

TEST_P(SnapshotPushTest, AnotherClustersKeyIsRefused) {
  Node a(tmp_, "a"), stranger(tmp_, "x", std::string(32, 'z'));
  take(a, "snap_1-a", src_);
  ASSERT_TRUE(push_snapshot(*a.store, kProfile, "snap_1-a", *remote_));
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *stranger.store);
  ASSERT_FALSE(pulled);
  EXPECT_EQ(pulled.error().code(), Code::kProtocol);
  EXPECT_NE(pulled.error().message().find("sealed with another key"), std::string::npos)
      << pulled.error().message();
  expect_nothing_installed(stranger, "snap_1-a");
}

TEST_P(SnapshotPushTest, PushThatDiesBeforeItsManifestLeavesNoSnapshot) {
  Node a(tmp_, "a"), b(tmp_, "b");
  snapshot::Manifest m = take(a, "snap_1-a", src_);
  RefusingStore dying(*remote_, "/manifests/");
  auto pushed = push_snapshot(*a.store, kProfile, "snap_1-a", dying);
  ASSERT_FALSE(pushed);
  EXPECT_NE(pushed.error().message().find("died"), std::string::npos);
  // The chunks landed; the snapshot is not visible.
  EXPECT_EQ(remote_chunks().size(), snapshot::Store::stored_chunks(m).size());
  EXPECT_TRUE(list_pushed_snapshots(*remote_, kProfile)->empty());
  auto pulled = pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store);
  ASSERT_FALSE(pulled);
  EXPECT_EQ(pulled.error().code(), Code::kNotFound);
  expect_nothing_installed(b, "snap_1-a");

  // A push that dies among its chunks: no manifest either.
  Node c(tmp_, "c");
  write_file(src_ + "/data/more", random_string(2 << 20, 9));
  take(c, "snap_1-c", src_);
  RefusingStore dying_early(*remote_, "/chunks/");
  ASSERT_FALSE(push_snapshot(*c.store, kProfile, "snap_1-c", dying_early));
  EXPECT_FALSE(*remote_->exists("profiles/default/manifests/snap_1-c"));

  // The next push completes the first one, sending only the manifest.
  pushed = push_snapshot(*a.store, kProfile, "snap_1-a", *remote_);
  ASSERT_TRUE(pushed) << pushed.error().message();
  EXPECT_EQ(pushed->chunks_uploaded, 0u);
  ASSERT_TRUE(pull_snapshot(*remote_, kProfile, "snap_1-a", *b.store));
}

TEST_P(SnapshotPushTest, SandboxPointers) {
  json p{{"sandbox", "sb_0123456789ab-n1"},
         {"snapshot", "snap_1-a"},
         {"profile", "default"},
         {"node", "n1"},
         {"created_at", "2026-12-04T19:00:00Z"},
         {"runtime", "linux"},
         {"image", "debian:12"}};
  ASSERT_TRUE(write_sandbox_pointer(*remote_, p));
  json q = p;
  q["sandbox"] = "sb_2";
  ASSERT_TRUE(write_sandbox_pointer(*remote_, q));
  auto got = read_sandbox_pointer(*remote_, "sb_0123456789ab-n1");
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(*got, p);
  EXPECT_EQ(*list_sandbox_pointers(*remote_),
            (std::vector<std::string>{"sb_0123456789ab-n1", "sb_2"}));
  // The latest push replaces it.
  p["snapshot"] = "snap_2-a";
  ASSERT_TRUE(write_sandbox_pointer(*remote_, p));
  EXPECT_EQ((*read_sandbox_pointer(*remote_, "sb_0123456789ab-n1"))["snapshot"], "snap_2-a");

  auto none = read_sandbox_pointer(*remote_, "sb_none");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), Code::kNotFound);
  for (json bad : {json("text"), json{{"sandbox", "sb_1"}},
                   json{{"sandbox", "../x"}, {"snapshot", "s"}, {"profile", "default"}},
                   json{{"sandbox", "sb_1"}, {"snapshot", "s"}, {"profile", "Bad Profile"}},
                   json{{"sandbox", "sb_1"}, {"snapshot", "s"}, {"profile", "p"}, {"node", 1}}})
    EXPECT_EQ(write_sandbox_pointer(*remote_, bad).error().code(), Code::kInvalidArgument)
        << bad.dump();
  // A pointer object that names another sandbox, or is not JSON, is refused on read.
  ASSERT_TRUE(remote_->put("sandboxes/sb_3.json", p.dump()));
  EXPECT_EQ(read_sandbox_pointer(*remote_, "sb_3").error().code(), Code::kProtocol);
  ASSERT_TRUE(remote_->put("sandboxes/sb_4.json", "{not json"));
  EXPECT_EQ(read_sandbox_pointer(*remote_, "sb_4").error().code(), Code::kProtocol);
}

INSTANTIATE_TEST_SUITE_P(Stores, SnapshotPushTest, ::testing::Values("posix", "s3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace space::cluster
