// Snapshot files are untrusted on load: a manifest altered, truncated or sealed with another key
// is refused by its MAC; a manifest with a valid MAC (forged here with the key) that names paths
// outside the tree, routes through a symlink or has malformed fields is refused by validation;
// a chunk altered, truncated, swapped, missing or inflated fails restore with a message that
// names the chunk and the file. Nothing is ever written outside the restore target.
#include <gtest/gtest.h>
#include <openssl/hmac.h>
#include <zstd.h>

#include "snapshot/cas.h"
#include "snapshot/internal.h"
#include "test_tree.h"

namespace space::snapshot {
namespace {

using nlohmann::json;
using testing::open_dir;
using testing::random_string;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

const std::string kKey(40, 'K');

std::string hmac_hex(const std::string& key, const std::string& data) {
  unsigned char md[32];
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return detail::to_hex(md, len);
}

class TamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*Store::open(tmp_ / "store", kKey));
    src_ = tmp_ / "src";
    ::mkdir(src_.c_str(), 0755);
    ::mkdir((src_ + "/data").c_str(), 0755);
    write_file(src_ + "/data/file", random_string(2 << 20, 1));
    write_file(src_ + "/small", "small");
    UniqueFd fd = open_dir(src_);
    auto m = store_->take(fd.get(), "snap_1", nullptr, {});
    ASSERT_TRUE(m) << m.error().message();
    m_ = *m;
    ::mkdir((tmp_ / "outside").c_str(), 0700);
  }
  std::string manifest_path(const std::string& id = "snap_1") {
    return tmp_ / ("store/manifests/" + id + ".json");
  }
  std::string chunk_path(const std::string& id) {
    return tmp_ / ("store/chunks/" + id.substr(0, 2) + "/" + id.substr(2));
  }
  const std::string& file_chunk() {
    for (const Entry& e : m_.entries)
      if (e.path == "data/file") return e.chunks.at(0);
    throw std::logic_error("no data/file");
  }
  Result<void> restore_fresh(const Manifest& m) {
    std::string dir = tmp_ / ("dst" + std::to_string(++restores_));
    ::mkdir(dir.c_str(), 0700);
    UniqueFd fd = open_dir(dir);
    return store_->restore(m, fd.get());
  }
  // Seals `manifest` with the key, as only the daemon could, and stores it as `id`.
  void forge(const json& manifest, const std::string& id = "snap_1") {
    json sealed{{"manifest", manifest}, {"mac", hmac_hex(kKey, manifest.dump())}};
    write_file(manifest_path(id), sealed.dump());
  }
  json stored_manifest() { return json::parse(read_file(manifest_path()))["manifest"]; }
  void expect_refused(const std::string& needle) {
    auto r = store_->load("snap_1");
    ASSERT_FALSE(r) << "a forged manifest loaded (expected: " << needle << ")";
    EXPECT_EQ(r.error().code(), Code::kProtocol);
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().message();
    EXPECT_TRUE(std::filesystem::is_empty(tmp_ / "outside"));
  }

  TempDir tmp_;
  std::unique_ptr<Store> store_;
  std::string src_;
  Manifest m_;
  int restores_ = 0;
};

TEST_F(TamperTest, TheStoredFileIsExactlyTheSealedCanonicalDump) {
  // Independent of the store's code: the MAC is HMAC-SHA256 over the manifest's compact dump.
  json file = json::parse(read_file(manifest_path()));
  EXPECT_EQ(file["mac"], hmac_hex(kKey, file["manifest"].dump()));
  EXPECT_EQ(file.dump(), read_file(manifest_path()));
  forge(file["manifest"]);  // re-sealing the same object gives a manifest that loads
  EXPECT_TRUE(store_->load("snap_1"));
}

TEST_F(TamperTest, AFlippedByteFailsTheMac) {
  std::string text = read_file(manifest_path());
  for (size_t pos : {text.size() / 2, text.size() - 10, size_t{100}}) {
    std::string bad = text;
    bad[pos] ^= 0x01;
    write_file(manifest_path(), bad);
    auto r = store_->load("snap_1");
    ASSERT_FALSE(r) << "flipped byte " << pos;
    EXPECT_EQ(r.error().code(), Code::kProtocol);
    EXPECT_NE(r.error().message().find("MAC"), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find("snap_1"), std::string::npos) << r.error().message();
  }
  // The MAC itself altered.
  std::string bad = text;
  bad[10] = bad[10] == 'a' ? 'b' : 'a';
  write_file(manifest_path(), bad);
  EXPECT_NE(store_->load("snap_1").error().message().find("MAC"), std::string::npos);
}

TEST_F(TamperTest, ATruncatedManifestIsRefused) {
  std::string text = read_file(manifest_path());
  for (size_t len : {size_t{0}, size_t{10}, size_t{90}, text.size() / 2, text.size() - 1}) {
    write_file(manifest_path(), text.substr(0, len));
    auto r = store_->load("snap_1");
    ASSERT_FALSE(r) << "truncated to " << len;
    EXPECT_EQ(r.error().code(), Code::kProtocol);
    EXPECT_NE(r.error().message().find("truncated"), std::string::npos) << r.error().message();
  }
}

