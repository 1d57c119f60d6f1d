// Path resolution must never leave its root: `..`, absolute and relative symlinks pointing
// outside, /proc magic links. Every case runs against openat2 and the userspace fallback.
#include "agent/path_resolver.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent_client.h"

namespace space::agent {
namespace {

using testing::TempDir;

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path) << content;
}

std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

class PathResolverTest : public ::testing::TestWithParam<ResolveMode> {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    write_file(outside_ / "secret", "outside");
    // A decoy at the same path inside the root: what an absolute link must resolve to.
    fs::create_directories(root_.path() + outside_.path());
    write_file(root_.path() + outside_.path() + "/secret", "inside");
    write_file(root_ / "file", "root file");
    fs::create_directories(root_ / "dir/sub");
    fs::create_symlink(outside_.path(), root_ / "abs");
    fs::create_symlink("../../../../../../../../.." + outside_.path(), root_ / "rel");
    fs::create_symlink("../../../../..", root_ / "dir/sub/dotdot");
    fs::create_symlink("/loop", root_ / "loop");
    fs::create_symlink("/proc/self/root", root_ / "procroot");
    fs::create_symlink("file", root_ / "filelink");
    int fd = ::open(root_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    root_fd_.reset(fd);
  }
  PathResolver resolver() const { return PathResolver(root_fd_.get(), GetParam()); }
  // The content of `path` opened read-only through the resolver, or the errno it failed with.
  std::string read(std::string_view path) const {
    auto fd = resolver().open(path, O_RDONLY);
    if (!fd) return "errno " + std::string(errno_name(fd.error().sys_errno()));
    return read_fd(fd->get());
  }
  ino_t ino_of(int fd) const {
    struct stat st;
    EXPECT_EQ(::fstat(fd, &st), 0);
    return st.st_ino;
  }
  ino_t ino_of(const std::string& host_path) const {
    struct stat st;
    EXPECT_EQ(::stat(host_path.c_str(), &st), 0);
    return st.st_ino;
  }

  TempDir outside_;
  TempDir root_;
  UniqueFd root_fd_;
};

TEST_P(PathResolverTest, OrdinaryPathsResolve) {
  EXPECT_EQ(read("/file"), "root file");
  EXPECT_EQ(read("/dir/../file"), "root file");
  EXPECT_EQ(read("/dir/sub/../../file"), "root file");
  EXPECT_EQ(read("/filelink"), "root file");
  EXPECT_EQ(read("//file"), "root file");
  EXPECT_EQ(read("/missing"), "errno ENOENT");
  EXPECT_EQ(read("/file/x"), "errno ENOTDIR");
  for (const char* p : {"/", "/..", "/../..", "/dir/.."}) {
    auto fd = resolver().open(p, O_PATH | O_DIRECTORY);
    ASSERT_TRUE(fd) << p << ": " << fd.error().message();
    EXPECT_EQ(ino_of(fd->get()), ino_of(root_.path())) << p;
  }
}

TEST_P(PathResolverTest, DotDotCannotLeaveTheRoot) {
  EXPECT_EQ(read("/../../../../../../.." + outside_.path() + "/secret"), "inside");
  EXPECT_EQ(read("/dir/../../../.." + outside_.path() + "/secret"), "inside");
}

TEST_P(PathResolverTest, AbsoluteAndRelativeSymlinksStayInside) {
  EXPECT_EQ(read("/abs/secret"), "inside");
  EXPECT_EQ(read("/rel/secret"), "inside");
  EXPECT_EQ(read("/dir/sub/dotdot/file"), "root file");
}

TEST_P(PathResolverTest, SymlinkLoopsFail) { EXPECT_EQ(read("/loop"), "errno ELOOP"); }

TEST_P(PathResolverTest, ProcSelfRootIsResolvedInsideTheRoot) {
  // Inside this root "/proc" does not exist, so the link leads nowhere.
  EXPECT_EQ(read("/procroot/etc/hostname"), "errno ENOENT");
}

