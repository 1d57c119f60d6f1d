// Snapshot retention (daemon/retention.h) with an injected clock: the tiers keep dense recent
// and thinner older snapshots per sandbox, manual ones live keep_manual_s, nothing outlives the
// last tier; and, on a real snapshot store whose clock is injected too, dropping what
// retention says and collecting garbage frees exactly the chunks no kept snapshot uses while
// the kept ones still restore.
#include "daemon/retention.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "snapshot/cas.h"

namespace space::daemon {
namespace {

constexpr double kHour = 3600, kDay = 86400;

SnapshotConfig default_policy() { return SnapshotConfig{}; }  // 1h all, 1d hourly, 7d daily

std::set<std::string> drops(const std::vector<SnapshotAge>& s, const SnapshotConfig& p,
                            double now) {
  auto v = retention_drops(s, p, now);
  return {v.begin(), v.end()};
}

TEST(Retention, KeepsEverythingInTheFirstHour) {
  double now = 1'000'000 * kHour;
  std::vector<SnapshotAge> s;
  for (int i = 0; i < 60; ++i) s.push_back({"s" + std::to_string(i), "sb", false, now - i * 60.0});
  EXPECT_TRUE(drops(s, default_policy(), now).empty());
}

TEST(Retention, ThinsOlderSnapshotsToOnePerWindow) {
  double now = 1'000'000 * kHour;  // on an hour boundary
  std::vector<SnapshotAge> s;
  // Every 10 minutes for 3 days: 432 snapshots.
  for (int i = 0; i < 6 * 72; ++i)
    s.push_back({"s" + std::to_string(i), "sb", false, now - i * 600.0 - 1});
  auto d = drops(s, default_policy(), now);
  std::vector<const SnapshotAge*> kept;
  for (auto& x : s)
    if (!d.count(x.id)) kept.push_back(&x);
  // First hour: 6 (every one); hours 1-24: one per hour; days 1-3: one per day window.
  size_t first_hour = 0, first_day = 0, older = 0;
  for (auto* k : kept) {
    double age = now - k->created_at;
    if (age <= kHour)
      ++first_hour;
    else if (age <= kDay)
      ++first_day;
    else
      ++older;
  }
  EXPECT_EQ(first_hour, 6u);
  EXPECT_GE(first_day, 23u);
  EXPECT_LE(first_day, 24u);
  EXPECT_GE(older, 2u);
  EXPECT_LE(older, 3u);
  // In each window the newest is the one kept.
  for (auto* k : kept) {
    double age = now - k->created_at;
    if (age <= kHour || age > kDay) continue;
    for (auto& x : s) {
      double xa = now - x.created_at;
      if (xa > kHour && xa <= kDay &&
          std::floor(x.created_at / kHour) == std::floor(k->created_at / kHour)) {
        EXPECT_LE(x.created_at, k->created_at);
      }
    }
  }
}

TEST(Retention, NothingOutlivesTheLastTier) {
  double now = 500 * kDay;
  std::vector<SnapshotAge> s = {{"a", "sb", false, now - 7 * kDay - 1},
                                {"b", "sb", false, now - 6 * kDay},
                                {"m", "sb", true, now - 7 * kDay - 1},
                                {"n", "sb", true, now - 6 * kDay}};
  EXPECT_EQ(drops(s, default_policy(), now), (std::set<std::string>{"a", "m"}));
}

TEST(Retention, SandboxesAreThinnedSeparately) {
  double now = 1000 * kDay;
  std::vector<SnapshotAge> s = {{"a1", "sb_a", false, now - 2 * kHour - 10},
                                {"a2", "sb_a", false, now - 2 * kHour - 20},
                                {"b1", "sb_b", false, now - 2 * kHour - 15}};
  // a1 and a2 share an hour window: a2 (older) goes; b1 is sb_b's only one.
  EXPECT_EQ(drops(s, default_policy(), now), (std::set<std::string>{"a2"}));
}

TEST(Retention, ManualSnapshotsAreNotThinned) {
  double now = 1000 * kDay;
  std::vector<SnapshotAge> s;
  for (int i = 0; i < 10; ++i)
    s.push_back({"m" + std::to_string(i), "sb", true, now - 3 * kDay - i});
  EXPECT_TRUE(drops(s, default_policy(), now).empty());
}

TEST(Retention, FutureSnapshotsAreKept) {
  double now = 1000 * kDay;
  EXPECT_TRUE(drops({{"f", "sb", false, now + 3600}}, default_policy(), now).empty());
}

TEST(Retention, DeadlineIsTheLastTierOrKeepManual) {
  SnapshotConfig p;
  p.keep_manual_s = 2 * kDay;
  EXPECT_EQ(retention_deadline(true, 100, p), 100 + 2 * kDay);
  EXPECT_EQ(retention_deadline(false, 100, p), 100 + 7 * kDay);
}

// The whole cycle on a real store: a sandbox's workspace snapshotted every 30 minutes for 3
// days (the store's clock injected), each time with one new 256 KiB file of random bytes and
// one file removed; then retention at "now" and gc.
TEST(Retention, DropAndGcOnARealStore) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/space-retention-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path root = tmpl;
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{root};
  fs::path work = root / "work";
  fs::create_directories(work);

