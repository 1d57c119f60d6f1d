// apply_layer(): what a layer makes in the tree, and every hostile entry refused with its reason
// while nothing outside the tree changes. Each test unpacks into box/root next to box/outside,
// whose sentinel file must be untouched afterwards.
#include "image/layer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "common/fd.h"
#include "image/sha256.h"
#include "image_fixtures.h"

namespace space::image {
namespace {

namespace fs = std::filesystem;
using test::Compression;
using test::make_tar;
using test::TarEntry;

class LayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root());
    test::write_file(outside() / "sentinel", "untouched");
    root_fd_ = UniqueFd(::open(root().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_fd_.valid());
  }
  void TearDown() override {
    EXPECT_EQ(test::read_file(outside() / "sentinel"), "untouched");
    size_t n = 0;
    for (auto it = fs::directory_iterator(outside()); it != fs::directory_iterator(); ++it) ++n;
    EXPECT_EQ(n, 1u) << "something was written next to the sentinel";
  }
  fs::path root() const { return dir_.path() / "root"; }
  fs::path outside() const { return dir_.path() / "outside"; }

  // Applies a layer made of `tar` bytes (already compressed as wanted). `plain` is the
  // uncompressed tar, for the diff_id ("" = the same bytes).
  Result<void> apply(const std::string& tar, const std::string& plain = "",
                     std::string media_type = test::kTar, Limits limits = kDefaultLimits,
                     bool keep_setuid = false) {
    fs::path blob = dir_.path() / ("blob" + std::to_string(n_++));
    test::write_file(blob, tar);
    Layer layer{sha256_digest(tar), std::move(media_type), tar.size(),
                sha256_digest(plain.empty() ? tar : plain), blob};
    return apply_layer(blob, layer, root_fd_.get(), limits, totals_, keep_setuid);
  }
  Result<void> unpack(const std::vector<TarEntry>& entries) { return apply(make_tar(entries)); }

  static std::string message(const Result<void>& r) { return r ? "" : r.error().message(); }

  test_support::TempDir dir_{"space-image-layer"};
  UniqueFd root_fd_;
  Totals totals_;
  int n_ = 0;
};

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

