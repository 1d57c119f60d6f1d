// The daemon's components with a lock of their own (docs/architecture.md, "Locks"): the
// registry's admission, the push queue's order and hand-back, the warm pools' claims and stop.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "daemon/pool.h"
#include "daemon/push_queue.h"
#include "daemon/registry.h"

namespace space::daemon {
namespace {

std::shared_ptr<Sandbox> sandbox(const std::string& id) {
  auto sb = std::make_shared<Sandbox>();
  sb->rec.id = id;
  return sb;
}

TEST(Registry, AdmissionCountsCreatesInFlight) {
  Registry reg;
  auto a = reg.admit(2);
  ASSERT_TRUE(a);
  auto b = reg.admit(2);
  ASSERT_TRUE(b);
  // Two creates in flight, none registered yet: a third is refused, saying so.
  auto c = reg.admit(2);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kResourceExhausted);
  EXPECT_NE(c.error().message().find("making 2 more"), std::string::npos) << c.error().message();
  reg.add(sandbox("sb_a"), &*a);
  EXPECT_EQ(reg.size(), 1u);
  EXPECT_FALSE(reg.admit(2));
  { auto gone = std::move(*b); }  // a create that failed gives its slot back
  EXPECT_TRUE(reg.admit(2));
}

TEST(Registry, ConcurrentAdmissionsNeverPassTheLimit) {
  Registry reg;
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  std::vector<Registry::Slot> held(64);
  for (int i = 0; i < 64; ++i)
    threads.emplace_back([&, i] {
      if (auto s = reg.admit(10)) {
        admitted++;
        held[i] = std::move(*s);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 10);
}

TEST(Registry, RemoveLeavesAReplacementInPlace) {
  Registry reg;
  auto old = sandbox("sb_x"), fresh = sandbox("sb_x");
  reg.add(old);
  reg.add(fresh);  // a rollback's new object under the same id
  reg.remove("sb_x", old.get());
  EXPECT_EQ(reg.find("sb_x"), fresh);
  reg.remove("sb_x", fresh.get());
  EXPECT_EQ(reg.find("sb_x"), nullptr);
}

TEST(PushQueue, PushesInOrderAndHandsBackWhatWasWaitedFor) {
  PushQueue q;
  std::vector<std::string> order;
  std::mutex mu;
  q.start([&](const SnapshotRecord& r) -> Result<void> {
    std::lock_guard l(mu);
    order.push_back(r.id);
    if (r.id == "snap_bad") return fail(Code::kUnavailable, "store unreachable");
    return {};
  });
  SnapshotRecord a, b, bad;
  a.id = "snap_a";
  b.id = "snap_b";
  bad.id = "snap_bad";
  q.add(a);
  q.add(b);
  auto r = q.push_and_wait(bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "store unreachable");
  EXPECT_TRUE(q.push_and_wait(a));
  q.stop();
  EXPECT_EQ(order, (std::vector<std::string>{"snap_a", "snap_b", "snap_bad", "snap_a"}));
  // Stopped: a push someone would wait for is refused, not left hanging.
  EXPECT_FALSE(q.push_and_wait(b));
}

TEST(PushQueue, StopPushesWhatIsQueued) {
  PushQueue q;
  std::atomic<int> pushed{0};
  q.start([&](const SnapshotRecord&) -> Result<void> {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pushed++;
    return {};
  });
  for (int i = 0; i < 10; ++i) q.add(SnapshotRecord{});
  q.stop();
  EXPECT_EQ(pushed.load(), 10);
}

TEST(WarmPools, FillsClaimsAndDiscardsWhatIsLeftAtStop) {
  PoolConfig pc;
  pc.image = "img";
  pc.size = 3;
  WarmPools pools({pc});
  std::atomic<int> made{0}, discarded{0};
  pools.start(
      [&](const Template&) -> Result<Prepared> {
        Prepared p;
        p.sb = sandbox("sb_" + std::to_string(made++));
        return p;
      },
      [&](Prepared&, const std::string& why) {
        EXPECT_NE(why.find("stopped"), std::string::npos);
        discarded++;
      });
  Template t{pc.runtime, pc.image, pc.profile, pc.limits, "/elsewhere"};  // workdir aside
  for (int i = 0; i < 500 && pools.status()[0].ready < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(pools.status()[0].ready, 3u);
  auto got = pools.claim(t);
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->sb);
  Template other = t;
  other.image = "another";
  EXPECT_FALSE(pools.claim(other));  // no pool of that kind: not a miss either
  EXPECT_EQ(pools.using_image("img"), std::optional<std::string>("test"));
  pools.claimed();
  for (int i = 0; i < 500 && pools.status()[0].ready < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto st = pools.status()[0];
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 0u);
  pools.stop();
  EXPECT_EQ(discarded.load(), 3);
  EXPECT_FALSE(pools.claim(t));  // stopped: nothing ready
  pools.stop();                  // idempotent
  EXPECT_EQ(discarded.load(), 3);
}

}  // namespace
}  // namespace space::daemon