TEST_F(TamperTest, AnotherKeyFailsTheMac) {
  auto other = Store::open(tmp_ / "store", std::string(40, 'X'));
  ASSERT_TRUE(other);
  auto r = (*other)->load("snap_1");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("MAC"), std::string::npos) << r.error().message();
}

TEST_F(TamperTest, AManifestRenamedToAnotherIdIsRefused) {
  std::filesystem::copy_file(manifest_path(), manifest_path("snap_2"));
  auto r = store_->load("snap_2");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("holds snapshot snap_1"), std::string::npos)
      << r.error().message();
}

TEST_F(TamperTest, AForgedPathOutsideTheTreeIsRefused) {
  json m = stored_manifest();
  m["entries"][1]["path"] = "../evil";
  forge(m);
  expect_refused("'..'");
  m["entries"][1]["path"] = "/etc/evil";
  forge(m);
  expect_refused("empty component");
  m["entries"][1]["path"] = "data//x";
  forge(m);
  expect_refused("empty component");
  m["entries"][1]["path"] = std::string("da\0ta", 5);
  forge(m);
  expect_refused("NUL");
}

TEST_F(TamperTest, AForgedEntryBeneathASymlinkIsRefused) {
  json m = stored_manifest();
  // "data" becomes a symlink to a directory outside; "data/file" would be written through it.
  json& data = m["entries"][1];
  ASSERT_EQ(data["path"], "data");
  data = json{{"path", "data"}, {"type", "symlink"},         {"mode", 0777}, {"uid", 0}, {"gid", 0},
              {"mtime_ns", 0},  {"target", tmp_ / "outside"}};
  forge(m);
  expect_refused("not beneath a directory");

  // The same manifest handed to restore() directly (not loaded) is refused too.
  auto r = restore_fresh(m_);  // the genuine one restores
  ASSERT_TRUE(r) << r.error().message();
  Manifest direct = m_;
  direct.entries[1].type = Entry::Type::kSymlink;
  direct.entries[1].target = tmp_ / "outside";
  auto refused = restore_fresh(direct);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kProtocol);
  EXPECT_TRUE(std::filesystem::is_empty(tmp_ / "outside"));
}

TEST_F(TamperTest, ForgedFieldsAreCheckedOneByOne) {
  const json good = stored_manifest();
  ASSERT_EQ(good["entries"][2]["path"], "data/file");
  struct Case {
    std::function<void(json&)> edit;
    std::string needle;
  } cases[] = {
      {[](json& m) { m["entries"][2]["chunks"][0] = "../../../etc/passwd"; }, "chunk id"},
      {[](json& m) { m["entries"][2]["chunks"][0] = std::string(64, 'A'); }, "chunk id"},
      {[](json& m) { m["entries"][2]["mode"] = "0755"; }, "\"mode\""},
      {[](json& m) { m["entries"][2]["mode"] = 0100644; }, "file-type bits"},
      {[](json& m) { m["entries"][2]["size"] = -1; }, "\"size\""},
      {[](json& m) { m["entries"][2]["uid"] = 1ull << 40; }, "out of range"},
      {[](json& m) { m["entries"][2]["link"] = "/etc/passwd"; }, "hardlink"},
      {[](json& m) { m["entries"][2]["type"] = "blockdev"; }, "unknown type"},
      {[](json& m) {
         m["entries"][2]["xattrs"] = json::array({json::array({"security.selinux", "00"})});
       },
       "namespaces"},
      {[](json& m) {
         m["entries"][2]["xattrs"] = json::array({json::array({"user.x", "zz"})});
       },
       "xattr"},
      {[](json& m) { m["entries"][2]["size"] = 100ull << 20; }, "cannot hold its size"},
      {[](json& m) { std::swap(m["entries"][2], m["entries"][3]); }, "out of order"},
      {[](json& m) { m["entries"].push_back(m["entries"][3]); }, "out of order"},
      {[](json& m) { m["entries"].erase(0); }, "root directory"},
      {[](json& m) { m["entries"] = json::object(); }, "\"entries\""},
      {[](json& m) { m["format"] = 2; }, "format"},
      {[](json& m) { m.erase("id"); }, "\"id\""},
      {[](json& m) { m["id"] = "snap_2"; }, "holds snapshot snap_2"},
      {[](json& m) { m["parent"] = "../x"; }, "parent"},
      {[](json& m) {
         m["labels"] = {{"sandbox", 1}};
       },
       "label"},
      {[](json& m) {
         json deep = 1;
         for (int i = 0; i < 200; ++i) deep = json::array({deep});
         m["labels"] = deep;
       },
       "nested too deeply"},
  };
  for (const Case& c : cases) {
    json m = good;
    c.edit(m);
    forge(m);
    expect_refused(c.needle);
  }
  forge(good);
  EXPECT_TRUE(store_->load("snap_1"));
}

