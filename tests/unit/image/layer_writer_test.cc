// upper_layer() and copy_layer(): each layer is written to a tar, then applied with the real
// apply_layer() onto a tree (box/root) that may hold what earlier layers made, and the tree is
// checked; the tars themselves are read back with libarchive where the entry matters (a
// whiteout, a hard link, an owner). Refusals try the hostile input and check the reason.
#include "image/layer_writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "common/fd.h"
#include "image_fixtures.h"

namespace space::image {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kBase = 100000;

struct ReadEntry {
  std::string name;
  unsigned type = 0;  // AE_IFREG, ...
  unsigned perm = 0;
  int64_t uid = 0, gid = 0;
  std::string symlink, hardlink;
  int64_t size = 0;
};

std::vector<ReadEntry> read_tar(const fs::path& p) {
  std::vector<ReadEntry> out;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_filename(a, p.c_str(), 10240), ARCHIVE_OK) << p;
  archive_entry* e = nullptr;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    ReadEntry r;
    r.name = archive_entry_pathname(e);
    if (r.name.ends_with('/')) r.name.pop_back();  // libarchive's spelling of a directory
    r.type = archive_entry_filetype(e);
    r.perm = archive_entry_perm(e);
    r.uid = archive_entry_uid(e);
    r.gid = archive_entry_gid(e);
    if (const char* s = archive_entry_symlink(e)) r.symlink = s;
    if (const char* h = archive_entry_hardlink(e)) r.hardlink = h;
    r.size = archive_entry_size(e);
    out.push_back(r);
  }
  archive_read_free(a);
  return out;
}

const ReadEntry* find(const std::vector<ReadEntry>& v, const std::string& name) {
  for (const auto& e : v)
    if (e.name == name) return &e;
  return nullptr;
}

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

bool exists_nofollow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

void chown_nofollow(const fs::path& p, uid_t uid, gid_t gid) {
  ASSERT_EQ(::lchown(p.c_str(), uid, gid), 0) << p;
}

class LayerWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* d : {"root", "upper", "ctx", "outside"}) fs::create_directories(box() / d);
    test::write_file(box() / "outside/secret", "host secret");
  }
  fs::path box() const { return dir_.path(); }
  fs::path root() const { return box() / "root"; }
  fs::path upper() const { return box() / "upper"; }
  fs::path ctx() const { return box() / "ctx"; }
  fs::path tar() const { return box() / "layer.tar"; }

  static UniqueFd open_dir(const fs::path& p) {
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(fd.valid()) << p;
    return fd;
  }

  Result<LayerStats> write_upper(const std::set<std::string>& skip = {},
                                 const Limits& limits = kDefaultLimits) {
    UniqueFd fd = open_dir(upper());
    return upper_layer(fd.get(), kBase, skip, tar(), limits);
  }
  Result<LayerStats> write_copy(const CopySpec& spec, const Limits& limits = kDefaultLimits) {
    UniqueFd fd = open_dir(ctx());
    return copy_layer(fd.get(), spec, tar(), limits);
  }
  Result<std::string> digest(const std::vector<std::string>& sources) {
    UniqueFd fd = open_dir(ctx());
    return copy_sources_digest(fd.get(), sources);
  }
  // Applies the tar just written onto root, as the build does.
  Result<void> apply() {
    UniqueFd fd = open_dir(root());
    Totals totals;
    return apply_layer(tar(), Layer{}, fd.get(), kDefaultLimits, totals);
  }

  template <class T>
  static std::string message(const Result<T>& r) {
    return r ? "" : r.error().message();
  }

  test_support::TempDir dir_{"space-layer-writer"};
};

// ---- upper_layer ---------------------------------------------------------------------------

