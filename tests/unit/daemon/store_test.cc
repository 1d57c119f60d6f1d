// Store: a real SQLite file in a temp dir; migrations, round trips, uid range bookkeeping.
#include "daemon/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>

namespace space::daemon {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-store-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

SandboxRecord sample(const std::string& id, uint32_t base) {
  SandboxRecord r;
  r.id = id;
  r.profile = "test";
  r.runtime = "linux";
  r.image = "host";
  r.state = "running";
  r.spec = {{"memory", 1 << 20}, {"env", {"A=B"}}};
  r.runtime_state = {{"pid", 42}};
  r.uid_base = base;
  r.created_at = 1000.5;
  r.expires_at = 2000.0;
  return r;
}

TEST_F(StoreTest, SandboxRoundTripAndLiveList) {
  auto s = Store::open(dir_ / "db");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_TRUE((*s)->put_sandbox(sample("sb_a", 1u << 30)));
  ASSERT_TRUE((*s)->put_sandbox(sample("sb_b", (1u << 30) + 65536)));
  auto got = (*s)->get_sandbox("sb_a");
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((**got).spec["memory"], 1 << 20);
  EXPECT_EQ((**got).runtime_state["pid"], 42);
  EXPECT_EQ(*(**got).expires_at, 2000.0);
  EXPECT_FALSE((**got).destroyed_at);
  EXPECT_TRUE(*(*s)->uid_base_in_use(1u << 30));

  auto gone = sample("sb_a", 1u << 30);
  gone.state = "destroyed";
  gone.destroyed_at = 3000.0;
  ASSERT_TRUE((*s)->put_sandbox(gone));
  EXPECT_FALSE(*(*s)->uid_base_in_use(1u << 30));  // a destroyed sandbox frees its range
  auto live = (*s)->live_sandboxes();
  ASSERT_TRUE(live);
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].id, "sb_b");
  EXPECT_EQ(*(*s)->prune_destroyed(2999.0), 0);
  EXPECT_EQ(*(*s)->prune_destroyed(3001.0), 1);
  EXPECT_FALSE(*(*s)->get_sandbox("sb_a"));
}

TEST_F(StoreTest, SurvivesReopen) {
  {
    auto s = Store::open(dir_ / "db");
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->put_image({"img", "imported", "/x", 1.0, 10, 2}));
  }
  auto s = Store::open(dir_ / "db");
  ASSERT_TRUE(s);
  auto img = (*s)->get_image("img");
  ASSERT_TRUE(img && *img);
  EXPECT_EQ((**img).files, 2u);
}

TEST_F(StoreTest, RefusesNewerSchema) {
  {
    sqlite3* db;
    ASSERT_EQ(sqlite3_open((dir_ / "db").c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  auto s = Store::open(dir_ / "db");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("newer"), std::string::npos) << s.error().message();
}

}  // namespace
}  // namespace space::daemon
