// Guest-reported execs on the daemon's side (daemon/guest_exec_audit.h): records become
// "proc.exec" events marked guest_reported; a storm is cut by the per-sandbox token bucket and
// the cut is counted in "proc.exec_dropped" events (at most one a second, and one at the end),
// together with the agent's own drops and the records that were not valid; a malformed payload
// is an error. And through AgentConn: `proc_exec` frames reach the handler, also those that
// came before it was set, and one on the wrong stream closes the channel.
#include "daemon/guest_exec_audit.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent_peer.h"
#include "daemon/agent_conn.h"
#include "proto/exec_report.h"

namespace space::daemon {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct Recorded {
  std::string kind;
  json data;
};

struct Fixture {
  double now = 100;
  std::vector<Recorded> events;
  GuestExecAudit audit;
  explicit Fixture(GuestExecAudit::Limits l)
      : audit(
            l,
            [this](const std::string& k, json d) {
              events.push_back({k, std::move(d)});
            },
            [this] { return now; }) {}
  size_t count(const std::string& kind) const {
    size_t n = 0;
    for (auto& e : events) n += e.kind == kind;
    return n;
  }
  const json* last(const std::string& kind) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it)
      if (it->kind == kind) return &it->data;
    return nullptr;
  }
};

std::string exec_record(int pid, const std::string& arg0 = "true") {
  return json{{"syscall", "execve"},
              {"pid", pid},
              {"ppid", 1},
              {"uid", 0},
              {"cwd", "/"},
              {"path", "/bin/" + arg0},
              {"resolved", "/bin/" + arg0},
              {"argv", {arg0}},
              {"stream", 3}}
      .dump();
}

std::string report(int n, uint64_t dropped = 0, int first_pid = 10) {
  std::vector<std::string> r;
  for (int i = 0; i < n; ++i) r.push_back(exec_record(first_pid + i));
  return proto::encode_exec_report(r, dropped);
}

TEST(GuestExecAudit, RecordsAreMarkedGuestReported) {
  Fixture f({.per_s = 10, .burst = 10});
  ASSERT_TRUE(f.audit.on_report(report(2)));
  ASSERT_EQ(f.events.size(), 2u);
  EXPECT_EQ(f.events[0].kind, "proc.exec");
  EXPECT_EQ(f.events[0].data["guest_reported"], true);
  EXPECT_EQ(f.events[0].data["pid"], 10);
  EXPECT_EQ(f.events[0].data["argv"], json({"true"}));
  EXPECT_EQ(f.events[0].data["stream"], 3);
  EXPECT_FALSE(f.last("proc.exec_dropped"));  // nothing was dropped
}

TEST(GuestExecAudit, AStormIsCutToTheBucketAndCounted) {
  Fixture f({.per_s = 10, .burst = 50});
  // 2000 execs in one go: the burst passes, the rest is counted.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(f.audit.on_report(report(100, 0, 1 + i * 100)));
  EXPECT_EQ(f.count("proc.exec"), 50u);
  EXPECT_EQ(f.audit.totals().rate_limited, 1950u);
  // Reported at once the first time, then at most once a second: one event so far.
  ASSERT_EQ(f.count("proc.exec_dropped"), 1u);
  EXPECT_EQ((*f.last("proc.exec_dropped"))["rate_limited"], 50u);
  // A second later the bucket has 10 more and the pending drops go out.
  f.now += 1.0;
  ASSERT_TRUE(f.audit.on_report(report(20)));
  EXPECT_EQ(f.count("proc.exec"), 60u);
  ASSERT_EQ(f.count("proc.exec_dropped"), 2u);
  const json& d = *f.last("proc.exec_dropped");
  EXPECT_EQ(d["rate_limited"], 1900u + 10u);
  EXPECT_EQ(d["count"], 1910u);
  // Every record is either recorded or counted.
  uint64_t counted = 0;
  for (auto& e : f.events)
    if (e.kind == "proc.exec_dropped") counted += e.data["count"].get<uint64_t>();
  EXPECT_EQ(f.count("proc.exec") + counted, 2020u);
}

