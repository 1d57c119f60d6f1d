// AuditLog on a real SQLite file (migrated by the daemon's Store): the chain verifies when
// untouched, and editing, deleting, inserting or reordering rows is detected; the chain
// continues across a reopen; a full queue blocks instead of dropping; retention prunes only
// logs of sandboxes destroyed long enough ago.
#include "audit/audit_log.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "daemon/store.h"

namespace space::audit {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

class AuditLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-audit-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto store = daemon::Store::open(dir_ / "space.db");
    ASSERT_TRUE(store) << store.error().message();
    store_ = std::move(*store);
  }
  void TearDown() override {
    log_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  AuditLog& log(AuditLog::Options o = {}) {
    if (!log_) {
      auto l = AuditLog::open(dir_ / "space.db", dir_ / "audit.key", o);
      EXPECT_TRUE(l) << l.error().message();
      log_ = std::move(*l);
    }
    return *log_;
  }
  void fill(const std::string& id, int n) {
    for (int i = 0; i < n; ++i)
      ASSERT_TRUE(log().append(id, "exec.start", {{"argv", {"/bin/true", std::to_string(i)}}}));
    ASSERT_TRUE(log().flush());
  }
  // Runs SQL on the database behind the log's back, as an attacker with file access would.
  void tamper(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "space.db").c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  VerifyReport verify(const std::string& id) {
    auto r = log().verify(id);
    EXPECT_TRUE(r) << r.error().message();
    return r ? *r : VerifyReport{};
  }

  fs::path dir_;
  std::unique_ptr<daemon::Store> store_;
  std::unique_ptr<AuditLog> log_;
};