TEST_F(LayerWriterTest, UpperRoundTripsNewChangedDeletedAndOwners) {
  // What the earlier layers made.
  test::write_file(root() / "etc/old", "old");
  test::write_file(root() / "gone", "x");
  test::write_file(root() / "gonedir/inner", "x");
  // What the step changed.
  test::write_file(upper() / "etc/old", "changed");
  test::write_file(upper() / "etc/new", "new");
  fs::permissions(upper() / "etc/new", fs::perms(0600));
  ASSERT_EQ(::mknod((upper() / "gone").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
  ASSERT_EQ(::mknod((upper() / "gonedir").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
  ASSERT_EQ(::mknod((upper() / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);  // left out
  ASSERT_EQ(::mkfifo((upper() / "fifo").c_str(), 0640), 0);
  fs::create_symlink("/etc/old", upper() / "abs");            // a target is data
  fs::create_symlink(box() / "outside", upper() / "escape");  // never walked into
  test::write_file(upper() / "hl1", "linked");
  fs::create_hard_link(upper() / "hl1", upper() / "hl2");
  test::write_file(upper() / "home/user/file", "mine");
  chown_nofollow(upper() / "home/user/file", kBase + 1000, kBase + 1001);
  chown_nofollow(upper() / "home/user", kBase + 1000, kBase + 1000);
  chown_nofollow(upper() / "abs", kBase + 7, kBase + 7);
  test::write_file(upper() / "foreign", "x");
  chown_nofollow(upper() / "foreign", kBase + 70000, 5);  // outside the sandbox's range
  test::write_file(upper() / "etc/space/ca.pem", "spaced's own");
  test::write_file(upper() / "skipdir/a/b", "skip me");

  auto stats = write_upper({"etc/space", "/skipdir/"});
  ASSERT_TRUE(stats) << message(stats);
  auto entries = read_tar(tar());
  EXPECT_EQ(stats->entries, entries.size());
  EXPECT_EQ(stats->bytes, 7u + 3 + 6 + 4 + 1);  // changed, new, linked, mine, x

  // The tar: whiteouts as empty ".wh." files, a hard link to the first name, shifted owners.
  ASSERT_NE(find(entries, ".wh.gone"), nullptr);
  EXPECT_EQ(find(entries, ".wh.gone")->type, unsigned{AE_IFREG});
  EXPECT_EQ(find(entries, ".wh.gone")->size, 0);
  ASSERT_NE(find(entries, "hl2"), nullptr);
  EXPECT_EQ(find(entries, "hl2")->hardlink, "hl1");
  EXPECT_EQ(find(entries, "abs")->uid, 7);
  EXPECT_EQ(find(entries, "foreign")->uid, 65534);
  EXPECT_EQ(find(entries, "foreign")->gid, 65534);
  EXPECT_EQ(find(entries, "null"), nullptr);
  EXPECT_EQ(find(entries, "etc/space"), nullptr);
  EXPECT_EQ(find(entries, "etc/space/ca.pem"), nullptr);
  EXPECT_EQ(find(entries, "skipdir"), nullptr);
  EXPECT_EQ(find(entries, "skipdir/a/b"), nullptr);
  for (const auto& e : entries) EXPECT_FALSE(e.name.starts_with("escape/")) << e.name;
  // Sorted, parents first.
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  EXPECT_EQ(names.front(), "abs");
  EXPECT_LT(std::find(names.begin(), names.end(), "home"),
            std::find(names.begin(), names.end(), "home/user/file"));

  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "etc/old"), "changed");
  EXPECT_EQ(test::read_file(root() / "etc/new"), "new");
  EXPECT_EQ(lstat_of(root() / "etc/new").st_mode & 07777, 0600u);
  EXPECT_FALSE(exists_nofollow(root() / "gone"));
  EXPECT_FALSE(exists_nofollow(root() / "gonedir"));
  EXPECT_FALSE(exists_nofollow(root() / ".wh.gone"));
  EXPECT_FALSE(exists_nofollow(root() / "null"));
  EXPECT_TRUE(S_ISFIFO(lstat_of(root() / "fifo").st_mode));
  EXPECT_EQ(fs::read_symlink(root() / "abs"), "/etc/old");
  EXPECT_EQ(fs::read_symlink(root() / "escape"), box() / "outside");
  EXPECT_EQ(lstat_of(root() / "hl1").st_ino, lstat_of(root() / "hl2").st_ino);
  EXPECT_EQ(lstat_of(root() / "home/user/file").st_uid, 1000u);
  EXPECT_EQ(lstat_of(root() / "home/user/file").st_gid, 1001u);
  EXPECT_EQ(lstat_of(root() / "home/user").st_uid, 1000u);
  EXPECT_EQ(lstat_of(root() / "foreign").st_uid, 65534u);
  EXPECT_EQ(lstat_of(root() / "etc/new").st_uid, 65534u);  // root:root on the host: not mapped
  EXPECT_FALSE(exists_nofollow(root() / "etc/space"));
  EXPECT_FALSE(exists_nofollow(root() / "skipdir"));
  EXPECT_EQ(test::read_file(box() / "outside/secret"), "host secret");
}

TEST_F(LayerWriterTest, UpperOpaqueDirectoryHidesWhatWasBelow) {
  test::write_file(root() / "opq/old", "lower");
  test::write_file(upper() / "opq/new", "upper");
  test::write_file(upper() / "plain/x", "x");
  if (::setxattr((upper() / "opq").c_str(), "user.overlay.opaque", "y", 1, 0) != 0)
    GTEST_SKIP() << "the temp file system refuses user xattrs: " << strerror(errno);
  // Another value than "y" is not opaque.
  ASSERT_EQ(::setxattr((upper() / "plain").c_str(), "user.overlay.opaque", "n", 1, 0), 0);
  test::write_file(root() / "plain/kept", "lower");
  auto stats = write_upper();
  ASSERT_TRUE(stats) << message(stats);
  auto entries = read_tar(tar());
  EXPECT_NE(find(entries, "opq/.wh..wh..opq"), nullptr);
  EXPECT_EQ(find(entries, "plain/.wh..wh..opq"), nullptr);
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_FALSE(exists_nofollow(root() / "opq/old"));
  EXPECT_EQ(test::read_file(root() / "opq/new"), "upper");
  EXPECT_EQ(test::read_file(root() / "plain/kept"), "lower");
}

TEST_F(LayerWriterTest, UpperTrustedOpaqueXattrToo) {
  test::write_file(root() / "opq/old", "lower");
  test::write_file(upper() / "opq/new", "upper");
  if (::setxattr((upper() / "opq").c_str(), "trusted.overlay.opaque", "y", 1, 0) != 0)
    GTEST_SKIP() << "trusted xattrs refused here: " << strerror(errno);
  ASSERT_TRUE(write_upper());
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_FALSE(exists_nofollow(root() / "opq/old"));
  EXPECT_EQ(test::read_file(root() / "opq/new"), "upper");
}

TEST_F(LayerWriterTest, UpperLongAndNonAsciiNamesRoundTrip) {
  std::string long_dir(120, 'd');
  std::string long_name = long_dir + "/" + std::string(200, 'n');
  test::write_file(upper() / long_name, "long");
  test::write_file(upper() / "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac", "utf8");
  ASSERT_TRUE(write_upper());
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / long_name), "long");
  EXPECT_EQ(test::read_file(root() / "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac"), "utf8");
}

TEST_F(LayerWriterTest, UpperIsReproducible) {
  test::write_file(upper() / "b/z", "zz");
  test::write_file(upper() / "a", "aa");
  test::write_file(upper() / "b/a", "ba");
  ASSERT_TRUE(write_upper());
  std::string first = test::read_file(tar());
  ASSERT_TRUE(write_upper());
  EXPECT_EQ(test::read_file(tar()), first);
}

TEST_F(LayerWriterTest, UpperRefusesAFileNamedLikeAWhiteout) {
  test::write_file(upper() / "dir/.wh.victim", "");
  auto r = write_upper();
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("dir/.wh.victim"), std::string::npos) << message(r);
  EXPECT_NE(message(r).find("mark deletions"), std::string::npos) << message(r);
  EXPECT_FALSE(fs::exists(tar()));
}

TEST_F(LayerWriterTest, UpperRefusesOverlayMetacopyAndRedirects) {
  test::write_file(upper() / "meta", "");
  if (::setxattr((upper() / "meta").c_str(), "user.overlay.metacopy", "", 0, 0) != 0)
    GTEST_SKIP() << "the temp file system refuses user xattrs: " << strerror(errno);
  auto r = write_upper();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_NE(message(r).find("\"meta\": an overlayfs metacopy file"), std::string::npos)
      << message(r);
  fs::remove(upper() / "meta");
  fs::create_directories(upper() / "moved");
  ASSERT_EQ(::setxattr((upper() / "moved").c_str(), "user.overlay.redirect", "/old", 4, 0), 0);
  r = write_upper();
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("redirect_dir"), std::string::npos) << message(r);
}

