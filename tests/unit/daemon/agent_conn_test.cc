// AgentConn against a hand-driven peer on a socketpair: the daemon must survive and contain
// whatever an (untrusted) agent sends.
#include "daemon/agent_conn.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "agent_peer.h"

namespace space::daemon {
namespace {

using proto::FrameType;
using namespace std::chrono_literals;

using Peer = testing::AgentPeer;

TEST(AgentConnTest, NeedsHello) {
  Peer p;
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 200ms);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kTimeout);
}

TEST(AgentConnTest, RejectsWrongVersion) {
  Peer p;
  p.send(FrameType::kHello, 0, R"({"version":99})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Code::kProtocol);
}

TEST(AgentConnTest, RequestResponseAndAgentErrors) {
  Peer p;
  p.send(FrameType::kHello, 0, R"({"version":1,"pid":1})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c) << c.error().message();
  std::thread agent([&] {
    auto f = p.recv();
    EXPECT_EQ(f.type, FrameType::kRequest);
    p.send(FrameType::kResponse, f.stream, R"({"ok":true,"x":5})");
    f = p.recv();
    p.send(FrameType::kResponse, f.stream,
           R"({"ok":false,"error":{"code":"not_found","message":"no such file","errno":2}})");
    f = p.recv();
    p.send(FrameType::kResponse, f.stream, "this is not json");
  });
  auto r = (*c)->request({{"op", "ps"}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["x"], 5);
  r = (*c)->request({{"op", "stat"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNotFound);
  EXPECT_EQ(r.error().sys_errno(), 2);
  r = (*c)->request({{"op", "stat"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  agent.join();
  EXPECT_TRUE((*c)->alive());
}

TEST(AgentConnTest, GarbageHeaderLosesChannelAndFailsStreams) {
  Peer p;
  p.send(FrameType::kHello, 0, R"({"version":1})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c);
  bool lost = false;
  (*c)->set_on_lost([&](const Error&) { lost = true; });
  auto s = (*c)->open_stream();
  p.raw(std::string("\xff\xff\xff\xff\x07\x00\x00\x00\x01\x00\x00\x00", 12));  // 4 GiB frame
  auto f = s->pop(std::chrono::steady_clock::now() + 2s);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code(), Code::kProtocol);
  EXPECT_FALSE((*c)->alive());
  EXPECT_TRUE(lost);
}

TEST(AgentConnTest, DaemonOnlyFrameTypeFromAgentIsAViolation) {
  Peer p;
  p.send(FrameType::kHello, 0, R"({"version":1})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c);
  p.send(FrameType::kExec, 5, R"({"argv":["sh"]})");
  for (int i = 0; i < 100 && (*c)->alive(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE((*c)->alive());
}

TEST(AgentConnTest, WindowOverrunIsAViolationAndCreditsRestoreIt) {
  Peer p;
  p.send(FrameType::kHello, 0, R"({"version":1})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c);
  auto s = (*c)->open_stream();
  std::string chunk(256 * 1024, 'x');
  for (int i = 0; i < 4; ++i) p.send(FrameType::kStdout, s->id(), chunk);  // exactly 1 MiB
  for (int i = 0; i < 4; ++i) {
    auto f = s->pop(std::chrono::steady_clock::now() + 2s);
    ASSERT_TRUE(f);
    (*c)->credit(*s, f->payload.size());
  }
  // Credited: another full window is fine.
  for (int i = 0; i < 4; ++i) p.send(FrameType::kStdout, s->id(), chunk);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s->pop(std::chrono::steady_clock::now() + 2s));
  EXPECT_TRUE((*c)->alive());
  // Not credited this time: one byte over the window breaks the channel.
  p.send(FrameType::kStdout, s->id(), "y");
  for (int i = 0; i < 100 && (*c)->alive(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE((*c)->alive());
}

TEST(AgentConnTest, FramesForUnknownStreamsAreDropped) {
  Peer p;
  p.send(FrameType::kHello, 0, R"({"version":1})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c);
  p.send(FrameType::kStdout, 12345, "stray");
  p.send(FrameType::kPong, 0, "x");
  auto s = (*c)->open_stream();
  p.send(FrameType::kExit, s->id(), R"({"exit_code":0})");
  auto f = s->pop(std::chrono::steady_clock::now() + 2s);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kExit);
  EXPECT_TRUE((*c)->alive());
}

TEST(AgentConnTest, PeerCloseIsReported) {
  Peer p;
  p.send(FrameType::kHello, 0, R"({"version":1})");
  auto c = AgentConn::open(p.daemon_end.get(), "t", false, 2s);
  ASSERT_TRUE(c);
  auto s = (*c)->open_stream();
  p.agent_end.reset();
  auto f = s->pop(std::chrono::steady_clock::now() + 2s);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace space::daemon
