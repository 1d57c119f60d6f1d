// The agent's egress listener (--egress-listen) driven frame by frame: the test plays the
// daemon on the channel and a guest client on the listener, and checks the wire contract of
// docs/agent-protocol.md, "Egress" (connect, response, data/EOF, credit window, reset).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <set>
#include <thread>

#include "agent_client.h"

namespace space::agent::testing {
namespace {

uint16_t free_port() { return free_loopback_port(SOCK_STREAM); }

UniqueFd guest_connect(uint16_t port) { return connect_loopback(SOCK_STREAM, port); }

// Reads what is there within `timeout`; *state: 0 EOF, errno on error, -1 still open.
std::string guest_read(int fd, int* state, std::chrono::milliseconds timeout = 3000ms) {
  std::string out;
  char buf[65536];
  *state = -1;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return out;
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      timeout = 100ms;  // then only what follows promptly
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    *state = n == 0 ? 0 : errno;
    return out;
  }
}

struct EgressAgent {
  uint16_t port = free_port();
  AgentClient agent{{"--egress-listen", "127.0.0.1:" + std::to_string(port)}};
  EgressAgent() { agent.hello(); }
  // A guest connection and the agent's connect frame for it.
  std::pair<UniqueFd, uint32_t> open() {
    UniqueFd g = guest_connect(port);
    auto f = agent.next_any();
    if (!f || f->type != FrameType::kConnect) {
      ADD_FAILURE() << "no connect frame";
      return {std::move(g), 0};
    }
    EXPECT_EQ(json::parse(f->payload), json({{"port", port}}));
    EXPECT_TRUE(proto::is_agent_stream(f->stream)) << f->stream;
    return {std::move(g), f->stream};
  }
};

TEST(AgentEgress, ConnectDataEofAndCredit) {
  SKIP_WITHOUT_AGENT();
  EgressAgent a;
  auto [g, s] = a.open();
  ASSERT_NE(s, 0u);
  // Nothing from the guest is forwarded before the daemon accepts the connection.
  ASSERT_EQ(::send(g.get(), "early", 5, 0), 5);
  EXPECT_FALSE(a.agent.next(s, 200ms));
  a.agent.send_json(FrameType::kResponse, s, {{"ok", true}});
  auto f = a.agent.next(s);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kData);
  EXPECT_EQ(f->payload, "early");
  // Daemon -> guest bytes, credited once written into the guest socket.
  a.agent.send(FrameType::kData, s, "reply");
  f = a.agent.next(s);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kCredit);
  EXPECT_EQ(json::parse(f->payload), json({{"bytes", 5}}));
  int st;
  EXPECT_EQ(guest_read(g.get(), &st, 1000ms), "reply");
  EXPECT_EQ(st, -1);
  // Guest EOF -> empty data; daemon EOF -> the guest reads EOF; the agent then forgets the
  // stream (later frames for it are ignored).
  ::shutdown(g.get(), SHUT_WR);
  f = a.agent.next(s);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kData);
  EXPECT_EQ(f->payload, "");
  a.agent.send(FrameType::kData, s, "");
  guest_read(g.get(), &st);
  EXPECT_EQ(st, 0);
  a.agent.send(FrameType::kData, s, "late");
  EXPECT_FALSE(a.agent.next(s, 200ms));
  // The agent still answers on its channel.
  EXPECT_EQ(a.agent.request(1, {{"op", "ps"}}).value("ok", false), true);
}