class ChunkTamperTest : public TamperTest {
 protected:
  void expect_restore_refused(const std::string& id, const std::string& why) {
    auto loaded = store_->load("snap_1");
    ASSERT_TRUE(loaded) << loaded.error().message();  // the manifest itself is intact
    const std::string expected = "snapshot snap_1: chunk " + id + " of data/file is " + why;
    const bool present = std::filesystem::exists(chunk_path(id));
    // verify() (what rollback runs before it stops a sandbox) finds the damage without writing
    // anything into a tree...
    auto v = store_->verify(*loaded);
    ASSERT_FALSE(v) << "verify passed a damaged chunk (expected: " << why << ")";
    EXPECT_EQ(v.error().code(), Code::kProtocol);
    EXPECT_EQ(v.error().message().substr(0, expected.size()), expected) << v.error().message();
    if (present) {
      // ...and moves the bad file aside, so that the store never hands it out again.
      EXPECT_FALSE(std::filesystem::exists(chunk_path(id)));
      ASSERT_TRUE(std::filesystem::exists(chunk_path(id) + ".corrupt"));
      EXPECT_EQ(store_->stats().quarantined, 1u);
      std::filesystem::rename(chunk_path(id) + ".corrupt", chunk_path(id));
    }
    auto r = restore_fresh(*loaded);
    ASSERT_FALSE(r) << "restored with a damaged chunk (expected: " << why << ")";
    EXPECT_EQ(r.error().code(), Code::kProtocol);
    EXPECT_EQ(r.error().message().substr(0, expected.size()), expected) << r.error().message();
  }
};

TEST_F(ChunkTamperTest, VerifyPassesAnIntactSnapshot) {
  auto loaded = store_->load("snap_1");
  ASSERT_TRUE(loaded) << loaded.error().message();
  auto v = store_->verify(*loaded);
  EXPECT_TRUE(v) << v.error().message();
}

TEST_F(ChunkTamperTest, AFlippedByteIsAHashMismatch) {
  const std::string id = file_chunk();
  std::string z = read_file(chunk_path(id));
  z[z.size() / 2] ^= 0x40;
  write_file(chunk_path(id), z);
  expect_restore_refused(id, "corrupt (hash mismatch)");
}

// A chunk found corrupt is not reused: the next snapshot of the same bytes stores it anew, and
// the snapshot that named the bad file restores again.
TEST_F(ChunkTamperTest, ACorruptChunkIsRewrittenByTheNextSnapshot) {
  const std::string id = file_chunk();
  std::string z = read_file(chunk_path(id));
  z[z.size() / 2] ^= 0x40;
  write_file(chunk_path(id), z);
  auto loaded = store_->load("snap_1");
  ASSERT_TRUE(loaded);
  ASSERT_FALSE(restore_fresh(*loaded));
  UniqueFd fd = open_dir(src_);
  auto again = store_->take(fd.get(), "snap_2", nullptr, {});
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_GT(again->new_bytes, 0u) << "the chunk was stored anew, not referenced";
  auto r = restore_fresh(*loaded);
  EXPECT_TRUE(r) << r.error().message();
}

TEST_F(ChunkTamperTest, ATruncatedChunkIsRefused) {
  const std::string id = file_chunk();
  std::string z = read_file(chunk_path(id));
  write_file(chunk_path(id), z.substr(0, z.size() - 1000));
  expect_restore_refused(id, "corrupt (truncated or damaged");
  write_file(chunk_path(id), "");
  expect_restore_refused(id, "corrupt (not zstd data)");
}

TEST_F(ChunkTamperTest, AMissingChunkIsRefused) {
  const std::string id = file_chunk();
  ASSERT_EQ(::unlink(chunk_path(id).c_str()), 0);
  expect_restore_refused(id, "missing from the store");
}

TEST_F(ChunkTamperTest, AnotherValidChunkInItsPlaceIsAHashMismatch) {
  const std::string id = file_chunk();
  std::string other;
  for (const Entry& e : m_.entries)
    if (e.path == "small") other = e.chunks.at(0);
  std::filesystem::copy_file(chunk_path(other), chunk_path(id),
                             std::filesystem::copy_options::overwrite_existing);
  expect_restore_refused(id, "corrupt (hash mismatch)");
}

TEST_F(ChunkTamperTest, AnInflatingChunkIsRefusedBeforeItIsDecompressed) {
  const std::string id = file_chunk();
  std::string zeros(64 << 20, '\0');
  std::string z(ZSTD_compressBound(zeros.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), zeros.data(), zeros.size(), 3));
  write_file(chunk_path(id), z);
  expect_restore_refused(id, "corrupt (holds 67108864 bytes");
  // Without a declared size, the output bound stops it.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  std::string z2(ZSTD_compressBound(zeros.size()), '\0');
  ZSTD_outBuffer out{z2.data(), z2.size(), 0};
  ZSTD_inBuffer in{zeros.data(), zeros.size(), 0};
  ZSTD_compressStream2(cctx, &out, &in, ZSTD_e_end);
  ZSTD_freeCCtx(cctx);
  z2.resize(out.pos);
  write_file(chunk_path(id), z2);
  expect_restore_refused(id, "corrupt (truncated or damaged");
}

}  // namespace
}  // namespace space::snapshot
