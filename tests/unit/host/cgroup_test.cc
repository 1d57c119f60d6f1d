// Cgroup back ends on this host, driven directly with a plain child process: limits, freezer,
// kill, usage, removal, and the checks on persisted paths.
#include "host/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

namespace space::host {
namespace {

namespace fs = std::filesystem;

std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    auto layout = detect_cgroups();
    if (!layout) GTEST_SKIP() << layout.error().message();
    layout_ = *layout;
    parent_ = "space-cgtest-" + std::to_string(::getpid());
  }
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }
  pid_t spawn_sleeper() {
    child_ = ::fork();
    if (child_ == 0) {
      for (;;) ::pause();
    }
    return child_;
  }

  CgroupLayout layout_;
  std::string parent_;
  pid_t child_ = -1;
};

TEST_F(CgroupTest, DetectsTheHost) {
  if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    EXPECT_EQ(layout_.mode, CgroupMode::kV2);
  } else {
    EXPECT_NE(layout_.mode, CgroupMode::kV2);
    bool memory = false;
    for (const auto& [c, p] : layout_.v1) memory |= c == "memory";
    EXPECT_TRUE(memory);
  }
}

// On v1 and hybrid hosts: the v1-only path (freezer.state, no cgroup.kill).
TEST_F(CgroupTest, V1FreezerAndUsage) {
  if (layout_.mode == CgroupMode::kV2) GTEST_SKIP() << "pure cgroup2 host";
  CgroupLayout v1 = layout_;
  v1.mode = CgroupMode::kV1;
  v1.unified.clear();
  Limits limits;
  limits.memory_bytes = 32ull << 20;
  limits.pids = 7;
  auto cg = Cgroup::create(v1, parent_, "cg1", limits);
  ASSERT_TRUE(cg) << cg.error().message();
  EXPECT_EQ((*cg)->clone_into_fd(), -1);
  pid_t pid = spawn_sleeper();
  ASSERT_TRUE((*cg)->attach(pid));
  auto u = (*cg)->usage();
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->pids, 1u);
  EXPECT_EQ(u->memory_limit, 32ull << 20);

  ASSERT_TRUE((*cg)->freeze());
  EXPECT_EQ(first_line(fs::path("/sys/fs/cgroup/freezer") / parent_ / "cg1" / "freezer.state"),
            "FROZEN");
  EXPECT_TRUE(*(*cg)->frozen());
  ASSERT_TRUE((*cg)->thaw());
  EXPECT_FALSE(*(*cg)->frozen());

  EXPECT_FALSE((*cg)->kill_all()) << "no cgroup.kill without the unified hierarchy";
  auto busy = (*cg)->wait_empty(std::chrono::milliseconds(50));
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code(), Code::kTimeout);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  child_ = -1;
  ASSERT_TRUE((*cg)->wait_empty(std::chrono::milliseconds(2000)));
  auto paths = (*cg)->paths();
  ASSERT_TRUE((*cg)->remove());
  ASSERT_TRUE((*cg)->remove()) << "remove is idempotent";
  for (const auto& p : paths) {
    EXPECT_FALSE(fs::exists(p)) << p;
    EXPECT_FALSE(fs::exists(p.parent_path())) << "empty parent left: " << p.parent_path();
  }
}

TEST_F(CgroupTest, KillAllWhereTheKernelHasIt) {
  if (layout_.mode == CgroupMode::kV1) GTEST_SKIP() << "no cgroup2 hierarchy";
  Limits limits;
  auto cg = Cgroup::create(layout_, parent_, "cg2", limits);
  ASSERT_TRUE(cg) << cg.error().message();
  ASSERT_GE((*cg)->clone_into_fd(), 0);
  pid_t pid = spawn_sleeper();
  ASSERT_TRUE((*cg)->attach(pid));
  // CLONE_INTO_CGROUP is the launcher's way in; a plain fork joins by cgroup.procs.
  for (const auto& p : (*cg)->paths()) {
    if (p.string().rfind(layout_.unified.string(), 0) == 0) {
      std::ofstream(p / "cgroup.procs") << pid;
    }
  }
  if (!(*cg)->kill_all()) GTEST_SKIP() << "kernel without cgroup.kill";
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  child_ = -1;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_TRUE((*cg)->wait_empty(std::chrono::milliseconds(2000)));
  ASSERT_TRUE((*cg)->remove());
}

TEST_F(CgroupTest, PersistedPathsMustBeOurs) {
  if (layout_.mode == CgroupMode::kV2) GTEST_SKIP() << "v1 paths";
  const fs::path mem = "/sys/fs/cgroup/memory";
  auto with_memory = [&](const std::string& path) {
    return nlohmann::json{{"mode", "v1"}, {"v1", {{"memory", path}}}, {"unified", ""}};
  };
  // Somebody else's cgroup, one under another parent, escapes and depth tricks: refused.
  for (const std::string& bad : std::vector<std::string>{
           "/sys/fs/cgroup/memory/process_api/x", "/sys/fs/cgroup/memory/" + parent_,
           "/sys/fs/cgroup/memory/" + parent_ + "/../x",
           "/sys/fs/cgroup/memory/" + parent_ + "/a/b", "/etc/" + parent_ + "/x",
           "/sys/fs/cgroup/pids/" + parent_ + "/x"}) {
    auto r = Cgroup::open(layout_, parent_, with_memory(bad));
    EXPECT_FALSE(r) << bad;
  }
  auto ok = Cgroup::open(layout_, parent_, with_memory((mem / parent_ / "gone").string()));
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_TRUE((*ok)->remove()) << "removing what is already gone is fine";
  EXPECT_FALSE(Cgroup::open(layout_, parent_, nlohmann::json{{"v1", 1}}));
}

}  // namespace
}  // namespace space::host