TEST(AgentEgress, HonoursItsWindowUntilCredited) {
  SKIP_WITHOUT_AGENT();
  EgressAgent a;
  auto [g, s] = a.open();
  a.agent.send_json(FrameType::kResponse, s, {{"ok", true}});
  std::string big(3u << 20, 'w');
  std::thread writer([&, fd = g.get()] {
    size_t off = 0;
    while (off < big.size()) {
      ssize_t n = ::send(fd, big.data() + off, big.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  });
  size_t got = 0;
  while (auto f = a.agent.next(s, 500ms)) got += f->payload.size();
  EXPECT_EQ(got, proto::kStreamWindow) << "the agent must stop at one window without credit";
  a.agent.send_json(FrameType::kCredit, s, {{"bytes", got}});
  while (auto f = a.agent.next(s, 500ms)) {
    got += f->payload.size();
    a.agent.send_json(FrameType::kCredit, s, {{"bytes", f->payload.size()}});
  }
  EXPECT_EQ(got, big.size());
  writer.join();
}

TEST(AgentEgress, RefusalAndResetsAbortTheGuestConnection) {
  SKIP_WITHOUT_AGENT();
  EgressAgent a;
  int st;
  {  // The daemon refuses (dial failed): the guest sees a reset.
    auto [g, s] = a.open();
    a.agent.send_json(FrameType::kResponse, s,
                      {{"ok", false}, {"error", {{"code", "unavailable"}, {"message", "x"}}}});
    guest_read(g.get(), &st);
    EXPECT_EQ(st, ECONNRESET);
  }
  {  // The daemon resets an open connection.
    auto [g, s] = a.open();
    a.agent.send_json(FrameType::kResponse, s, {{"ok", true}});
    a.agent.send(FrameType::kReset, s, "");
    guest_read(g.get(), &st);
    EXPECT_EQ(st, ECONNRESET);
  }
  {  // Data before the connect was answered is a daemon bug: reset both ways.
    auto [g, s] = a.open();
    a.agent.send(FrameType::kData, s, "too soon");
    auto f = a.agent.next(s);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->type, FrameType::kReset);
    guest_read(g.get(), &st);
    EXPECT_EQ(st, ECONNRESET);
  }
  {  // A daemon that overruns the agent's buffer (guest not reading) is reset, not buffered.
    auto [g, s] = a.open();
    a.agent.send_json(FrameType::kResponse, s, {{"ok", true}});
    int small = 4096;
    ::setsockopt(g.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    std::string chunk(proto::kMaxPayload, 'o');
    bool reset = false;
    for (int i = 0; i < 8 && !reset; ++i) {
      a.agent.send(FrameType::kData, s, chunk);
      while (auto f = a.agent.next(s, 100ms)) reset = reset || f->type == FrameType::kReset;
    }
    EXPECT_TRUE(reset);
  }
  {  // The guest resets: the daemon gets `reset`.
    auto [g, s] = a.open();
    a.agent.send_json(FrameType::kResponse, s, {{"ok", true}});
    linger l{1, 0};
    ::setsockopt(g.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    g.reset();
    auto f = a.agent.next(s);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->type, FrameType::kReset);
  }
}

TEST(AgentEgress, BoundsConnectionsAndDropsThemWithTheChannel) {
  SKIP_WITHOUT_AGENT();
  EgressAgent a;
  std::vector<UniqueFd> guests;
  std::set<uint32_t> streams;
  for (size_t i = 0; i < proto::kMaxEgressConns; ++i) {
    auto [g, s] = a.open();
    guests.push_back(std::move(g));
    streams.insert(s);
  }
  EXPECT_EQ(streams.size(), proto::kMaxEgressConns) << "stream ids must be unique";
  UniqueFd extra = guest_connect(a.port);
  int st;
  guest_read(extra.get(), &st);
  EXPECT_NE(st, -1) << "the connection over the bound must be closed";
  EXPECT_FALSE(a.agent.next_any(200ms)) << "no connect for a refused connection";
  // Channel loss: every carried connection is aborted.
  ::shutdown(a.agent.channel_fd(), SHUT_RDWR);
  for (auto& g : guests) {
    guest_read(g.get(), &st);
    ASSERT_EQ(st, ECONNRESET);
  }
}

TEST(AgentEgress, ListenFailureIsReported) {
  SKIP_WITHOUT_AGENT();
  // An address the host does not have: bind fails and the agent exits saying why.
  AgentClient agent({"--egress-listen", "192.0.2.1:3128"});
  EXPECT_FALSE(agent.next(0, 3000ms)) << "the agent said hello despite the bad listen address";
  EXPECT_TRUE(agent.eof()) << "the agent should have exited, closing its channel";
}

}  // namespace
}  // namespace space::agent::testing