TEST_P(PathResolverTest, MagicLinksNeverEscape) {
  // A root that does contain magic links: this process's /proc/PID directory. root, cwd, exe
  // and fd/N point outside it; neither mode may follow them there.
  std::string proc = "/proc/" + std::to_string(::getpid());
  int fd = ::open(proc.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  UniqueFd proc_root(fd);
  int secret = ::open((outside_ / "secret").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(secret, 0);
  UniqueFd secret_fd(secret);
  PathResolver r(proc_root.get(), GetParam());
  for (std::string p :
       {std::string("/root/etc/hostname"), std::string("/root"), std::string("/cwd"),
        std::string("/exe"), "/fd/" + std::to_string(secret)}) {
    auto got = r.open(p, O_RDONLY);
    if (!got) continue;  // openat2: ELOOP (RESOLVE_NO_MAGICLINKS); userspace: ENOENT
    // The userspace walk reads "/proc/PID/root" as the text "/", which names the root itself:
    // still inside. Anything else opened here would be an escape.
    struct stat a, b;
    ASSERT_EQ(::fstat(got->get(), &a), 0);
    ASSERT_EQ(::fstat(proc_root.get(), &b), 0);
    EXPECT_TRUE(a.st_dev == b.st_dev && a.st_ino == b.st_ino) << p << " escaped the root";
  }
}

TEST_P(PathResolverTest, NoFollowOnTheLastComponent) {
  auto r = resolver().open("/filelink", O_RDONLY | O_NOFOLLOW);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().sys_errno(), ELOOP);
  auto link = resolver().open("/abs", O_PATH | O_NOFOLLOW);
  ASSERT_TRUE(link) << link.error().message();
  struct stat st;
  ASSERT_EQ(::fstatat(link->get(), "", &st, AT_EMPTY_PATH), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_P(PathResolverTest, CreatingWithOCreatStaysInside) {
  auto fd = resolver().open("/abs/created", O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_TRUE(fd) << fd.error().message();
  EXPECT_FALSE(std::filesystem::exists(outside_ / "created"));
  EXPECT_TRUE(std::filesystem::exists(root_.path() + outside_.path() + "/created"));
}

TEST_P(PathResolverTest, OpenParentSplitsAndResolvesInside) {
  auto p = resolver().open_parent("/dir/newname");
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->name, "newname");
  EXPECT_EQ(ino_of(p->dir.get()), ino_of(root_ / "dir"));
  auto trailing = resolver().open_parent("/dir/sub/");
  ASSERT_TRUE(trailing);
  EXPECT_EQ(trailing->name, "sub");
  auto via_link = resolver().open_parent("/abs/x");
  ASSERT_TRUE(via_link);
  EXPECT_EQ(ino_of(via_link->dir.get()), ino_of(root_.path() + outside_.path()));
  for (const char* bad : {"/", "//", "/dir/.", "/dir/..", "relative", ""}) {
    auto r = resolver().open_parent(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << bad;
  }
}

TEST_P(PathResolverTest, OpenParentCreatingMakesDirectoriesInside) {
  auto p = resolver().open_parent_creating("/x/y/z/file", 0750);
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_TRUE(std::filesystem::is_directory(root_ / "x/y/z"));
  auto via_link = resolver().open_parent_creating("/abs/newdir/deeper/file", 0755);
  ASSERT_TRUE(via_link) << via_link.error().message();
  EXPECT_FALSE(std::filesystem::exists(outside_ / "newdir"));
  EXPECT_TRUE(std::filesystem::is_directory(root_.path() + outside_.path() + "/newdir/deeper"));
  auto through_file = resolver().open_parent_creating("/file/sub/x", 0755);
  ASSERT_FALSE(through_file);
  EXPECT_EQ(through_file.error().sys_errno(), ENOTDIR);
}

TEST_P(PathResolverTest, PathsAreValidated) {
  std::string with_nul("/a\0b", 4);
  for (std::string bad : {std::string("relative"), std::string(""), with_nul,
                          "/" + std::string(kMaxPathBytes, 'a')}) {
    auto r = resolver().open(bad, O_RDONLY);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  }
  EXPECT_TRUE(check_sandbox_path("/" + std::string(kMaxPathBytes - 1, 'a')));
}

INSTANTIATE_TEST_SUITE_P(Modes, PathResolverTest,
                         ::testing::Values(ResolveMode::kOpenat2, ResolveMode::kUserspace),
                         [](const auto& info) {
                           return info.param == ResolveMode::kOpenat2 ? "openat2" : "userspace";
                         });

}  // namespace
}  // namespace space::agent
