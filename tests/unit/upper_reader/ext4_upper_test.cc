// space-upper-reader's walk of a writable disk (upper_reader/ext4_upper.h) and its seccomp
// policy (confine.h), on real ext4 images made the way the qemu runtime makes its writable disk
// (mke2fs, no journal) and then edited with debugfs into what a guest's overlay leaves there:
// whiteouts (character devices 0:0), opaque directories (trusted.overlay.opaque), and what a
// hostile guest could write instead: a directory cycle, garbage, no `upper` at all.
#include "upper_reader/ext4_upper.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "common/fd.h"
#include "upper_reader/confine.h"

namespace space::upper_reader {
namespace {
namespace fs = std::filesystem;
using runtime::UpperEntry;

class Ext4Upper : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-upper-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // An ext4 image of `tree` (mke2fs -d) edited by the debugfs commands `edits`.
  fs::path make_disk(const std::map<std::string, std::string>& files,
                     const std::string& edits = "") {
    fs::path src = dir_ / "src", img = dir_ / "disk.img";
    fs::remove_all(src);
    fs::remove(img);
    fs::create_directories(src / "work");
    for (auto& [path, body] : files) {
      fs::path p = src / path;
      if (path.ends_with("/")) {
        fs::create_directories(p);
        continue;
      }
      fs::create_directories(p.parent_path());
      std::ofstream(p) << body;
    }
    std::string cmd = "truncate -s 16M " + img.string() +
                      " && mke2fs -q -F -t ext4 -L space-rw -m 0 -O ^has_journal -d " +
                      src.string() + " " + img.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    if (!edits.empty()) {
      std::ofstream(dir_ / "cmds") << edits;
      cmd = "debugfs -w -f " + (dir_ / "cmds").string() + " " + img.string() + " >/dev/null 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    return img;
  }

  Result<std::vector<UpperEntry>> walk(const fs::path& img, WalkLimits limits = {}) {
    UniqueFd fd(::open(img.c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    std::vector<UpperEntry> out;
    TRY_VOID(walk_upper(fd.get(), limits, [&](const UpperEntry& e) -> Result<void> {
      out.push_back(e);
      return {};
    }));
    return out;
  }

  fs::path dir_;
};

const std::map<std::string, std::string> kTree = {
    {"upper/etc/passwd", "root:x:0:0\n"},
    {"upper/root/newdir/n", "n\n"},
    {"upper/root/a b\nc", ""},
    {"upper/empty/", ""},
};

TEST_F(Ext4Upper, ListsTypesWhiteoutsAndOpaqueDirectories) {
  fs::path img = make_disk(kTree,
                           "cd /upper/etc\n"
                           "mknod group c 0 0\n"  // a whiteout
                           "mknod tty c 4 1\n"    // a real device: not a whiteout
                           "set_inode_field passwd mtime @1694498816\n"  // 0x65000000
                           "set_inode_field passwd mtime_extra 0x0000000d\n"
                           "ea_set /upper/root/newdir trusted.overlay.opaque y\n"
                           "ea_set /upper/empty trusted.overlay.opaque n\n"
                           "ea_set /upper/etc user.overlay.opaque y\n");  // the guest's own
  auto r = walk(img);
  ASSERT_TRUE(r) << r.error().message();
  std::map<std::string, UpperEntry> got;
  std::vector<std::string> order;
  for (auto& e : *r) {
    got[e.path] = e;
    order.push_back(e.path);
  }
  using T = UpperEntry::Type;
  std::map<std::string, std::pair<T, bool>> want = {
      {"etc", {T::kDir, false}},
      {"etc/passwd", {T::kOther, false}},
      {"etc/group", {T::kWhiteout, false}},
      {"etc/tty", {T::kOther, false}},
      {"root", {T::kDir, false}},
      {"root/newdir", {T::kDir, true}},
      {"root/newdir/n", {T::kOther, false}},
      {"root/a b\nc", {T::kOther, false}},
      {"empty", {T::kDir, false}},
  };
  ASSERT_EQ(got.size(), want.size());
  for (auto& [path, tw] : want) {
    ASSERT_TRUE(got.contains(path)) << path;
    EXPECT_EQ(got[path].type, tw.first) << path;
    EXPECT_EQ(got[path].opaque, tw.second) << path;
  }
  EXPECT_EQ(got["etc/passwd"].size, 11);
  // The kernel's decoding: 0x65000000 s, plus epoch bits 01 (2^32 s) and 3 ns.
  EXPECT_EQ(got["etc/passwd"].mtime_ns, (0x65000000LL + (1LL << 32)) * 1000000000 + 3);
  // Parents before their children.
  auto at = [&](const std::string& p) { return std::find(order.begin(), order.end(), p); };
  EXPECT_LT(at("root"), at("root/newdir"));
  EXPECT_LT(at("root/newdir"), at("root/newdir/n"));
}

TEST_F(Ext4Upper, AnEmptyUpperLayer) {
  auto r = walk(make_disk({{"upper/", ""}}));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r->empty());
}

TEST_F(Ext4Upper, EntryLimit) {
  auto r = walk(make_disk(kTree), WalkLimits{.max_entries = 3});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kResourceExhausted);
  r = walk(make_disk(kTree), WalkLimits{.max_entries = 7});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->size(), 7u);
}

TEST_F(Ext4Upper, HostileDisks) {
  // A directory linked into itself: a cycle, refused rather than walked forever.
  auto r = walk(make_disk(kTree, "cd /upper/root/newdir\nlink /upper/root loop\n"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_NE(r.error().message().find("also reached by another path"), std::string::npos)
      << r.error().message();
  // No `upper`, or `upper` not a directory.
  r = walk(make_disk({{"other/x", "x"}}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("no readable \"upper\""), std::string::npos);
  r = walk(make_disk({{"upper", "a file"}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  // Garbage where the file system was (what `dd if=/dev/urandom of=/dev/vdb` leaves).
  fs::path junk = dir_ / "junk.img";
  {
    std::ofstream out(junk, std::ios::binary);
    uint64_t x = 0x9e3779b97f4a7c15;
    for (int i = 0; i < (4 << 20) / 8; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      out.write(reinterpret_cast<const char*>(&x), sizeof x);
    }
  }
  r = walk(junk);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_NE(r.error().message().find("not a readable ext4"), std::string::npos)
      << r.error().message();
  // A file system whose inode table was overwritten: errors, not a crash.
  fs::path img = make_disk(kTree);
  {
    UniqueFd fd(::open(img.c_str(), O_RDWR | O_CLOEXEC));
    std::string junk_block(64 * 1024, '\xa5');
    for (off_t off = 8 * 1024; off < (2 << 20); off += 256 * 1024)
      ASSERT_EQ(::pwrite(fd.get(), junk_block.data(), junk_block.size(), off),
                static_cast<ssize_t>(junk_block.size()));
  }
  (void)walk(img);  // any answer will do; ASan and the exit code do the checking
}

// The reader's seccomp policy: after confine() a process may read its disk and write its
// listing; it is killed for opening a file, making a socket, reading another fd or forking.
int confined_child(const fs::path& img, const std::function<void(int disk)>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int disk = ::open(img.c_str(), O_RDONLY | O_CLOEXEC);
    prepare();
    if (disk < 0 || !confine(disk)) ::_exit(100);
    body(disk);
    ::_exit(0);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

TEST_F(Ext4Upper, ConfinedReaderCanWalkAndNothingElse) {
  fs::path img = make_disk(kTree);
  int st = confined_child(img, [](int disk) {
    std::vector<UpperEntry> out;
    auto r = walk_upper(disk, {}, [&](const UpperEntry& e) -> Result<void> {
      out.push_back(e);
      return {};
    });
    if (!r || out.size() != 7) ::_exit(1);
    if (::write(2, "", 0) != 0) ::_exit(2);
  });
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;

  auto killed = [](int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS; };
  EXPECT_TRUE(killed(confined_child(img, [](int) { ::open("/etc/passwd", O_RDONLY); }))) << "open";
  EXPECT_TRUE(killed(confined_child(img, [](int) { ::socket(AF_INET, SOCK_STREAM, 0); })))
      << "socket";
  EXPECT_TRUE(killed(confined_child(img, [](int) {
    char c;
    (void)!::read(0, &c, 1);
  }))) << "read of another fd";
  EXPECT_TRUE(killed(confined_child(img, [](int disk) { (void)!::write(disk, "x", 1); })))
      << "write to the disk";
  EXPECT_TRUE(killed(confined_child(img, [](int) { ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0); })))
      << "fork";
  EXPECT_TRUE(killed(confined_child(img, [](int) { ::kill(1, 0); }))) << "kill";
}

}  // namespace
}  // namespace space::upper_reader
