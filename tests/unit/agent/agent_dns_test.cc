// The agent's DNS listener (--dns-listen) driven frame by frame: the test plays the daemon on
// the channel and guest resolvers on UDP sockets, and checks the wire contract of
// docs/agent-protocol.md, "DNS": one `dns` frame per query on a fresh agent stream, the answer
// back to the socket that asked, sizes and the in-flight bound enforced, stale answers ignored.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <set>

#include "agent_client.h"

namespace space::agent::testing {
namespace {

uint16_t free_udp_port() { return free_loopback_port(SOCK_DGRAM); }

// A guest resolver's socket, connected to the agent's DNS listener.
UniqueFd resolver(uint16_t port) { return connect_loopback(SOCK_DGRAM, port); }

// A datagram that looks like a query: id, then `size - 2` bytes of filler.
std::string query(uint16_t id, size_t size = 33) {
  std::string q(size, 'q');
  q[0] = static_cast<char>(id >> 8);
  q[1] = static_cast<char>(id & 0xff);
  return q;
}

std::optional<std::string> recv_answer(int fd, std::chrono::milliseconds timeout = 1000ms) {
  return recv_datagram(fd, timeout);
}

struct DnsAgent {
  uint16_t port = free_udp_port();
  AgentClient agent{{"--dns-listen", "127.0.0.1:" + std::to_string(port)}};
  DnsAgent() { agent.hello(); }
  // Sends `q` from `guest` and returns the stream of the agent's `dns` frame for it (0: none).
  uint32_t ask(int guest, const std::string& q) {
    EXPECT_EQ(::send(guest, q.data(), q.size(), 0), static_cast<ssize_t>(q.size()));
    auto f = agent.next_any(2000ms);
    if (!f || f->type != FrameType::kDns) {
      ADD_FAILURE() << "no dns frame";
      return 0;
    }
    EXPECT_EQ(f->payload, q) << "the query must travel unchanged";
    EXPECT_TRUE(proto::is_agent_stream(f->stream)) << f->stream;
    return f->stream;
  }
};

TEST(AgentDns, QueryTravelsAndTheAnswerReachesTheSocketThatAsked) {
  SKIP_WITHOUT_AGENT();
  DnsAgent a;
  UniqueFd g1 = resolver(a.port), g2 = resolver(a.port);
  // The same DNS id from two resolvers: the stream, not the id, says whose answer it is.
  uint32_t s1 = a.ask(g1.get(), query(0x1234));
  uint32_t s2 = a.ask(g2.get(), query(0x1234, 40));
  ASSERT_NE(s1, 0u);
  ASSERT_NE(s2, 0u);
  EXPECT_NE(s1, s2);
  a.agent.send(FrameType::kDns, s2, "answer for two");
  a.agent.send(FrameType::kDns, s1, "answer for one");
  EXPECT_EQ(recv_answer(g1.get()), "answer for one");
  EXPECT_EQ(recv_answer(g2.get()), "answer for two");
  // One answer per query: a second one on the same stream is ignored.
  a.agent.send(FrameType::kDns, s1, "again");
  EXPECT_FALSE(recv_answer(g1.get(), 200ms));
  // An empty answer is "no answer": nothing reaches the guest, the query is forgotten.
  uint32_t s3 = a.ask(g1.get(), query(7));
  a.agent.send(FrameType::kDns, s3, "");
  EXPECT_FALSE(recv_answer(g1.get(), 200ms));
  a.agent.send(FrameType::kDns, s3, "late");
  EXPECT_FALSE(recv_answer(g1.get(), 200ms));
  // Answers for streams the agent never used are dropped; the agent carries on.
  a.agent.send(FrameType::kDns, proto::kAgentStreamBit | 0x7777, "stray");
  EXPECT_EQ(a.agent.request(1, {{"op", "ps"}}).value("ok", false), true);
  EXPECT_FALSE(a.agent.next_any(200ms)) << "nothing goes to the daemon for a stray answer";
}

TEST(AgentDns, DatagramsOutsideTheSizeBoundsAreDropped) {
  SKIP_WITHOUT_AGENT();
  DnsAgent a;
  UniqueFd g = resolver(a.port);
  for (size_t size : {size_t{0}, size_t{1}, proto::kDnsHeaderSize - 1, proto::kMaxDnsDatagram + 1,
                      size_t{9000}}) {
    std::string d(size, 'x');
    ASSERT_EQ(::send(g.get(), d.data(), d.size(), 0), static_cast<ssize_t>(size));
  }
  EXPECT_FALSE(a.agent.next_any(300ms)) << "a datagram out of bounds was carried";
  // The bounds themselves are fine.
  EXPECT_NE(a.ask(g.get(), query(1, proto::kDnsHeaderSize)), 0u);
  EXPECT_NE(a.ask(g.get(), query(2, proto::kMaxDnsDatagram)), 0u);
}

TEST(AgentDns, AtMostTheBoundIsInFlightAndAnswersFreeSlots) {
  SKIP_WITHOUT_AGENT();
  DnsAgent a;
  UniqueFd g = resolver(a.port);
  int big = 1 << 20;
  ::setsockopt(g.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  const size_t flood = proto::kMaxDnsInFlight + 40;
  for (size_t i = 0; i < flood; ++i) {
    std::string q = query(static_cast<uint16_t>(i));
    ASSERT_EQ(::send(g.get(), q.data(), q.size(), 0), static_cast<ssize_t>(q.size()));
  }
  std::vector<uint32_t> streams;
  while (auto f = a.agent.next_any(500ms)) {
    ASSERT_EQ(f->type, FrameType::kDns);
    streams.push_back(f->stream);
  }
  EXPECT_EQ(streams.size(), proto::kMaxDnsInFlight) << "the agent must stop at its bound";
  EXPECT_EQ(std::set<uint32_t>(streams.begin(), streams.end()).size(), streams.size())
      << "stream ids must be unique";
  // An answer frees a slot: the next query goes out.
  a.agent.send(FrameType::kDns, streams[0], "done");
  EXPECT_EQ(recv_answer(g.get()), "done");
  EXPECT_NE(a.ask(g.get(), query(0xbeef)), 0u);
  std::string q = query(0xbeee);
  ASSERT_EQ(::send(g.get(), q.data(), q.size(), 0), static_cast<ssize_t>(q.size()));
  EXPECT_FALSE(a.agent.next_any(300ms)) << "full again";
}

TEST(AgentDns, ANewChannelForgetsTheOldOnesQueries) {
  SKIP_WITHOUT_AGENT();
  DnsAgent a;
  UniqueFd g = resolver(a.port);
  uint32_t s = a.ask(g.get(), query(9));
  ASSERT_NE(s, 0u);
  // A restarted daemon takes the spare: the old daemon's queries are gone with it.
  UniqueFd spare = std::move(a.agent.spare());
  a.agent.use_channel(std::move(spare));
  a.agent.send(FrameType::kPing, 0, "x");
  a.agent.hello();
  auto pong = a.agent.next(0);
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->type, FrameType::kPong);
  a.agent.send(FrameType::kDns, s, "answer of the old daemon");
  EXPECT_FALSE(recv_answer(g.get(), 300ms));
  // New queries flow on the new channel.
  uint32_t s2 = a.ask(g.get(), query(10));
  a.agent.send(FrameType::kDns, s2, "fresh");
  EXPECT_EQ(recv_answer(g.get()), "fresh");
}

TEST(AgentDns, ListenFailureIsReported) {
  SKIP_WITHOUT_AGENT();
  // An address the host does not have: bind fails and the agent exits saying why.
  AgentClient agent({"--dns-listen", "192.0.2.1:53"});
  EXPECT_FALSE(agent.next(0, 3000ms)) << "the agent said hello despite the bad listen address";
  EXPECT_TRUE(agent.eof()) << "the agent should have exited, closing its channel";
}

}  // namespace
}  // namespace space::agent::testing