TEST_F(AuditLogTest, AppendsReadAndVerify) {
  fill("sb_a", 5);
  fill("sb_b", 2);
  auto events = log().read("sb_a", 0, 100);
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ((*events)[i].seq, static_cast<int64_t>(i + 1));
    EXPECT_EQ((*events)[i].kind, "exec.start");
    EXPECT_EQ((*events)[i].data["argv"][1], std::to_string(i));
    EXPECT_EQ((*events)[i].hash.size(), 64u);
  }
  EXPECT_EQ(log().read("sb_a", 3, 100)->size(), 2u);
  EXPECT_EQ(log().read("sb_a", 0, 2)->size(), 2u);
  auto rep = verify("sb_a");
  EXPECT_TRUE(rep.ok) << rep.problem;
  EXPECT_EQ(rep.events, 5);
  EXPECT_TRUE(verify("sb_b").ok);
  struct stat st;
  ASSERT_EQ(::stat((dir_ / "audit.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
}

TEST_F(AuditLogTest, DetectsAnEditedRow) {
  fill("sb_a", 5);
  tamper(
      "UPDATE audit_events SET data = '{\"argv\":[\"/bin/false\"]}' "
      "WHERE sandbox_id = 'sb_a' AND seq = 3");
  auto rep = verify("sb_a");
  EXPECT_FALSE(rep.ok);
  EXPECT_EQ(rep.first_bad_seq, 3);
}

TEST_F(AuditLogTest, DetectsAnEditedTimestampOrKind) {
  fill("sb_a", 3);
  tamper("UPDATE audit_events SET ts = ts + 1 WHERE sandbox_id = 'sb_a' AND seq = 2");
  EXPECT_EQ(verify("sb_a").first_bad_seq, 2);
}

TEST_F(AuditLogTest, DetectsADeletedRow) {
  fill("sb_a", 5);
  tamper("DELETE FROM audit_events WHERE sandbox_id = 'sb_a' AND seq = 2");
  auto rep = verify("sb_a");
  EXPECT_FALSE(rep.ok);
  EXPECT_EQ(rep.first_bad_seq, 2);
}

TEST_F(AuditLogTest, DetectsADeletedRowRenumbered) {
  fill("sb_a", 5);
  tamper(
      "DELETE FROM audit_events WHERE sandbox_id = 'sb_a' AND seq = 2;"
      "UPDATE audit_events SET seq = seq - 1 WHERE sandbox_id = 'sb_a' AND seq > 2");
  auto rep = verify("sb_a");
  EXPECT_FALSE(rep.ok);
  EXPECT_EQ(rep.first_bad_seq, 2);
}

TEST_F(AuditLogTest, DetectsAnInsertedRow) {
  fill("sb_a", 3);
  // A copy of event 3 appended as event 4 (a replay), then a forged event 5.
  tamper(
      "INSERT INTO audit_events (sandbox_id, seq, ts, kind, data, hash) "
      "SELECT sandbox_id, 4, ts, kind, data, hash FROM audit_events "
      "WHERE sandbox_id = 'sb_a' AND seq = 3");
  EXPECT_EQ(verify("sb_a").first_bad_seq, 4);
}

TEST_F(AuditLogTest, DetectsReorderedRows) {
  fill("sb_a", 4);
  // Swap the contents of events 2 and 3, keeping every row's own seq and hash intact.
  tamper(
      "UPDATE audit_events SET seq = -seq WHERE sandbox_id = 'sb_a' AND seq IN (2, 3);"
      "UPDATE audit_events SET seq = 5 + seq WHERE sandbox_id = 'sb_a' AND seq IN (-2, -3)");
  auto rep = verify("sb_a");
  EXPECT_FALSE(rep.ok);
  EXPECT_EQ(rep.first_bad_seq, 2);
}

TEST_F(AuditLogTest, DetectsAForgedEventWithoutTheKey) {
  fill("sb_a", 2);
  tamper(
      "INSERT INTO audit_events (sandbox_id, seq, ts, kind, data, hash) VALUES "
      "('sb_a', 3, 1.0, 'exec.start', '{}', '" +
      std::string(64, 'a') + "')");
  EXPECT_EQ(verify("sb_a").first_bad_seq, 3);
}

// A writer that cannot write (here: another connection holds the write lock; in life, a full
// disk) makes a flush with a timeout fail with why, instead of hanging its reader; nothing is
// dropped, and the events are written once the writer can.
TEST_F(AuditLogTest, FlushWithATimeoutSaysWhyTheWriterIsBehind) {
  fill("sb_a", 1);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "space.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_TRUE(log().append("sb_a", "exec.start", {{"argv", {"/bin/true"}}}));
  auto t0 = std::chrono::steady_clock::now();
  auto r = log().flush(std::chrono::milliseconds(300));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_NE(r.error().message().find("the audit log is behind"), std::string::npos)
      << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  ASSERT_TRUE(log().flush());
  EXPECT_EQ(verify("sb_a").events, 2);
}

TEST_F(AuditLogTest, ChainContinuesAfterReopen) {
  fill("sb_a", 3);
  log_.reset();
  fill("sb_a", 3);  // a new AuditLog: same key file, chain head read from the database
  auto rep = verify("sb_a");
  EXPECT_TRUE(rep.ok) << rep.problem;
  EXPECT_EQ(rep.events, 6);
  EXPECT_EQ(log().read("sb_a", 0, 100)->back().seq, 6);
}

TEST_F(AuditLogTest, AnotherKeyFailsVerification) {
  fill("sb_a", 2);
  log_.reset();
  fs::remove(dir_ / "audit.key");
  EXPECT_FALSE(verify("sb_a").ok);
}

TEST_F(AuditLogTest, FullQueueBlocksAndNothingIsDropped) {
  AuditLog& l = log({.queue_limit = 4, .batch = 2});
  std::atomic<int> done{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        if (l.append("sb_q", "proc.exec", {{"t", t}, {"i", i}})) done++;
      }
    });
  for (auto& t : ts) t.join();
  ASSERT_TRUE(l.flush());
  EXPECT_EQ(done.load(), 2000);
  EXPECT_GT(l.blocked_appends(), 0u);
  auto rep = verify("sb_q");
  EXPECT_TRUE(rep.ok) << rep.problem;
  EXPECT_EQ(rep.events, 2000);
}

TEST_F(AuditLogTest, RetentionPrunesOnlyOldDestroyedSandboxes) {
  fill("sb_old", 2);
  ASSERT_TRUE(log().append("sb_old", "sandbox.destroy", {{"reason", "test"}}));
  fill("sb_live", 2);
  ASSERT_TRUE(log().flush());
  auto n = log().prune_destroyed(1.0);  // destroyed before 1970: nothing
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 0);
  n = log().prune_destroyed(4e9);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 3);
  EXPECT_FALSE(*log().has_events("sb_old"));
  EXPECT_TRUE(*log().has_events("sb_live"));
}

TEST(OutputDigestTest, HeadTailAndHash) {
  OutputDigest d(4);
  d.add("ab");
  d.add("cdefgh");
  d.add("ij");
  json j = d.finish();
  EXPECT_EQ(j["bytes"], 10);
  EXPECT_EQ(j["head_b64"], "YWJjZA==");  // "abcd"
  EXPECT_EQ(j["tail_b64"], "Z2hpag==");  // "ghij"
  EXPECT_EQ(j["truncated"], true);
  Sha256 s;
  s.update("abcdefghij");
  EXPECT_EQ(j["sha256"], s.hex());
  OutputDigest e;
  json k = e.finish();
  EXPECT_EQ(k["sha256"], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_FALSE(k.contains("tail_b64"));
}

}  // namespace
}  // namespace space::audit