TEST_F(LayerWriterTest, UpperLimits) {
  for (const char* n : {"a", "b", "c"}) test::write_file(upper() / n, std::string(100, 'x'));
  Limits small = kDefaultLimits;
  small.max_layer_bytes = 250;
  auto r = write_upper({}, small);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_EQ(message(r),
            "the step's changes are larger than 250 bytes (images.max_layer in spaced's config)");
  EXPECT_FALSE(fs::exists(tar()));
  // File data within the limit, the tar (headers) beyond it: refused too.
  small.max_layer_bytes = 1000;
  r = write_upper({}, small);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  small = kDefaultLimits;
  small.max_entries = 2;
  r = write_upper({}, small);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_NE(message(r).find("more than 2 entries (images.max_entries"), std::string::npos);
  small.max_entries = 3;
  auto ok = write_upper({}, small);
  ASSERT_TRUE(ok) << message(ok);
  EXPECT_EQ(ok->entries, 3u);
  EXPECT_EQ(ok->bytes, 300u);
}

// ---- copy_layer ----------------------------------------------------------------------------

TEST_F(LayerWriterTest, CopyFileToFile) {
  test::write_file(ctx() / "a.txt", "alpha");
  fs::permissions(ctx() / "a.txt", fs::perms(0751));
  auto stats = write_copy({.sources = {"a.txt"}, .dest = "/app/b.txt"});
  ASSERT_TRUE(stats) << message(stats);
  EXPECT_EQ(stats->entries, 1u);
  EXPECT_EQ(stats->bytes, 5u);
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "app/b.txt"), "alpha");
  EXPECT_EQ(lstat_of(root() / "app/b.txt").st_mode & 07777, 0751u);
  EXPECT_EQ(lstat_of(root() / "app").st_mode & 07777, 0755u);  // made by apply_layer
}

