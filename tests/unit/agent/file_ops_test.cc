// File operations inside a temporary root: no write through a final symlink, no escape through
// directory symlinks, FIFOs never block, walks never follow symlinks. Runs with both resolvers.
#include "agent/file_ops.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent_client.h"

namespace space::agent {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FileOpsTest : public ::testing::TestWithParam<ResolveMode> {
 protected:
  void SetUp() override {
    std::ofstream(outside_ / "secret") << "outside";
    fs::create_directories(outside_ / "odir");
    std::ofstream(outside_ / "odir/keep") << "keep";
    fs::create_directories(root_ / "tree/a/b");
    std::ofstream(root_ / "tree/a/b/f") << "hello";
    std::ofstream(root_ / "tree/top") << "x";
    fs::create_symlink(outside_.path(), root_ / "tree/out");  // must not be followed by walk
    fs::create_symlink(outside_ / "secret", root_ / "abslink");
    fs::create_symlink("../../../../../../.." + outside_.path() + "/secret", root_ / "rellink");
    fs::create_symlink(outside_ / "odir", root_ / "dirlink");
    ASSERT_EQ(::mkfifo((root_ / "fifo").c_str(), 0600), 0);
    int fd = ::open(root_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    root_fd_.reset(fd);
    r_ = std::make_unique<PathResolver>(root_fd_.get(), GetParam());
  }
  void expect_outside_untouched() {
    EXPECT_EQ(slurp(outside_ / "secret"), "outside");
    EXPECT_EQ(slurp(outside_ / "odir/keep"), "keep");
    EXPECT_EQ(std::distance(fs::directory_iterator(outside_.path()), {}), 2);
  }

  TempDir outside_;
  TempDir root_;
  UniqueFd root_fd_;
  std::unique_ptr<PathResolver> r_;
};

TEST_P(FileOpsTest, WriteRefusesASymlinkAsLastComponent) {
  for (const char* p : {"/abslink", "/rellink"}) {
    auto fd = open_for_write(*r_, p, 0644, false);
    ASSERT_FALSE(fd) << p;
    EXPECT_EQ(fd.error().sys_errno(), ELOOP) << p;
  }
  expect_outside_untouched();
  EXPECT_TRUE(fs::is_symlink(root_ / "abslink"));
}

TEST_P(FileOpsTest, WriteThroughADirectorySymlinkStaysInside) {
  auto fd = open_for_write(*r_, "/dirlink/new", 0600, false);
  // dirlink -> <outside>/odir, resolved inside the root: <root><outside>/odir does not exist.
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().sys_errno(), ENOENT);
  // Like `mkdir -p`, parents=true does not create through a dangling symlink.
  EXPECT_FALSE(open_for_write(*r_, "/dirlink/new", 0600, /*parents=*/true));
  expect_outside_untouched();
  // Once the link's target exists inside the root, the write lands there.
  fs::create_directories(root_.path() + outside_.path() + "/odir");
  auto made = open_for_write(*r_, "/dirlink/new", 0600, false);
  ASSERT_TRUE(made) << made.error().message();
  ASSERT_EQ(::write(made->get(), "data", 4), 4);
  EXPECT_EQ(slurp(root_.path() + outside_.path() + "/odir/new"), "data");
  auto deep = open_for_write(*r_, "/dirlink/x/y/new", 0600, /*parents=*/true);
  ASSERT_TRUE(deep) << deep.error().message();
  EXPECT_TRUE(fs::exists(root_.path() + outside_.path() + "/odir/x/y/new"));
  expect_outside_untouched();
}

TEST_P(FileOpsTest, WriteCreatesWithModeAndTruncates) {
  auto fd = open_for_write(*r_, "/tree/top", 0600, false);
  ASSERT_TRUE(fd);
  fd->reset();
  EXPECT_EQ(fs::file_size(root_ / "tree/top"), 0u);
  ::umask(022);
  auto created = open_for_write(*r_, "/newfile", 0640, false);
  ASSERT_TRUE(created);
  struct stat st;
  ASSERT_EQ(::stat((root_ / "newfile").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u & ~022u);  // the agent runs with umask 0
}

TEST_P(FileOpsTest, FifosAndDirectoriesAreRefusedWithoutBlocking) {
  auto w = open_for_write(*r_, "/fifo", 0644, false);
  ASSERT_FALSE(w);
  auto rd = open_for_read(*r_, "/fifo");
  ASSERT_FALSE(rd);
  EXPECT_EQ(rd.error().code(), Code::kInvalidArgument);
  auto dir = open_for_read(*r_, "/tree");
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().sys_errno(), EISDIR);
  auto wdir = open_for_write(*r_, "/tree", 0644, false);
  ASSERT_FALSE(wdir);
}

TEST_P(FileOpsTest, ReadFollowsSymlinksOnlyInsideTheRoot) {
  auto fd = open_for_read(*r_, "/abslink");
  ASSERT_FALSE(fd);  // <root><outside>/secret does not exist
  EXPECT_EQ(fd.error().sys_errno(), ENOENT);
  auto ok = open_for_read(*r_, "/tree/a/b/f");
  ASSERT_TRUE(ok);
  char buf[16];
  EXPECT_EQ(::read(ok->get(), buf, sizeof(buf)), 5);
}

TEST_P(FileOpsTest, MkdirSymlinkRemoveAndStat) {
  ASSERT_TRUE(make_dir(*r_, "/m", 0700, false));
  auto again = make_dir(*r_, "/m", 0700, false);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().sys_errno(), EEXIST);
  EXPECT_TRUE(make_dir(*r_, "/m", 0700, true));          // -p tolerates an existing directory
  EXPECT_FALSE(make_dir(*r_, "/tree/top", 0700, true));  // but not a file
  ASSERT_TRUE(make_dir(*r_, "/p/q/r", 0755, true));
  EXPECT_TRUE(fs::is_directory(root_ / "p/q/r"));
  EXPECT_FALSE(make_dir(*r_, "/abslink/x", 0755, false));

