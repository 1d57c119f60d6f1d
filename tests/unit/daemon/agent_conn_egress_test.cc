// AgentConn's agent-initiated (egress) streams against a hand-driven, hostile peer: every
// malformed or out-of-range connect is contained, the per-agent bound holds, and connects that
// arrive before the owner installs its handler are not lost.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <thread>
#include <vector>

#include "agent_peer.h"
#include "daemon/agent_conn.h"

namespace space::daemon {
namespace {

using proto::FrameType;
using namespace std::chrono_literals;
constexpr uint32_t kA = proto::kAgentStreamBit;

using Peer = testing::ConnectedPeer;

struct Collected {
  std::mutex mu;
  std::vector<std::pair<std::shared_ptr<Stream>, uint16_t>> got;
  AgentConn::AgentStreamHandler handler() {
    return [this](std::shared_ptr<Stream> s, uint16_t port) {
      std::lock_guard lock(mu);
      got.emplace_back(std::move(s), port);
    };
  }
  size_t size() {
    std::lock_guard lock(mu);
    return got.size();
  }
};

TEST(AgentConnEgress, ConnectsBeforeTheHandlerAreKeptAndRouted) {
  Peer p;
  ASSERT_TRUE(p.conn);
  p.send(FrameType::kConnect, kA | 7, R"({"port":3128})");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(p.conn->agent_streams(), 1u);
  Collected c;
  p.conn->set_on_agent_stream(c.handler());
  ASSERT_EQ(c.size(), 1u);
  auto& [s, port] = c.got[0];
  EXPECT_EQ(s->id(), kA | 7);
  EXPECT_EQ(port, 3128);
  ASSERT_TRUE(p.conn->accept_agent_stream(*s));
  auto ok = p.recv();
  EXPECT_EQ(ok.type, FrameType::kResponse);
  EXPECT_EQ(ok.stream, kA | 7);
  EXPECT_EQ(nlohmann::json::parse(ok.payload)["ok"], true);
  p.send(FrameType::kData, kA | 7, "bytes");
  auto f = s->pop(Clock::now() + 2s);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->payload, "bytes");
  p.send(FrameType::kReset, kA | 7, "");
  f = s->pop(Clock::now() + 2s);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kReset);
  p.conn->close_stream(s->id());
  EXPECT_EQ(p.conn->agent_streams(), 0u);
  // Daemon-chosen ids never carry the agent's bit.
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(proto::is_agent_stream(p.conn->open_stream()->id()));
  EXPECT_TRUE(p.conn->alive());
}

TEST(AgentConnEgress, MalformedConnectsCloseTheChannel) {
  struct Case {
    FrameType type;
    uint32_t stream;
    const char* payload;
  };
  for (const Case& k : {Case{FrameType::kConnect, kA | 1, "not json"},
                        Case{FrameType::kConnect, kA | 1, R"({"port":"3128"})"},
                        Case{FrameType::kConnect, kA | 1, R"({"port":0})"},
                        Case{FrameType::kConnect, kA | 1, R"({"port":65536})"},
                        Case{FrameType::kConnect, kA | 1, R"([1])"},
                        Case{FrameType::kConnect, 5, R"({"port":3128})"},  // daemon range
                        Case{FrameType::kReset, 5, ""}}) {
    Peer p;
    ASSERT_TRUE(p.conn);
    Collected c;
    p.conn->set_on_agent_stream(c.handler());
    p.send(k.type, k.stream, k.payload);
    EXPECT_TRUE(p.lost_within(2s)) << k.payload;
    EXPECT_EQ(c.size(), 0u);
  }
  {  // A connect on an id that is already open.
    Peer p;
    Collected c;
    p.conn->set_on_agent_stream(c.handler());
    p.send(FrameType::kConnect, kA | 1, R"({"port":1})");
    p.send(FrameType::kConnect, kA | 1, R"({"port":1})");
    EXPECT_TRUE(p.lost_within(2s));
  }
  {  // Data before the daemon accepted the connection (here: nobody serves it, as on a
     // sandbox without an egress relay): the daemon must not buffer it.
    Peer p;
    p.send(FrameType::kConnect, kA | 1, R"({"port":1})");
    p.send(FrameType::kData, kA | 1, "unasked");
    EXPECT_TRUE(p.lost_within(2s));
  }
  {  // Overrunning the window on an egress stream.
    Peer p;
    Collected c;
    p.conn->set_on_agent_stream(c.handler());
    p.send(FrameType::kConnect, kA | 1, R"({"port":1})");
    for (int i = 0; i < 200 && c.size() == 0; ++i) std::this_thread::sleep_for(5ms);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_TRUE(p.conn->accept_agent_stream(*c.got[0].first));
    std::string chunk(proto::kMaxPayload, 'x');
    p.send(FrameType::kData, kA | 1, chunk);
    p.send(FrameType::kData, kA | 1, "1");
    EXPECT_TRUE(p.lost_within(2s));
  }
}

TEST(AgentConnEgress, BoundIsEnforcedWithAnErrorResponse) {
  Peer p;
  ASSERT_TRUE(p.conn);
  Collected c;
  p.conn->set_on_agent_stream(c.handler());
  for (uint32_t i = 1; i <= proto::kMaxEgressConns; ++i)
    p.send(FrameType::kConnect, kA | i, R"({"port":3128})");
  p.send(FrameType::kConnect, kA | 9999, R"({"port":3128})");
  auto f = p.recv();
  EXPECT_EQ(f.type, FrameType::kResponse);
  EXPECT_EQ(f.stream, kA | 9999);
  auto j = nlohmann::json::parse(f.payload);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["error"]["code"], "resource_exhausted");
  EXPECT_EQ(c.size(), proto::kMaxEgressConns);
  EXPECT_TRUE(p.conn->alive());
  // A finished stream frees its slot.
  p.conn->close_stream(kA | 1);
  p.send(FrameType::kConnect, kA | 10000, R"({"port":3128})");
  for (int i = 0; i < 200 && c.size() <= proto::kMaxEgressConns; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(c.size(), proto::kMaxEgressConns + 1);
}

}  // namespace
}  // namespace space::daemon
