// Where sandbox cgroups go on a pure cgroup2 host (cgroup.h, docs/hosts.md): parsing the "0::"
// line of /proc/<pid>/cgroup, the delegated base, $SPACE_CGROUP_BASE against a stand-in cgroup2
// tree (plain files: detect_cgroups only reads), and Cgroup::open's check that persisted paths
// lie under that base. The real v2 behaviour is tested in a VM by tests/hosts.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "host/cgroup.h"

namespace space::host {
namespace {

namespace fs = std::filesystem;

TEST(CgroupBaseTest, UnifiedCgroupPath) {
  EXPECT_EQ(unified_cgroup_path("0::/system.slice/spaced.service\n"),
            "/system.slice/spaced.service");
  EXPECT_EQ(unified_cgroup_path("0::/\n"), "/");
  // Hybrid hosts list the v1 hierarchies first.
  EXPECT_EQ(unified_cgroup_path("12:pids:/a\n3:memory:/a\n1:name=systemd:/a\n0::/a/b\n"), "/a/b");
  EXPECT_EQ(unified_cgroup_path("0::/x"), "/x") << "no trailing newline";
  EXPECT_EQ(unified_cgroup_path("12:pids:/a\n3:memory:/a\n"), std::nullopt) << "v1 only";
  EXPECT_EQ(unified_cgroup_path(""), std::nullopt);
  EXPECT_EQ(unified_cgroup_path("0::relative\n"), std::nullopt);
  EXPECT_EQ(unified_cgroup_path("10::/not-zero\n"), std::nullopt);
}

TEST(CgroupBaseTest, DelegatedBase) {
  const fs::path m = "/sys/fs/cgroup";
  EXPECT_EQ(delegated_base(m, "/"), m) << "the root: the old layout, <root>/space/<id>";
  EXPECT_EQ(delegated_base(m, "/system.slice/spaced.service"), m / "system.slice/spaced.service");
  EXPECT_EQ(delegated_base(m, "/system.slice/spaced.service/supervisor"),
            m / "system.slice/spaced.service")
      << "already in its leaf (moved earlier, or DelegateSubgroup=supervisor)";
  EXPECT_EQ(delegated_base(m, "/supervisor"), m);
  EXPECT_EQ(delegated_base(m, "/a/b/"), m / "a/b");
  EXPECT_EQ(delegated_base(m, "/a/supervisor/x"), m / "a/supervisor/x");
}

class CgroupBaseEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-cgbase-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::ofstream(root_ / "cgroup.controllers") << "cpu memory pids\n";
    fs::create_directories(root_ / "system.slice/space-sandboxes.service");
    std::ofstream(root_ / "system.slice/space-sandboxes.service/cgroup.procs") << "";
    const char* old = std::getenv("SPACE_CGROUP_BASE");
    if (old) saved_ = old;
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("SPACE_CGROUP_BASE", saved_->c_str(), 1);
    } else {
      ::unsetenv("SPACE_CGROUP_BASE");
    }
    fs::remove_all(root_);
  }
  fs::path root_;
  std::optional<std::string> saved_;
};

TEST_F(CgroupBaseEnvTest, ExplicitBase) {
  ::setenv("SPACE_CGROUP_BASE", "/system.slice/space-sandboxes.service", 1);
  auto layout = detect_cgroups(root_);
  ASSERT_TRUE(layout) << layout.error().message();
  EXPECT_EQ(layout->mode, CgroupMode::kV2);
  EXPECT_EQ(layout->unified, root_);
  EXPECT_EQ(layout->base, root_ / "system.slice/space-sandboxes.service");
}

TEST_F(CgroupBaseEnvTest, ExplicitBaseMustBeACgroup) {
  for (const char* bad : {"system.slice/x", "/system.slice/../etc", "/nope.service", "/a//b"}) {
    ::setenv("SPACE_CGROUP_BASE", bad, 1);
    auto layout = detect_cgroups(root_);
    EXPECT_FALSE(layout) << bad;
  }
}

TEST_F(CgroupBaseEnvTest, PersistedPathsMustBeUnderTheBase) {
  ::setenv("SPACE_CGROUP_BASE", "/system.slice/space-sandboxes.service", 1);
  auto layout = detect_cgroups(root_);
  ASSERT_TRUE(layout) << layout.error().message();
  const fs::path base = layout->base;
  auto v2 = [](const fs::path& p) {
    return nlohmann::json{{"mode", "v2"}, {"unified", p.string()}};
  };
  auto ok = Cgroup::open(*layout, "space", v2(base / "space" / "sb_1"));
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ((*ok)->paths(), std::vector<fs::path>{base / "space" / "sb_1"});
  for (const fs::path& bad :
       {root_ / "space" / "sb_1", base / "sb_1", base / "space" / "sb_1" / "x",
        base / "other" / "sb_1", root_ / "system.slice" / "space" / "sb_1"}) {
    EXPECT_FALSE(Cgroup::open(*layout, "space", v2(bad))) << bad;
  }
}

}  // namespace
}  // namespace space::host