TEST_F(LayerTest, MakesFilesDirsLinksAndFifos) {
  auto r = unpack({
      {.name = "./etc/", .type = 'd', .mode = 0755},
      {.name = "./etc/hosts",
       .data = "127.0.0.1 localhost\n",
       .mode = 0640,
       .uid = 1000,
       .gid = 1001},
      {.name = "usr/bin/tool", .data = "#!/bin/sh\n", .mode = 0755},
      {.name = "usr/bin/alias", .type = 'l', .link = "tool"},
      {.name = "usr/bin/hard", .type = 'h', .link = "usr/bin/tool"},
      {.name = "run/fifo", .type = 'p', .mode = 0600},
      {.name = "abs", .type = 'l', .link = "/etc/hosts"},
  });
  ASSERT_TRUE(r) << message(r);
  EXPECT_EQ(test::read_file(root() / "etc/hosts"), "127.0.0.1 localhost\n");
  struct stat st = lstat_of(root() / "etc/hosts");
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1001u);
  EXPECT_EQ(st.st_mtime, 1'700'000'000);
  EXPECT_TRUE(S_ISLNK(lstat_of(root() / "usr/bin/alias").st_mode));
  EXPECT_EQ(fs::read_symlink(root() / "usr/bin/alias"), "tool");
  EXPECT_EQ(fs::read_symlink(root() / "abs"), "/etc/hosts");  // kept as data
  EXPECT_EQ(lstat_of(root() / "usr/bin/hard").st_ino, lstat_of(root() / "usr/bin/tool").st_ino);
  EXPECT_TRUE(S_ISFIFO(lstat_of(root() / "run/fifo").st_mode));
  EXPECT_EQ(lstat_of(root() / "etc").st_mtime, 1'700'000'000);  // set after its children
  EXPECT_EQ(totals_.entries, 7u);
  EXPECT_GT(totals_.bytes, 0u);
}

TEST_F(LayerTest, GzipAndZstdByMagicWithDiffIdOfThePlainTar) {
  std::vector<TarEntry> a = {{.name = "a", .data = std::string(100000, 'a')}};
  std::vector<TarEntry> b = {{.name = "b", .data = "bee"}};
  auto r = apply(make_tar(a, Compression::kGzip), make_tar(a), test::kTarGzip);
  ASSERT_TRUE(r) << message(r);
  r = apply(make_tar(b, Compression::kZstd), make_tar(b),
            "application/vnd.oci.image.layer.v1.tar+zstd");
  ASSERT_TRUE(r) << message(r);
  // docker-save layers have no media type: by magic too.
  std::vector<TarEntry> c = {{.name = "c", .data = "sea"}};
  r = apply(make_tar(c, Compression::kGzip), make_tar(c), "");
  ASSERT_TRUE(r) << message(r);
  EXPECT_EQ(test::read_file(root() / "a"), std::string(100000, 'a'));
  EXPECT_EQ(test::read_file(root() / "b"), "bee");
  EXPECT_EQ(test::read_file(root() / "c"), "sea");
}

TEST_F(LayerTest, KeepsNonAsciiNames) {
  auto r = unpack({{.name = "caf\xc3\xa9/na\xc3\xafve.txt", .data = "ok", .utf8 = true}});
  ASSERT_TRUE(r) << message(r);
  r = unpack({{.name = "raw\xe9", .data = "latin1"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_EQ(test::read_file(root() / "caf\xc3\xa9/na\xc3\xafve.txt"), "ok");
  EXPECT_EQ(test::read_file(root() / "raw\xe9"), "latin1");
}

TEST_F(LayerTest, RefusesTraversal) {
  for (const char* name : {"../escape", "a/../../escape", "./../outside/sentinel", ".."}) {
    auto r = unpack({{.name = name, .data = "x"}});
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(message(r).find("path leaves the root"), std::string::npos) << message(r);
  }
  EXPECT_FALSE(fs::exists(dir_.path() / "escape"));
}

TEST_F(LayerTest, RefusesNamesTooDeep) {
  std::string deep;
  for (size_t i = 0; i <= kMaxDepth; ++i) deep += "d/";
  auto r = unpack({{.name = deep + "f", .data = "x"}});
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("components"), std::string::npos) << message(r);
}

TEST_F(LayerTest, RefusesAbsoluteNames) {
  auto r = unpack({{.name = "/etc/passwd", .data = "x"}});
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("absolute name"), std::string::npos) << message(r);
  EXPECT_NE(message(r).find("/etc/passwd"), std::string::npos) << message(r);
}

TEST_F(LayerTest, RefusesWritingThroughASymlinkThatLeavesTheRoot) {
  std::string out = outside().string();
  // In one layer.
  auto r =
      unpack({{.name = "evil", .type = 'l', .link = out}, {.name = "evil/pwned", .data = "x"}});
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("leads out of the image's root"), std::string::npos) << message(r);
  EXPECT_NE(message(r).find("evil/pwned"), std::string::npos) << message(r);
  // Across layers, and with a relative target climbing out.
  ASSERT_TRUE(unpack({{.name = "up", .type = 'l', .link = "../outside"}}));
  r = unpack({{.name = "up/pwned", .data = "x"}});
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("leads out of the image's root"), std::string::npos) << message(r);
  r = unpack({{.name = "up/sub/", .type = 'd'}});
  ASSERT_FALSE(r);
  EXPECT_FALSE(fs::exists(outside() / "pwned"));
}

