// Tar writing and untrusted extraction for `space cp` / `space image import`: a directory
// round-trips (files, dirs, symlinks, modes), and archives crafted by a hostile sandbox cannot
// write outside the destination, plant setuid files or create device nodes.
#include "cli/tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace space::cli {
namespace {

namespace fs = std::filesystem;

class TarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-tar-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "dest");
    fs::create_directories(root_ / "outside");
  }
  void TearDown() override { fs::remove_all(root_); }

  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  struct Item {
    std::string name;
    mode_t type = AE_IFREG;
    mode_t perm = 0644;
    std::string data;
    std::string link;  // symlink target
    std::string hardlink;
  };
  // A tar archive built entry by entry, so it can hold what a well-behaved writer never makes.
  static std::string make_tar(const std::vector<Item>& items) {
    archive* a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    std::vector<char> buf(1 << 20);
    size_t used = 0;
    archive_write_open_memory(a, buf.data(), buf.size(), &used);
    for (const auto& it : items) {
      archive_entry* e = archive_entry_new();
      archive_entry_set_pathname(e, it.name.c_str());
      archive_entry_set_filetype(e, it.type);
      archive_entry_set_perm(e, it.perm);
      if (!it.link.empty()) archive_entry_set_symlink(e, it.link.c_str());
      if (!it.hardlink.empty()) archive_entry_set_hardlink(e, it.hardlink.c_str());
      archive_entry_set_size(e, static_cast<la_int64_t>(it.data.size()));
      if (it.type == AE_IFCHR) archive_entry_set_rdev(e, makedev(1, 3));
      archive_write_header(a, e);
      if (!it.data.empty()) archive_write_data(a, it.data.data(), it.data.size());
      archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    return std::string(buf.data(), used);
  }

  Result<uint64_t> extract(const std::string& tar, size_t piece = 7) {
    size_t pos = 0;
    return extract_tar(root_ / "dest", [&](char* out, size_t n) -> Result<size_t> {
      size_t k = std::min({n, piece, tar.size() - pos});
      std::memcpy(out, tar.data() + pos, k);
      pos += k;
      return k;
    });
  }

  fs::path root_;
};

TEST_F(TarTest, DirectoryRoundTrips) {
  fs::path src = root_ / "src";
  fs::create_directories(src / "sub" / "deeper");
  std::ofstream(src / "a.txt") << "alpha";
  std::ofstream(src / "sub" / "run.sh") << "#!/bin/sh\necho hi\n";
  fs::permissions(src / "sub" / "run.sh", fs::perms(0750));
  fs::create_symlink("../a.txt", src / "sub" / "link");
  std::string big(300000, 'b');
  std::ofstream(src / "sub" / "deeper" / "big") << big;

  std::string tar;
  ASSERT_TRUE(write_tar(src, [&](std::string_view b) -> Result<void> {
    tar.append(b);
    return {};
  }));
  fs::path cwd = fs::current_path();
  auto n = extract(tar, 4096);
  ASSERT_TRUE(n) << n.error().message();
  EXPECT_EQ(*n, 6u);
  EXPECT_EQ(fs::current_path(), cwd) << "extraction must restore the working directory";
  fs::path d = root_ / "dest";
  EXPECT_EQ(read(d / "a.txt"), "alpha");
  EXPECT_EQ(read(d / "sub" / "run.sh"), "#!/bin/sh\necho hi\n");
  EXPECT_EQ(fs::status(d / "sub" / "run.sh").permissions() & fs::perms::all, fs::perms(0750));
  EXPECT_TRUE(fs::is_symlink(d / "sub" / "link"));
  EXPECT_EQ(fs::read_symlink(d / "sub" / "link"), "../a.txt");
  EXPECT_EQ(read(d / "sub" / "deeper" / "big"), big);
}

TEST_F(TarTest, RefusesDotDot) {
  auto r =
      extract(make_tar({{"ok.txt", AE_IFREG, 0644, "fine"}, {"../evil", AE_IFREG, 0644, "x"}}));
  EXPECT_FALSE(r);
  EXPECT_FALSE(fs::exists(root_ / "evil"));
}

TEST_F(TarTest, RefusesAbsolutePaths) {
  fs::path target = root_ / "outside" / "abs";
  auto r = extract(make_tar({{target.native(), AE_IFREG, 0644, "x"}}));
  EXPECT_FALSE(r);
  EXPECT_FALSE(fs::exists(target));
}

TEST_F(TarTest, NeverWritesThroughSymlinks) {
  // libarchive (SECURE_SYMLINKS + UNLINK) replaces a symlink met on the way by a real
  // directory instead of following it: whatever the outcome, nothing lands outside.
  auto r = extract(make_tar({{"link", AE_IFLNK, 0777, "", (root_ / "outside").native()},
                             {"link/pwned", AE_IFREG, 0644, "x"}}));
  EXPECT_FALSE(fs::exists(root_ / "outside" / "pwned"));
  if (r) {
    EXPECT_FALSE(fs::is_symlink(root_ / "dest" / "link"));
    EXPECT_EQ(read(root_ / "dest" / "link" / "pwned"), "x");
  }

  // A symlink already in the destination is not followed either.
  fs::remove_all(root_ / "dest");
  fs::create_directories(root_ / "dest");
  fs::create_symlink(root_ / "outside", root_ / "dest" / "pre");
  (void)extract(make_tar({{"pre/pwned2", AE_IFREG, 0644, "x"}}));
  EXPECT_FALSE(fs::exists(root_ / "outside" / "pwned2"));
  EXPECT_TRUE(fs::is_empty(root_ / "outside"));
}

TEST_F(TarTest, RefusesHardLinksOutside) {
  EXPECT_FALSE(extract(make_tar({{"h", AE_IFREG, 0644, "", "", "../outside/secret"}})));
  EXPECT_FALSE(extract(make_tar({{"h", AE_IFREG, 0644, "", "", "/etc/passwd"}})));
  EXPECT_FALSE(fs::exists(root_ / "dest" / "h"));
}

TEST_F(TarTest, DropsSetuidAndSkipsDevices) {
  auto r = extract(make_tar({{"suid", AE_IFREG, 04755, "x"},
                             {"sgid", AE_IFREG, 02755, "x"},
                             {"null", AE_IFCHR, 0666, ""},
                             {"fifo", AE_IFIFO, 0644, ""}}));
  ASSERT_TRUE(r) << r.error().message();
  struct stat st;
  ASSERT_EQ(::stat((root_ / "dest" / "suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((root_ / "dest" / "sgid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_FALSE(fs::exists(root_ / "dest" / "null"));
  EXPECT_FALSE(fs::exists(root_ / "dest" / "fifo"));
}

TEST_F(TarTest, GarbageIsAnErrorNotACrash) {
  EXPECT_FALSE(extract(std::string(5000, '\x42')));
  std::string tar = make_tar({{"a", AE_IFREG, 0644, std::string(100000, 'a')}});
  EXPECT_FALSE(extract(tar.substr(0, tar.size() / 2)));  // truncated
}

}  // namespace
}  // namespace space::cli
