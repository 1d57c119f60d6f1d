// Store: a real SQLite file in a temp dir; migrations, round trips, uid range bookkeeping.
#include "daemon/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
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
  r.state = SandboxState::kRunning;
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
  gone.state = SandboxState::kDestroyed;
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

TEST_F(StoreTest, RollbackIntentRoundTrips) {
  auto s = Store::open(dir_ / "db");
  ASSERT_TRUE(s) << s.error().message();
  auto r = sample("sb_r", 1u << 30);
  r.state = SandboxState::kRollingBack;
  r.rollback_to = "snap_1";
  r.rollback_saved_as = "snap_2";
  ASSERT_TRUE((*s)->put_sandbox(r));
  auto got = (*s)->get_sandbox("sb_r");
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((**got).state, SandboxState::kRollingBack);
  EXPECT_EQ((**got).rollback_to, "snap_1");
  EXPECT_EQ((**got).rollback_saved_as, "snap_2");
  ASSERT_EQ((*s)->live_sandboxes()->size(), 1u);  // an intent is live: reconcile sees it
}

// The checkpoint copies the WAL into the database while the store is open, and a WAL that grew
// is cut back when it restarts: neither file grows with the work done.
TEST_F(StoreTest, CheckpointKeepsTheWalBounded) {
  auto s = Store::open(dir_ / "db");
  ASSERT_TRUE(s) << s.error().message();
  auto wal_size = [&] {
    std::error_code ec;
    auto n = std::filesystem::file_size(dir_ / "db-wal", ec);
    return ec ? 0 : n;
  };
  std::uintmax_t largest = 0;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 100; ++i) {
      auto r = sample("sb_" + std::to_string(round * 1000 + i), (1u << 30) + 65536u * i);
      r.spec["padding"] = std::string(2000, 'x');
      ASSERT_TRUE((*s)->put_sandbox(r));
    }
    ASSERT_TRUE((*s)->checkpoint());
    EXPECT_EQ((*s)->wal_unchecked(), 0) << "nothing holds old pages: all of them copied";
    EXPECT_GT((*s)->wal_frames(), 0);
    largest = std::max(largest, wal_size());
  }
  EXPECT_GT(std::filesystem::file_size(dir_ / "db"), 1u << 20) << "pages reached the database";
  // About one round's worth (100 one-row commits of a few pages: ~1.2 MiB), never ten rounds'.
  EXPECT_LT(largest, 3u << 20);
}

// A snapshot's name belongs to its sandbox (schema 8): two sandboxes may use one name, one
// sandbox may not use it twice; every snapshot of a name is found.
TEST_F(StoreTest, SnapshotNamesBelongToTheirSandbox) {
  auto s = Store::open(dir_ / "db");
  ASSERT_TRUE(s) << s.error().message();
  auto snap = [](std::string id, std::string sandbox, double at) {
    SnapshotRecord r;
    r.id = std::move(id);
    r.sandbox_id = std::move(sandbox);
    r.profile = "test";
    r.name = "before-cleanup";
    r.kind = "manual";
    r.runtime = "linux";
    r.image = "host";
    r.spec = nlohmann::json::object();
    r.created_at = at;
    return r;
  };
  ASSERT_TRUE((*s)->put_snapshot(snap("snap_a", "sb_1", 1)));
  ASSERT_TRUE((*s)->put_snapshot(snap("snap_b", "sb_2", 2)));
  auto dup = (*s)->put_snapshot(snap("snap_c", "sb_1", 3));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code(), Code::kAlreadyExists);
  EXPECT_NE(dup.error().message().find("sandbox sb_1 already has"), std::string::npos);
  auto named = (*s)->snapshots_named("before-cleanup");
  ASSERT_TRUE(named);
  ASSERT_EQ(named->size(), 2u);
  EXPECT_EQ((*named)[0].id, "snap_b");  // newest first
  EXPECT_EQ((*named)[1].id, "snap_a");
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

TEST_F(StoreTest, ImageFormatConfigAndDigest) {
  ImageRecord r{"app", "imported", "/x", 1.0, 10, 2};
  r.format = "oci";
  r.config = {{"env", {"A=1"}}, {"working_dir", "/app"}, {"labels", {{"k", "v"}}}};
  r.digest = "sha256:" + std::string(64, 'a');
  {
    auto s = Store::open(dir_ / "db");
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->put_image(r));
    ASSERT_TRUE((*s)->put_image({"old", "imported", "/y", 1.0, 1, 1}));  // no config
  }
  auto s = Store::open(dir_ / "db");
  ASSERT_TRUE(s);
  auto img = (*s)->get_image("app");
  ASSERT_TRUE(img && *img);
  EXPECT_EQ((**img).format, "oci");
  EXPECT_EQ((**img).config, r.config);
  EXPECT_EQ((**img).digest, r.digest);
  auto old = (*s)->get_image("old");
  ASSERT_TRUE(old && *old);
  EXPECT_EQ((**old).format, "");
  EXPECT_EQ((**old).config, nlohmann::json::object());
  auto all = (*s)->images();
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 2u);
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