TEST_F(LayerTest, FollowsASymlinkThatStaysInside) {
  auto r = unpack({{.name = "usr/lib/", .type = 'd', .mode = 0755},
                   {.name = "lib", .type = 'l', .link = "usr/lib"},
                   {.name = "lib/libx.so", .data = "elf"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_EQ(test::read_file(root() / "usr/lib/libx.so"), "elf");
}

TEST_F(LayerTest, ReplacesASymlinkRatherThanWritingThroughIt) {
  std::string sentinel = (outside() / "sentinel").string();
  ASSERT_TRUE(unpack({{.name = "f", .type = 'l', .link = sentinel}}));
  auto r = unpack({{.name = "f", .data = "overwritten?"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_TRUE(S_ISREG(lstat_of(root() / "f").st_mode));
  EXPECT_EQ(test::read_file(root() / "f"), "overwritten?");
  // The same for a directory entry and a fifo.
  ASSERT_TRUE(unpack({{.name = "d", .type = 'l', .link = outside().string()}}));
  ASSERT_TRUE(unpack({{.name = "d", .type = 'd'}, {.name = "d/x", .data = "in"}}));
  EXPECT_TRUE(S_ISDIR(lstat_of(root() / "d").st_mode));
}

TEST_F(LayerTest, HardLinksOnlyToFilesInsideTheTree) {
  ASSERT_TRUE(unpack({{.name = "base", .data = "b"},
                      {.name = "dir/", .type = 'd'},
                      {.name = "out", .type = 'l', .link = outside().string()}}));
  struct Case {
    const char* target;
    const char* reason;
  } cases[] = {
      {"../outside/sentinel", "path leaves the root"},
      {"/etc/passwd", "absolute name"},
      {"out/sentinel", "leads out of the image's root"},
      {"missing", "hard link to a missing path"},
      {"nodir/missing", "hard link to a missing path"},
      {"dir", "not a regular file"},
      {"out", "not a regular file"},
  };
  for (const auto& c : cases) {
    auto r = unpack({{.name = "link", .type = 'h', .link = c.target}});
    ASSERT_FALSE(r) << c.target;
    EXPECT_NE(message(r).find(c.reason), std::string::npos) << c.target << ": " << message(r);
  }
  EXPECT_FALSE(fs::exists(root() / "link"));
  // A file of an earlier layer is fine.
  auto r = unpack({{.name = "link", .type = 'h', .link = "./base"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_EQ(lstat_of(root() / "link").st_ino, lstat_of(root() / "base").st_ino);
  // Writing the file again later replaces it: the other link keeps its content.
  ASSERT_TRUE(unpack({{.name = "link", .data = "new"}}));
  EXPECT_EQ(test::read_file(root() / "base"), "b");
}

TEST_F(LayerTest, RefusesDeviceNodes) {
  for (char t : {'c', 'b'}) {
    auto r = unpack({{.name = "dev/null", .type = t}});
    ASSERT_FALSE(r);
    EXPECT_NE(message(r).find("device node"), std::string::npos) << message(r);
    EXPECT_NE(message(r).find("dev/null"), std::string::npos) << message(r);
  }
  EXPECT_FALSE(fs::exists(root() / "dev/null"));
}

TEST_F(LayerTest, StripsSetuidUnlessKept) {
  std::vector<TarEntry> e = {{.name = "su", .data = "x", .mode = 04755},
                             {.name = "sg", .data = "x", .mode = 02755},
                             {.name = "shared/", .type = 'd', .mode = 02775}};
  ASSERT_TRUE(apply(make_tar(e)));
  EXPECT_EQ(lstat_of(root() / "su").st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(root() / "sg").st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(root() / "shared").st_mode & 07777, 02775u);  // setgid dir: a group rule
  if (::geteuid() != 0) GTEST_SKIP() << "keeping setuid needs root (chown clears it)";
  ASSERT_TRUE(apply(make_tar(e), "", test::kTar, kDefaultLimits, /*keep_setuid=*/true));
  EXPECT_EQ(lstat_of(root() / "su").st_mode & 07777, 04755u);
  EXPECT_EQ(lstat_of(root() / "sg").st_mode & 07777, 02755u);
}

TEST_F(LayerTest, WhiteoutsRemoveWhatEarlierLayersMade) {
  ASSERT_TRUE(unpack({{.name = "a/x", .data = "x"},
                      {.name = "a/y", .data = "y"},
                      {.name = "b/z", .data = "z"},
                      {.name = "b/deep/w", .data = "w"}}));
  auto r = unpack({{.name = "a/.wh.x"}, {.name = ".wh.b"}, {.name = ".wh.never-there"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_FALSE(fs::exists(root() / "a/x"));
  EXPECT_TRUE(fs::exists(root() / "a/y"));
  EXPECT_FALSE(fs::exists(root() / "b"));
  EXPECT_FALSE(fs::exists(root() / ".wh.b"));  // markers are not made
  EXPECT_FALSE(fs::exists(root() / "a/.wh.x"));
}

TEST_F(LayerTest, AWhiteoutDoesNotRemoveItsOwnLayersEntry) {
  ASSERT_TRUE(unpack({{.name = "f", .data = "old"}}));
  auto r = unpack({{.name = "f", .data = "new"}, {.name = ".wh.f"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_EQ(test::read_file(root() / "f"), "new");
}

TEST_F(LayerTest, AWhiteoutThroughAnEscapingSymlinkIsRefused) {
  ASSERT_TRUE(unpack({{.name = "out", .type = 'l', .link = outside().string()}}));
  auto r = unpack({{.name = "out/.wh.sentinel"}});
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("leads out of the image's root"), std::string::npos) << message(r);
  r = unpack({{.name = "out/.wh..wh..opq"}});
  ASSERT_FALSE(r);
}

TEST_F(LayerTest, OpaqueDirectoriesHideTheLowerContentOnly) {
  ASSERT_TRUE(unpack({{.name = "d/old", .data = "1"},
                      {.name = "d/sub/old2", .data = "2"},
                      {.name = "d/keep/old3", .data = "3"},
                      {.name = "other/stays", .data = "4"}}));
  // The marker first (as most tools write it), then the new content.
  auto r = unpack(
      {{.name = "d/", .type = 'd'}, {.name = "d/.wh..wh..opq"}, {.name = "d/new", .data = "n"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_FALSE(fs::exists(root() / "d/old"));
  EXPECT_FALSE(fs::exists(root() / "d/sub"));
  EXPECT_FALSE(fs::exists(root() / "d/keep"));
  EXPECT_EQ(test::read_file(root() / "d/new"), "n");
  EXPECT_TRUE(fs::exists(root() / "other/stays"));
  EXPECT_FALSE(fs::exists(root() / "d/.wh..wh..opq"));
}

TEST_F(LayerTest, OpaqueAfterTheLayersOwnEntriesKeepsThem) {
  ASSERT_TRUE(unpack({{.name = "d/old", .data = "1"}, {.name = "d/sub/old2", .data = "2"}}));
  auto r = unpack({{.name = "d/new", .data = "n"},
                   {.name = "d/sub/new2", .data = "m"},
                   {.name = "d/.wh..wh..opq"}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_FALSE(fs::exists(root() / "d/old"));
  EXPECT_FALSE(fs::exists(root() / "d/sub/old2"));  // under a dir this layer only passed through
  EXPECT_EQ(test::read_file(root() / "d/new"), "n");
  EXPECT_EQ(test::read_file(root() / "d/sub/new2"), "m");
}

TEST_F(LayerTest, ReplacesAcrossTypes) {
  ASSERT_TRUE(unpack({{.name = "x/inner", .data = "i"}, {.name = "y", .data = "file"}}));
  auto r = unpack({{.name = "x", .data = "now a file"}, {.name = "y/", .type = 'd'}});
  ASSERT_TRUE(r) << message(r);
  EXPECT_EQ(test::read_file(root() / "x"), "now a file");
  EXPECT_TRUE(S_ISDIR(lstat_of(root() / "y").st_mode));
}

TEST_F(LayerTest, ALayerLargerThanTheLimitStopsEarly) {
  Limits l = kDefaultLimits;
  l.max_layer_bytes = 1 << 20;
  std::string tar = make_tar({{.name = "big", .data = std::string(4 << 20, 'x')}});
  auto r = apply(tar, "", test::kTar, l);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_NE(message(r).find("layer is larger than"), std::string::npos) << message(r);
  EXPECT_LE(fs::file_size(root() / "big"), (1u << 20) + (256u << 10));  // stopped early
}

TEST_F(LayerTest, TheTotalAcrossLayersIsLimited) {
  Limits l = kDefaultLimits;
  l.max_total_bytes = 3 << 20;
  std::string tar = make_tar({{.name = "a", .data = std::string(2 << 20, 'a')}});
  ASSERT_TRUE(apply(tar, "", test::kTar, l));
  tar = make_tar({{.name = "b", .data = std::string(2 << 20, 'b')}});
  auto r = apply(tar, "", test::kTar, l);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_NE(message(r).find("image is larger than"), std::string::npos) << message(r);
}

TEST_F(LayerTest, AGzipBombStopsEarly) {
  std::vector<TarEntry> e = {{.name = "zeros", .data = std::string(64 << 20, '\0')}};
  std::string plain = make_tar(e);
  std::string gz = make_tar(e, Compression::kGzip);
  ASSERT_LT(gz.size(), 1u << 20);
  auto r = apply(gz, plain, test::kTarGzip);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_NE(message(r).find("decompression bomb"), std::string::npos) << message(r);
  EXPECT_LT(fs::file_size(root() / "zeros"), 40u << 20);
}

TEST_F(LayerTest, TheEntryCountIsLimited) {
  Limits l = kDefaultLimits;
  l.max_entries = 3;
  auto r = apply(make_tar({{.name = "1"}, {.name = "2"}}), "", test::kTar, l);
  ASSERT_TRUE(r) << message(r);
  r = apply(make_tar({{.name = "3"}, {.name = "4"}}), "", test::kTar, l);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_NE(message(r).find("more than 3 entries"), std::string::npos) << message(r);
}

TEST_F(LayerTest, DigestAndDiffIdMismatchesAreRefused) {
  std::string tar = make_tar({{.name = "f", .data = "x"}});
  fs::path blob = dir_.path() / "blob";
  test::write_file(blob, tar);
  Layer good{sha256_digest(tar), test::kTar, tar.size(), sha256_digest(tar), blob};
  Layer bad_digest = good;
  bad_digest.digest = sha256_digest("other");
  auto r = apply_layer(blob, bad_digest, root_fd_.get(), kDefaultLimits, totals_);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("not its digest"), std::string::npos) << r.error().message();
  Layer bad_diff = good;
  bad_diff.diff_id = sha256_digest("other");
  r = apply_layer(blob, bad_diff, root_fd_.get(), kDefaultLimits, totals_);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("not the config's diff_id"), std::string::npos)
      << r.error().message();
  Layer bad_size = good;
  bad_size.size += 1;
  r = apply_layer(blob, bad_size, root_fd_.get(), kDefaultLimits, totals_);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("the manifest says"), std::string::npos)
      << r.error().message();
  ASSERT_TRUE(apply_layer(blob, good, root_fd_.get(), kDefaultLimits, totals_));
}

TEST_F(LayerTest, UnknownMediaTypesAndNonTarBlobsAreRefused) {
  std::string tar = make_tar({{.name = "f", .data = "x"}});
  auto r = apply(tar, "", "application/vnd.example.layer.v1.tar+lz4");
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("unknown media type"), std::string::npos) << message(r);
  r = apply(std::string(4096, 'j'));
  ASSERT_FALSE(r);
  r = apply("");
  ASSERT_FALSE(r);
  std::string gz = make_tar({{.name = "f", .data = std::string(1 << 20, 'q')}}, Compression::kGzip);
  r = apply(gz.substr(0, gz.size() / 2), make_tar({{.name = "f"}}), test::kTarGzip);
  ASSERT_FALSE(r) << "a truncated gzip stream";
}

TEST_F(LayerTest, ErrorsNameTheLayerAndTheEntry) {
  auto r = unpack({{.name = "ok", .data = "x"}, {.name = "dev/sda", .type = 'b'}});
  ASSERT_FALSE(r);
  EXPECT_TRUE(message(r).starts_with("layer sha256:")) << message(r);
  EXPECT_NE(message(r).find("entry \"dev/sda\": a device node"), std::string::npos) << message(r);
}

TEST(LayerMediaTypes, KnownOnes) {
  EXPECT_TRUE(known_layer_media_type(""));
  EXPECT_TRUE(known_layer_media_type("application/vnd.oci.image.layer.v1.tar+zstd"));
  EXPECT_TRUE(known_layer_media_type("application/vnd.docker.image.rootfs.diff.tar.gzip"));
  EXPECT_FALSE(known_layer_media_type("application/vnd.oci.image.layer.v1.tar+bz2"));
  EXPECT_FALSE(known_layer_media_type("application/octet-stream"));
}

}  // namespace
}  // namespace space::image
