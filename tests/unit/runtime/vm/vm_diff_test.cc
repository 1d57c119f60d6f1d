// The host side of a microVM's `space diff` (runtime/vm_diff.h): the real space-upper-reader,
// started confined as an unprivileged uid, lists a disk image; a disk of garbage, a listing too
// large for its cap, a missing reader and a root uid give clear errors; nothing of the reader
// is left running. Needs root (clone3 into namespaces, setresuid).
#include "runtime/vm_diff.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/fd.h"

namespace space::runtime::vm {
namespace {
namespace fs = std::filesystem;

constexpr uint32_t kUid = 0x7ffe0000;  // far above any uid_base the daemon hands out in tests

class VmDiff : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    char tmpl[] = "/tmp/space-vm-diff-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "src/upper/root/newdir");
    fs::create_directories(dir_ / "src/work");
    std::ofstream(dir_ / "src/upper/root/newdir/n") << "n\n";
    img_ = dir_ / "disk.img";
    std::ofstream(dir_ / "cmds") << "cd /upper\nmknod gone c 0 0\n";  // a whiteout
    std::string cmd = "truncate -s 16M " + img_.string() +
                      " && mke2fs -q -F -t ext4 -L space-rw -m 0 -O ^has_journal -d " +
                      (dir_ / "src").string() + " " + img_.string() + " && debugfs -w -f " +
                      (dir_ / "cmds").string() + " " + img_.string() + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  UpperReader reader() const { return {.exe = SPACE_UPPER_READER_BIN, .uid = kUid}; }
  Result<std::vector<UpperEntry>> read(const fs::path& img, const UpperReader& r) {
    UniqueFd fd(::open(img.c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    return read_upper(fd.get(), r);
  }
  // This process's children running as kUid: none once read_upper has returned. (Children
  // only: ctest runs other tests' readers, as the same uid, at the same time.)
  static int readers_left() {
    int n = 0;
    const std::string me = std::to_string(::getpid());
    for (auto& e : fs::directory_iterator("/proc")) {
      std::ifstream st(e.path() / "status");
      std::string line;
      bool uid = false, child = false;
      while (std::getline(st, line)) {
        if (line.rfind("Uid:", 0) == 0 && line.find(std::to_string(kUid)) != std::string::npos)
          uid = true;
        if (line.rfind("PPid:", 0) == 0 &&
            line.substr(5).find_first_not_of(" \t") != std::string::npos &&
            line.substr(line.find_first_not_of(" \t", 5)) == me)
          child = true;
      }
      if (uid && child) ++n;
    }
    return n;
  }

  fs::path dir_, img_;
};

TEST_F(VmDiff, ListsTheUpperLayer) {
  auto r = read(img_, reader());
  ASSERT_TRUE(r) << r.error().message();
  std::vector<std::string> paths;
  for (auto& e : *r) paths.push_back(e.path + ":" + static_cast<char>(e.type));
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths,
            (std::vector<std::string>{"gone:w", "root/newdir/n:o", "root/newdir:d", "root:d"}));
  EXPECT_EQ(readers_left(), 0);
}

// The reader's posture, from a stand-in started exactly as the reader is: the sandbox's uid
// and gid everywhere, no groups, no capabilities, no_new_privs, namespaces of its own, only
// fds 0-3, the rlimits, no environment, and a disk it can read but not write.
TEST_F(VmDiff, ReaderPosture) {
  UpperReader r = reader();
  r.exe = SPACE_READER_POSTURE;
  auto got = read(img_, r);
  ASSERT_FALSE(got);
  std::string m = got.error().message();
  ASSERT_TRUE(m.starts_with("posture ")) << m;
  std::map<std::string, std::string> kv;
  std::istringstream words(m.substr(8));
  for (std::string w; words >> w;) {
    size_t eq = w.find('=');
    kv[w.substr(0, eq)] = eq == std::string::npos ? "" : w.substr(eq + 1);
  }
  std::string id = std::to_string(kUid);
  EXPECT_EQ(kv["u"], id + "," + id + "," + id + "," + id) << m;
  EXPECT_EQ(kv["g"], id + "," + id + "," + id + "," + id) << m;
  EXPECT_EQ(kv["gr"], "") << m;
  EXPECT_EQ(kv["ce"], "0000000000000000") << m;
  EXPECT_EQ(kv["nnp"], "1") << m;
  for (const char* ns : {"net", "pid", "ipc", "uts"}) {
    struct stat st;
    ASSERT_EQ(::stat(("/proc/self/ns/" + std::string(ns)).c_str(), &st), 0);
    EXPECT_NE(kv[ns], std::to_string(st.st_ino)) << ns << " is the test's own: " << m;
  }
  EXPECT_EQ(kv["p"], "1") << "the init of its own pid namespace: " << m;
  EXPECT_EQ(kv["fds"], "0,1,2,3,") << m;
  EXPECT_EQ(kv["as"], std::to_string(r.max_memory)) << m;
  EXPECT_EQ(kv["fs"], "0") << m;
  EXPECT_EQ(kv["cpu"], std::to_string(r.max_cpu_s)) << m;
  EXPECT_EQ(kv["env"], "0") << m;
  EXPECT_EQ(kv["r"], "1") << m;
  EXPECT_EQ(kv["w"], "0") << "the disk is read-only to it: " << m;
  EXPECT_EQ(readers_left(), 0);
}

TEST_F(VmDiff, ClearErrors) {
  // Garbage instead of a file system.
  fs::path junk = dir_ / "junk.img";
  std::ofstream(junk) << std::string(1 << 20, '\x5a');
  auto r = read(junk, reader());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_NE(r.error().message().find("not a readable ext4 file system"), std::string::npos)
      << r.error().message();
  // A listing over its cap: the reader is killed.
  UpperReader small = reader();
  small.max_output = 20;
  r = read(img_, small);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kResourceExhausted);
  // Too many entries.
  UpperReader few = reader();
  few.max_entries = 2;
  r = read(img_, few);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kResourceExhausted);
  // No reader; root is refused.
  UpperReader missing = reader();
  missing.exe = dir_ / "nope";
  r = read(img_, missing);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  UpperReader root = reader();
  root.uid = 0;
  EXPECT_FALSE(read(img_, root));
  // A disk fd open for writing is refused: the reader gets read-only fds only.
  UniqueFd rw(::open(img_.c_str(), O_RDWR | O_CLOEXEC));
  EXPECT_FALSE(read_upper(rw.get(), reader()));
  EXPECT_EQ(readers_left(), 0);
}

}  // namespace
}  // namespace space::runtime::vm