  double clock = 1000 * kDay;
  snapshot::StoreOptions opts;
  opts.clock = [&clock] { return clock; };
  auto store = snapshot::Store::open(root / "store", std::string(32, 'k'), opts);
  ASSERT_TRUE(store) << store.error().message();

  std::mt19937_64 rng(7);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  std::vector<SnapshotAge> ages;
  std::map<std::string, std::set<std::string>> files_of;  // snapshot -> file names in it
  std::set<std::string> present;
  const int kSnaps = 3 * 48;
  for (int i = 0; i < kSnaps; ++i) {
    std::string name = "f" + std::to_string(i);
    std::ofstream(work / name, std::ios::binary) << random_bytes(256 << 10);
    present.insert(name);
    if (i >= 4) {
      fs::remove(work / ("f" + std::to_string(i - 4)));
      present.erase("f" + std::to_string(i - 4));
    }
    int dir = ::open(work.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir, 0);
    std::string id = "snap_" + std::to_string(1000 + i);
    auto m = (*store)->take(dir, id, nullptr, {});
    ::close(dir);
    ASSERT_TRUE(m) << m.error().message();
    ages.push_back({id, "sb", false, clock});
    files_of[id] = present;
    clock += 1800;
  }
  double now = clock;
  auto before = (*store)->stats();
  auto dropped = retention_drops(ages, SnapshotConfig{}, now);
  ASSERT_FALSE(dropped.empty());
  for (auto& id : dropped) ASSERT_TRUE((*store)->remove(id));
  auto g = (*store)->gc();
  ASSERT_TRUE(g) << g.error().message();
  auto after = (*store)->stats();
  EXPECT_GT(g->chunks, 0u);
  EXPECT_EQ(after.chunks + g->chunks, before.chunks);

  // What is kept still restores, exactly the files it had; nothing it needs was collected.
  std::set<std::string> gone(dropped.begin(), dropped.end());
  size_t kept = 0;
  for (auto& a : ages) {
    if (gone.count(a.id)) continue;
    ++kept;
    auto m = (*store)->load(a.id);
    ASSERT_TRUE(m) << m.error().message();
    fs::path out = root / ("out-" + a.id);
    fs::create_directories(out);
    int dir = ::open(out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    auto r = (*store)->restore(*m, dir);
    ::close(dir);
    ASSERT_TRUE(r) << a.id << ": " << r.error().message();
    std::set<std::string> names;
    for (auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
    EXPECT_EQ(names, files_of[a.id]) << a.id;
    fs::remove_all(out);
  }
  // 1h: 2 (every 30 min), then hourly to 24h, then one per day window: far fewer than 144.
  EXPECT_GE(kept, 24u);
  EXPECT_LE(kept, 30u);
  // The chunks left are those of the kept snapshots' files: about 4 files of 256 KiB each
  // (one or more chunks per file), never more than the kept snapshots could reference.
  EXPECT_LE(after.chunks, kept * 4 + 4);
}

}  // namespace
}  // namespace space::daemon