TEST_F(LayerWriterTest, CopyFileIntoDirectory) {
  test::write_file(ctx() / "sub/a.txt", "alpha");
  ASSERT_TRUE(write_copy({.sources = {"sub/a.txt"}, .dest = "/app/"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "app/a.txt"), "alpha");
  // No trailing slash, but the image has a directory there.
  fs::create_directories(root() / "opt");
  ASSERT_TRUE(write_copy({.sources = {"sub/a.txt"}, .dest = "/opt", .dest_is_dir = true}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "opt/a.txt"), "alpha");
}

TEST_F(LayerWriterTest, CopyDirectoryCopiesItsContents) {
  test::write_file(ctx() / "src/x", "x");
  test::write_file(ctx() / "src/sub/y", "y");
  fs::create_symlink("x", ctx() / "src/link");
  fs::create_symlink("/etc/passwd", ctx() / "src/abs");  // copied as a link, never followed
  fs::permissions(ctx() / "src", fs::perms(0700));
  ASSERT_TRUE(write_copy({.sources = {"src"}, .dest = "/dst"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "dst/x"), "x");
  EXPECT_EQ(test::read_file(root() / "dst/sub/y"), "y");
  EXPECT_EQ(fs::read_symlink(root() / "dst/link"), "x");
  EXPECT_EQ(fs::read_symlink(root() / "dst/abs"), "/etc/passwd");
  EXPECT_FALSE(exists_nofollow(root() / "dst/src"));
  EXPECT_EQ(lstat_of(root() / "dst").st_mode & 07777, 0700u);  // the source directory's
  // "." is the context itself.
  test::write_file(ctx() / "top", "t");
  ASSERT_TRUE(write_copy({.sources = {"."}, .dest = "/all/"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "all/top"), "t");
  EXPECT_EQ(test::read_file(root() / "all/src/sub/y"), "y");
}

TEST_F(LayerWriterTest, CopyGlobs) {
  for (const char* n : {"a.py", "b.py", ".hidden.py", "c.txt", "pkg/d.py", "pkg/e.txt"})
    test::write_file(ctx() / n, n);
  // Several matches: into the directory even without a trailing slash.
  ASSERT_TRUE(write_copy({.sources = {"*.py"}, .dest = "/app"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "app/a.py"), "a.py");
  EXPECT_EQ(test::read_file(root() / "app/b.py"), "b.py");
  EXPECT_EQ(test::read_file(root() / "app/.hidden.py"), ".hidden.py");  // '*' matches dotfiles
  EXPECT_FALSE(exists_nofollow(root() / "app/c.txt"));
  // Per component, and ?/[] too.
  ASSERT_TRUE(write_copy({.sources = {"p?g/[d]*"}, .dest = "/one"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "one"), "pkg/d.py");  // a single match: a file at dest
}

TEST_F(LayerWriterTest, CopyChownAndChmodApplyToEveryEntry) {
  test::write_file(ctx() / "d/f", "f");
  test::write_file(ctx() / "d/sub/g", "g");
  ASSERT_TRUE(
      write_copy({.sources = {"d"}, .dest = "/d", .uid = 1000, .gid = 1001, .chmod = 0750}));
  for (const auto& e : read_tar(tar())) {
    EXPECT_EQ(e.uid, 1000) << e.name;
    EXPECT_EQ(e.gid, 1001) << e.name;
    EXPECT_EQ(e.perm, 0750u) << e.name;
  }
  ASSERT_TRUE(apply()) << message(apply());
  for (const char* p : {"d", "d/f", "d/sub", "d/sub/g"}) {
    struct stat st = lstat_of(root() / p);
    EXPECT_EQ(st.st_uid, 1000u) << p;
    EXPECT_EQ(st.st_gid, 1001u) << p;
    EXPECT_EQ(st.st_mode & 07777, 0750u) << p;
  }
}

TEST_F(LayerWriterTest, CopyRerootsDotDotAndAbsoluteSources) {
  test::write_file(ctx() / "a.txt", "in the context");
  test::write_file(box() / "a.txt", "next to the context");
  ASSERT_TRUE(write_copy({.sources = {"../a.txt"}, .dest = "/x"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "x"), "in the context");
  ASSERT_TRUE(write_copy({.sources = {"/a.txt"}, .dest = "/y"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "y"), "in the context");
}

TEST_F(LayerWriterTest, CopyFollowsSymlinksOnlyInsideTheContext) {
  test::write_file(ctx() / "real/file", "real");
  fs::create_symlink("real", ctx() / "alias");
  fs::create_symlink("real/file", ctx() / "filelink");
  // Inside: followed in the source path and as the source itself (Docker's COPY does).
  ASSERT_TRUE(write_copy({.sources = {"alias/file", "filelink"}, .dest = "/in/"}));
  ASSERT_TRUE(apply()) << message(apply());
  EXPECT_EQ(test::read_file(root() / "in/file"), "real");
  EXPECT_TRUE(S_ISREG(lstat_of(root() / "in/filelink").st_mode));
  EXPECT_EQ(test::read_file(root() / "in/filelink"), "real");

  // Out: absolute, and ".." above the context; in the path, as the source, under a glob.
  fs::create_symlink(box() / "outside", ctx() / "abs");
  fs::create_symlink("../outside", ctx() / "up");
  fs::create_symlink("../outside/secret", ctx() / "secretlink");
  for (std::string src : {"abs/secret", "up/secret", "up", "secretlink", "up/*", "secret*"}) {
    fs::remove(tar());
    auto r = write_copy({.sources = {src}, .dest = "/stolen"});
    ASSERT_FALSE(r) << src;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << src;
    EXPECT_NE(message(r).find("leads out of the build context"), std::string::npos)
        << src << ": " << message(r);
    EXPECT_FALSE(fs::exists(tar())) << src;
    auto d = digest({src});
    ASSERT_FALSE(d) << src;
    EXPECT_NE(message(d).find("leads out of the build context"), std::string::npos) << src;
  }
  EXPECT_FALSE(exists_nofollow(root() / "stolen"));
}

TEST_F(LayerWriterTest, CopyRefusesSourcesThatMatchNothing) {
  test::write_file(ctx() / "a.py", "a");
  for (std::string src : {"*.rs", "missing.txt", "nodir/*.py", "a.py/x"}) {
    auto r = write_copy({.sources = {"a.py", src}, .dest = "/app/"});
    ASSERT_FALSE(r) << src;
    EXPECT_EQ(message(r), "COPY: no file matches \"" + src + "\" in the build context");
    EXPECT_FALSE(digest({src})) << src;
  }
}

TEST_F(LayerWriterTest, CopyRefusesWhiteoutNames) {
  test::write_file(ctx() / "d/.wh.passwd", "");
  auto r = write_copy({.sources = {"d"}, .dest = "/etc"});
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("d/.wh.passwd"), std::string::npos) << message(r);
  r = write_copy({.sources = {"d/.wh.*"}, .dest = "/etc/"});
  ASSERT_FALSE(r);
  EXPECT_NE(message(r).find("mark deletions"), std::string::npos) << message(r);
}

TEST_F(LayerWriterTest, CopyLimits) {
  test::write_file(ctx() / "d/a", std::string(100, 'a'));
  test::write_file(ctx() / "d/b", std::string(100, 'b'));
  Limits small = kDefaultLimits;
  small.max_layer_bytes = 150;
  auto r = write_copy({.sources = {"d"}, .dest = "/d"}, small);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_EQ(message(r),
            "COPY: the sources are larger than 150 bytes (images.max_layer in spaced's config)");
  EXPECT_FALSE(fs::exists(tar()));
  small = kDefaultLimits;
  small.max_entries = 2;  // d, d/a, d/b
  r = write_copy({.sources = {"d"}, .dest = "/d"}, small);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kPayloadTooLarge);
  EXPECT_NE(message(r).find("images.max_entries"), std::string::npos);
  small.max_entries = 3;
  auto ok = write_copy({.sources = {"d"}, .dest = "/d"}, small);
  ASSERT_TRUE(ok) << message(ok);
  EXPECT_EQ(ok->entries, 3u);
  EXPECT_EQ(ok->bytes, 200u);
}

// ---- copy_sources_digest -------------------------------------------------------------------

TEST_F(LayerWriterTest, DigestFollowsContentModeAndNamesOnly) {
  test::write_file(ctx() / "src/a", "a");
  test::write_file(ctx() / "src/sub/b", "b");
  fs::create_symlink("a", ctx() / "src/link");
  auto d0 = digest({"src"});
  ASSERT_TRUE(d0) << message(d0);
  EXPECT_TRUE(d0->starts_with("sha256:"));
  EXPECT_EQ(*digest({"src"}), *d0);

  // Owners and times do not count.
  chown_nofollow(ctx() / "src/a", 1234, 1234);
  struct timespec ts[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (ctx() / "src/sub/b").c_str(), ts, 0), 0);
  EXPECT_EQ(*digest({"src"}), *d0);

  // Content, mode, a name, a link's target, a new file: each does.
  test::write_file(ctx() / "src/a", "A");
  auto d1 = *digest({"src"});
  EXPECT_NE(d1, *d0);
  test::write_file(ctx() / "src/a", "a");
  EXPECT_EQ(*digest({"src"}), *d0);
  fs::perms was = fs::symlink_status(ctx() / "src/a").permissions();
  fs::permissions(ctx() / "src/a", fs::perms(0600));
  EXPECT_NE(*digest({"src"}), *d0);
  fs::permissions(ctx() / "src/a", was);
  EXPECT_EQ(*digest({"src"}), *d0);
  fs::rename(ctx() / "src/sub/b", ctx() / "src/sub/c");
  EXPECT_NE(*digest({"src"}), *d0);
  fs::rename(ctx() / "src/sub/c", ctx() / "src/sub/b");
  EXPECT_EQ(*digest({"src"}), *d0);
  fs::remove(ctx() / "src/link");
  fs::create_symlink("sub/b", ctx() / "src/link");
  EXPECT_NE(*digest({"src"}), *d0);
  fs::remove(ctx() / "src/link");
  fs::create_symlink("a", ctx() / "src/link");
  EXPECT_EQ(*digest({"src"}), *d0);
  test::write_file(ctx() / "src/new", "");
  EXPECT_NE(*digest({"src"}), *d0);
  fs::remove(ctx() / "src/new");
  EXPECT_EQ(*digest({"src"}), *d0);
  // Files outside the sources do not count; a glob's new match does.
  test::write_file(ctx() / "other", "o");
  EXPECT_EQ(*digest({"src"}), *d0);
  auto g0 = *digest({"src/*"});
  test::write_file(ctx() / "src/z", "z");
  EXPECT_NE(*digest({"src/*"}), g0);
}

}  // namespace
}  // namespace space::image