  ASSERT_TRUE(make_symlink(*r_, "/p/link", "/etc/passwd"));
  EXPECT_EQ(fs::read_symlink(root_ / "p/link"), "/etc/passwd");
  EXPECT_FALSE(make_symlink(*r_, "/p/link", "x"));
  EXPECT_FALSE(make_symlink(*r_, "/p/empty", ""));

  auto st = stat_path(*r_, "/p/link");
  ASSERT_TRUE(st);
  EXPECT_EQ((*st)["type"], "symlink");
  EXPECT_EQ((*st)["target"], "/etc/passwd");
  auto dst = stat_path(*r_, "/m");
  ASSERT_TRUE(dst);
  EXPECT_EQ((*dst)["type"], "dir");
  EXPECT_EQ((*dst)["mode"], 0700);
  auto fst = stat_path(*r_, "/tree/a/b/f");
  ASSERT_TRUE(fst);
  EXPECT_EQ((*fst)["type"], "file");
  EXPECT_EQ((*fst)["size"], 5);
  auto rst = stat_path(*r_, "/");
  ASSERT_TRUE(rst);
  EXPECT_EQ((*rst)["type"], "dir");
  EXPECT_EQ((*stat_path(*r_, "/fifo"))["type"], "other");
  auto missing = stat_path(*r_, "/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().sys_errno(), ENOENT);

  // Non-recursive remove: files, empty dirs; a non-empty dir is refused.
  auto nonempty = remove_path(*r_, "/p", false);
  ASSERT_FALSE(nonempty);
  EXPECT_EQ(nonempty.error().sys_errno(), ENOTEMPTY);
  EXPECT_TRUE(remove_path(*r_, "/m", false));
  EXPECT_TRUE(remove_path(*r_, "/tree/top", false));
  EXPECT_FALSE(fs::exists(root_ / "tree/top"));
  EXPECT_FALSE(remove_path(*r_, "/", true));
  EXPECT_FALSE(remove_path(*r_, "/nope", false));
}

TEST_P(FileOpsTest, RemoveActsOnLinksNotTargets) {
  EXPECT_TRUE(remove_path(*r_, "/dirlink", true));
  EXPECT_TRUE(remove_path(*r_, "/abslink", false));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root_ / "dirlink")));
  // A tree holding a symlink to the outside: the link goes, the outside stays.
  EXPECT_TRUE(remove_path(*r_, "/tree", true));
  EXPECT_FALSE(fs::exists(root_ / "tree"));
  expect_outside_untouched();
}

TEST_P(FileOpsTest, WalkListsParentsFirstAndDoesNotFollowSymlinks) {
  auto w = Walker::open(*r_, "/tree");
  ASSERT_TRUE(w) << w.error().message();
  std::string out;
  int calls = 0;
  for (bool more = true; more; ++calls) {
    std::string chunk;  // small budgets: many resumptions
    more = w->next(chunk, 16);
    out += chunk;
    ASSERT_LT(calls, 100);
  }
  EXPECT_GT(calls, 2);
  EXPECT_FALSE(w->truncated());
  std::vector<std::string> paths;
  std::istringstream lines(out);
  std::map<std::string, nlohmann::json> by_path;
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    paths.push_back(j["path"]);
    by_path[j["path"]] = j;
  }
  EXPECT_EQ(w->count(), paths.size());
  std::vector<std::string> sorted = paths;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{"a", "a/b", "a/b/f", "out", "top"}));
  auto pos = [&](const std::string& p) { return std::find(paths.begin(), paths.end(), p); };
  EXPECT_LT(pos("a"), pos("a/b"));
  EXPECT_LT(pos("a/b"), pos("a/b/f"));
  EXPECT_EQ(by_path["out"]["type"], "symlink");
  EXPECT_EQ(by_path["out"]["target"], outside_.path());
  EXPECT_EQ(by_path["a/b/f"]["size"], 5);

  auto not_dir = Walker::open(*r_, "/tree/top");
  ASSERT_FALSE(not_dir);
  EXPECT_EQ(not_dir.error().sys_errno(), ENOTDIR);
}

INSTANTIATE_TEST_SUITE_P(Modes, FileOpsTest,
                         ::testing::Values(ResolveMode::kOpenat2, ResolveMode::kUserspace),
                         [](const auto& info) {
                           return info.param == ResolveMode::kOpenat2 ? "openat2" : "userspace";
                         });

}  // namespace
}  // namespace space::agent