TEST(GuestExecAudit, FinishWritesWhatIsPending) {
  Fixture f({.per_s = 1, .burst = 1});
  ASSERT_TRUE(f.audit.on_report(report(1)));
  ASSERT_TRUE(f.audit.on_report(report(1)));  // dropped, reported at once (the first drop)
  ASSERT_TRUE(f.audit.on_report(report(3)));  // dropped, pending (within the second)
  EXPECT_EQ(f.count("proc.exec_dropped"), 1u);
  f.audit.finish();
  ASSERT_EQ(f.count("proc.exec_dropped"), 2u);
  EXPECT_EQ((*f.last("proc.exec_dropped"))["count"], 3u);
  f.audit.finish();  // nothing more
  EXPECT_EQ(f.count("proc.exec_dropped"), 2u);
}

TEST(GuestExecAudit, CountsTheGuestsDropsAndMalformedRecords) {
  Fixture f({.per_s = 100, .burst = 100});
  std::vector<std::string> r = {exec_record(5), R"({"syscall":"execve","pid":"x"})", "7"};
  ASSERT_TRUE(f.audit.on_report(proto::encode_exec_report(r, 12)));
  EXPECT_EQ(f.count("proc.exec"), 1u);
  const json* d = f.last("proc.exec_dropped");
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)["dropped_by_guest"], 12u);
  EXPECT_EQ((*d)["malformed"], 2u);
  EXPECT_EQ((*d)["rate_limited"], 0u);
  EXPECT_EQ((*d)["count"], 14u);
}

TEST(GuestExecAudit, BigRecordsCostMore) {
  Fixture f({.per_s = 1, .burst = 20});
  json big = json::parse(exec_record(1));
  big["argv"] = {std::string(4096, 'a'), std::string(4096, 'b'), std::string(4096, 'c')};
  // 1 + 12 KiB / 4 KiB = 4 tokens each: 5 fit in 20.
  std::vector<std::string> r(8, big.dump());
  ASSERT_TRUE(f.audit.on_report(proto::encode_exec_report(r, 0)));
  EXPECT_EQ(f.count("proc.exec"), 5u);
  EXPECT_EQ(f.audit.totals().rate_limited, 3u);
}

TEST(GuestExecAudit, MalformedPayloadIsAnError) {
  Fixture f({});
  auto r = f.audit.on_report("{\"events\":3}");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_TRUE(f.events.empty());
}

// --- through AgentConn -------------------------------------------------------------------

using Peer = testing::AgentPeer;

template <class F>
bool eventually(F f, std::chrono::milliseconds timeout = 3000ms) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return f();
}

TEST(GuestExecAuditConn, ReportsBeforeTheHandlerWaitForIt) {
  Peer p;
  p.send(proto::FrameType::kHello, 0, R"({"version":1,"pid":1})");
  // The backlog an agent sends right after hello (a reattach).
  p.send(proto::FrameType::kProcExec, 0, report(2));
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c) << c.error().message();
  std::this_thread::sleep_for(50ms);  // let the reader take the backlog
  std::mutex mu;
  int seen = 0;
  (*c)->set_on_exec_report([&](std::string_view payload) -> Result<void> {
    auto r = TRY(proto::decode_exec_report(payload));
    std::lock_guard lock(mu);
    seen += static_cast<int>(r.events.size());
    return {};
  });
  p.send(proto::FrameType::kProcExec, 0, report(3));
  EXPECT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return seen == 5;
  }));
  EXPECT_TRUE((*c)->alive());
}

TEST(GuestExecAuditConn, BadReportsCloseTheChannel) {
  for (auto [stream, payload] : {std::pair<uint32_t, std::string>{7, report(1)},
                                 std::pair<uint32_t, std::string>{0, "{\"events\":1}"}}) {
    Peer p;
    p.send(proto::FrameType::kHello, 0, R"({"version":1,"pid":1})");
    auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
    ASSERT_TRUE(c) << c.error().message();
    (*c)->set_on_exec_report([](std::string_view payload) -> Result<void> {
      TRY_VOID(proto::decode_exec_report(payload));
      return {};
    });
    p.send(proto::FrameType::kProcExec, stream, payload);
    EXPECT_TRUE(eventually([&] { return !(*c)->alive(); })) << stream;
  }
}

TEST(GuestExecAuditConn, WithoutAHandlerReportsAreDroppedNotFatal) {
  Peer p;
  p.send(proto::FrameType::kHello, 0, R"({"version":1,"pid":1})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c);
  // Far beyond what is kept waiting for a handler.
  std::string big = report(2000);
  for (int i = 0; i < 40; ++i) p.send(proto::FrameType::kProcExec, 0, big);
  p.send(proto::FrameType::kPong, 0, "");
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE((*c)->alive());
}

}  // namespace
}  // namespace space::daemon
