// DNS over the agent channel, the daemon's half: AgentConn's checks of `dns` frames against a
// hand-driven hostile peer, then end to end in one process tree: the REAL space-agent (child,
// --dns-listen) <-> socketpair <-> AgentConn + DnsRelay, whose socket reaches a UDP server this
// test runs in place of the gateway's DNS stub. A "guest" resolver sends to the agent's
// listener. Also the microVM layout with network namespaces: the agent in one (lo down at
// first) listening on 127.0.0.53:53, the stub in another at the same address.
#include "daemon/dns_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "../agent/agent_client.h"
#include "agent_peer.h"

namespace space::daemon {
namespace {

using agent::testing::AgentClient;
using proto::FrameType;
using namespace std::chrono_literals;
constexpr uint32_t kA = proto::kAgentStreamBit;

uint16_t udp_port(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

UniqueFd udp_bound(const char* ip = "127.0.0.1", uint16_t port = 0) {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &sa.sin_addr);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0)
      << ip << ":" << port << ": " << std::strerror(errno);
  return fd;
}

UniqueFd udp_connected(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

uint16_t free_udp_port() { return udp_port(udp_bound().get()); }

std::string query(uint16_t id, std::string_view name = "allowed.test") {
  std::string q(proto::kDnsHeaderSize, '\0');
  q[0] = static_cast<char>(id >> 8);
  q[1] = static_cast<char>(id & 0xff);
  q[2] = 0x01;  // RD
  q[5] = 1;     // QDCOUNT
  q += name;
  return q;
}
uint16_t id_of(std::string_view d) {
  return static_cast<uint16_t>(static_cast<uint8_t>(d[0]) << 8 | static_cast<uint8_t>(d[1]));
}

std::optional<std::string> recv_within(int fd, std::chrono::milliseconds timeout = 2000ms) {
  return agent::testing::recv_datagram(fd, timeout);
}

// The stand-in stub: a UDP socket answering each query with the query itself, QR set, plus
// "!answered"; or silent. Records the ids it saw.
class FakeStub {
 public:
  explicit FakeStub(bool answer = true, UniqueFd sock = udp_bound()) : sock_(std::move(sock)) {
    port_ = udp_port(sock_.get());
    timeval tv{0, 50'000};  // so that the thread sees stop_ soon
    ::setsockopt(sock_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    thread_ = std::thread([this, answer] {
      char buf[8192];
      while (!stop_) {
        sockaddr_in from{};
        socklen_t flen = sizeof from;
        ssize_t n =
            ::recvfrom(sock_.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &flen);
        if (n <= 0) continue;
        std::string d(buf, static_cast<size_t>(n));
        {
          std::lock_guard lock(mu_);
          ids_.push_back(id_of(d));
        }
        if (!answer) continue;
        d[2] = static_cast<char>(d[2] | 0x80);
        d += "!answered";
        ::sendto(sock_.get(), d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&from), flen);
      }
    });
  }
  ~FakeStub() {
    stop_ = true;
    thread_.join();
  }
  uint16_t port() const { return port_; }
  size_t seen() {
    std::lock_guard lock(mu_);
    return ids_.size();
  }
  DnsRelay::Open open() {
    return [p = port_]() -> Result<UniqueFd> { return udp_connected(p); };
  }

 private:
  UniqueFd sock_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<uint16_t> ids_;
};

// --- AgentConn: `dns` frames from a hostile peer ------------------------------------------------

using Peer = testing::ConnectedPeer;

TEST(AgentConnDns, QueriesReachTheHandlerWithTheirStream) {
  Peer p;
  ASSERT_TRUE(p.conn);
  // Without a handler a query is dropped, and the channel stays.
  p.send(FrameType::kDns, kA | 1, query(1));
  std::this_thread::sleep_for(50ms);  // the reader has seen it
  std::mutex mu;
  std::vector<std::pair<uint32_t, std::string>> got;
  p.conn->set_on_dns([&](uint32_t s, std::string q) {
    std::lock_guard lock(mu);
    got.emplace_back(s, std::move(q));
  });
  p.send(FrameType::kDns, kA | 2, query(2));
  p.send(FrameType::kDns, kA | 3, std::string(proto::kMaxDnsDatagram, 'm'));
  std::this_thread::sleep_for(100ms);
  p.conn->set_on_dns(nullptr);
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], std::make_pair(kA | 2, query(2)));
    EXPECT_EQ(got[1].first, kA | 3);
    EXPECT_EQ(got[1].second.size(), proto::kMaxDnsDatagram);
  }
  EXPECT_TRUE(p.conn->alive());
  EXPECT_EQ(p.conn->agent_streams(), 0u) << "dns queries open no streams";
}

TEST(AgentConnDns, MalformedDnsFramesCloseTheChannel) {
  struct Case {
    uint32_t stream;
    std::string payload;
  };
  for (const Case& c : {Case{5, query(1)},  // a daemon-range id
                        Case{kA | 1, std::string(proto::kDnsHeaderSize - 1, 'x')}, Case{kA | 1, ""},
                        Case{kA | 1, std::string(proto::kMaxDnsDatagram + 1, 'x')}}) {
    Peer p;
    ASSERT_TRUE(p.conn);
    p.conn->set_on_dns([](uint32_t, std::string) { ADD_FAILURE() << "a bad query was handed on"; });
    p.send(FrameType::kDns, c.stream, c.payload);
    EXPECT_TRUE(p.lost_within(2s)) << c.stream << " " << c.payload.size();
    p.conn->set_on_dns(nullptr);
  }
}

// --- DnsRelay against a hand-driven agent ---------------------------------------------------

TEST(DnsRelay, RestoresTheGuestsIdAndAnswersOnTheQuerysStream) {
  Peer p;
  ASSERT_TRUE(p.conn);
  FakeStub stub;
  DnsRelay relay(*p.conn, "dns-test");
  ASSERT_TRUE(relay.start(stub.open()));
  // Two queries with the same id (two guest resolvers): each answer on its own stream.
  p.send(FrameType::kDns, kA | 10, query(0xabcd, "one.test"));
  p.send(FrameType::kDns, kA | 11, query(0xabcd, "two.test"));
  std::map<uint32_t, std::string> answers;
  for (int i = 0; i < 2; ++i) {
    auto f = p.recv_within();
    ASSERT_TRUE(f);
    EXPECT_EQ(f->type, FrameType::kDns);
    answers[f->stream] = f->payload;
  }
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(id_of(answers[kA | 10]), 0xabcd);
  EXPECT_EQ(id_of(answers[kA | 11]), 0xabcd);
  EXPECT_NE(answers[kA | 10].find("one.test!answered"), std::string::npos);
  EXPECT_NE(answers[kA | 11].find("two.test!answered"), std::string::npos);
  auto st = relay.stats();
  EXPECT_EQ(st.relayed, 2u);
  EXPECT_EQ(st.answered, 2u);
  relay.stop();
  relay.stop();  // idempotent
}

TEST(DnsRelay, BoundsWhatItHoldsAndAnswersEmptyAfterItsTimeout) {
  Peer p;
  ASSERT_TRUE(p.conn);
  FakeStub silent(false);
  DnsRelay relay(*p.conn, "dns-test", 300ms);
  ASSERT_TRUE(relay.start(silent.open()));
  // A broken agent that ignores its own bound: the relay holds at most kMaxDnsInFlight.
  const size_t flood = proto::kMaxDnsInFlight * 3;
  for (size_t i = 0; i < flood; ++i)
    p.send(FrameType::kDns, kA | static_cast<uint32_t>(i + 1), query(static_cast<uint16_t>(i)));
  std::set<uint32_t> empty;
  while (auto f = p.recv_within(1500ms)) {
    EXPECT_EQ(f->type, FrameType::kDns);
    EXPECT_EQ(f->payload, "") << "a silent stub means no answer";
    empty.insert(f->stream);
  }
  auto st = relay.stats();
  EXPECT_EQ(st.relayed + st.dropped, flood);
  EXPECT_GE(st.dropped, flood - 2 * proto::kMaxDnsInFlight) << "the relay held more than its bound";
  EXPECT_EQ(empty.size(), st.relayed) << "each query it took is answered, empty, once";
  EXPECT_EQ(st.timed_out, st.relayed);
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_EQ(silent.seen(), st.relayed);
  EXPECT_TRUE(p.conn->alive()) << "too many queries is not a protocol violation";
}

TEST(DnsRelay, ALateAnswerIsDropped) {
  Peer p;
  ASSERT_TRUE(p.conn);
  // A stub that answers only when told, after the relay gave up.
  UniqueFd stub_sock = udp_bound();
  uint16_t port = udp_port(stub_sock.get());
  DnsRelay relay(*p.conn, "dns-test", 100ms);
  ASSERT_TRUE(relay.start([port]() -> Result<UniqueFd> { return udp_connected(port); }));
  p.send(FrameType::kDns, kA | 1, query(0x4242));
  sockaddr_in from{};
  socklen_t flen = sizeof from;
  char buf[512];
  ssize_t n =
      ::recvfrom(stub_sock.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &flen);
  ASSERT_GT(n, 0);
  auto f = p.recv_within();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->payload, "");  // timed out
  ::sendto(stub_sock.get(), buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
           flen);
  EXPECT_FALSE(p.recv_within(300ms)) << "an answer after the timeout must not be forwarded";
  EXPECT_EQ(relay.stats().answered, 0u);
}

TEST(DnsRelay, AFailedOpenInstallsNothing) {
  Peer p;
  ASSERT_TRUE(p.conn);
  DnsRelay relay(*p.conn, "dns-test");
  auto r = relay.start([]() -> Result<UniqueFd> { return fail(Code::kUnavailable, "no stub"); });
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("no stub"), std::string::npos);
  p.send(FrameType::kDns, kA | 1, query(1));
  EXPECT_FALSE(p.recv_within(300ms));
  EXPECT_TRUE(p.conn->alive());
}

// --- the real agent, end to end --------------------------------------------------------------

struct Harness {
  uint16_t port = free_udp_port();
  AgentClient agent{{"--dns-listen", "127.0.0.1:" + std::to_string(port)}};
  std::unique_ptr<AgentConn> conn;
  std::unique_ptr<DnsRelay> relay;
  Harness(const DnsRelay::Open& open, std::chrono::milliseconds timeout) {
    auto c = AgentConn::open(agent.channel_fd(), "dns-test", false, 5s);
    if (!c) {
      ADD_FAILURE() << c.error().message();
      return;
    }
    conn = std::move(*c);
    relay = std::make_unique<DnsRelay>(*conn, "dns-test", timeout);
    auto r = relay->start(open);
    EXPECT_TRUE(r) << r.error().message();
  }
  ~Harness() {
    if (relay) relay->stop();
    if (conn) conn->close();
  }
};

TEST(DnsRelay, GuestQueriesAreAnsweredThroughTheAgent) {
  SKIP_WITHOUT_AGENT();
  FakeStub stub;
  Harness h(stub.open(), DnsRelay::kDefaultTimeout);
  ASSERT_TRUE(h.conn);
  UniqueFd g = udp_connected(h.port);
  std::string q = query(0x1357);
  ASSERT_EQ(::send(g.get(), q.data(), q.size(), 0), (ssize_t)q.size());
  auto a = recv_within(g.get());
  ASSERT_TRUE(a);
  EXPECT_EQ(id_of(*a), 0x1357);
  EXPECT_NE(a->find("allowed.test!answered"), std::string::npos);
}

TEST(DnsRelay, AGuestFloodStaysBoundedAndResolutionRecovers) {
  SKIP_WITHOUT_AGENT();
  FakeStub stub;
  Harness h(stub.open(), DnsRelay::kDefaultTimeout);
  ASSERT_TRUE(h.conn);
  // Several resolvers blast queries without waiting; the relay never holds more than the bound.
  std::atomic<size_t> max_in_flight{0};
  std::atomic<bool> done{false};
  std::thread watch([&] {
    while (!done) {
      size_t now = h.relay->stats().in_flight;
      if (now > max_in_flight) max_in_flight = now;
      std::this_thread::sleep_for(1ms);
    }
  });
  std::vector<UniqueFd> guests;
  for (int i = 0; i < 4; ++i) guests.push_back(udp_connected(h.port));
  size_t sent = 0;
  for (int round = 0; round < 1000; ++round)
    for (auto& g : guests) {
      std::string q = query(static_cast<uint16_t>(round));
      if (::send(g.get(), q.data(), q.size(), MSG_DONTWAIT) > 0) ++sent;
    }
  size_t answers = 0;
  for (auto& g : guests)
    while (recv_within(g.get(), 300ms)) ++answers;
  done = true;
  watch.join();
  EXPECT_GT(answers, 0u);
  EXPECT_LE(answers, sent);
  EXPECT_LE(max_in_flight.load(), proto::kMaxDnsInFlight);
  EXPECT_TRUE(h.conn->alive());
  EXPECT_EQ(h.relay->stats().dropped, 0u) << "the agent keeps the same bound";
  // Afterwards a query is answered as usual.
  std::string q = query(0x2468);
  ASSERT_EQ(::send(guests[0].get(), q.data(), q.size(), 0), (ssize_t)q.size());
  auto a = recv_within(guests[0].get());
  ASSERT_TRUE(a);
  EXPECT_EQ(id_of(*a), 0x2468);
}

// --- network namespaces: the microVM layout ----------------------------------------------------

// A fresh network namespace, held by an fd, made by a thread that unshares and exits after
// running `inside` there. Empty (with *why set) where that is not possible.
UniqueFd make_netns(std::string* why, const std::function<void()>& inside = {}) {
  UniqueFd ns;
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) < 0) {
      *why = std::string("unshare: ") + std::strerror(errno);
      return;
    }
    ns.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (inside) inside();
  }).join();
  return ns;
}

void lo_up() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  ::ioctl(s, SIOCGIFFLAGS, &ifr);
  ifr.ifr_flags |= IFF_UP;
  ::ioctl(s, SIOCSIFFLAGS, &ifr);
  ::close(s);
}

TEST(DnsRelay, GuestNetnsToTheStubInTheSandboxNetns) {
  SKIP_WITHOUT_AGENT();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (unshare CLONE_NEWNET, setns, port 53)";
  std::string why;
  // The sandbox's namespace (the VMM's): the stub at 127.0.0.53:53, as the gateway binds it.
  UniqueFd stub_sock;
  UniqueFd sandbox_ns = make_netns(&why, [&] {
    lo_up();
    stub_sock = udp_bound("127.0.0.53", 53);
  });
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(stub_sock);
  FakeStub stub(true, std::move(stub_sock));
  // The guest's namespace: lo down until the agent brings it up for its listener.
  std::unique_ptr<AgentClient> agent;
  UniqueFd guest_ns = make_netns(&why, [&] {
    agent =
        std::make_unique<AgentClient>(std::vector<std::string>{"--dns-listen", "127.0.0.53:53"});
  });
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(agent);
  auto conn = AgentConn::open(agent->channel_fd(), "dns-test", false, 5s);
  ASSERT_TRUE(conn) << conn.error().message();
  DnsRelay relay(**conn, "dns-test");
  ASSERT_TRUE(relay.start([&]() -> Result<UniqueFd> {
    return connect_udp_in_netns(sandbox_ns.get(), "127.0.0.53", 53);
  }));
  // A resolver in the guest's namespace.
  UniqueFd g;
  std::thread([&] {
    ::setns(guest_ns.get(), CLONE_NEWNET);
    g.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(53);
    ::inet_pton(AF_INET, "127.0.0.53", &sa.sin_addr);
    ::connect(g.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  }).join();
  std::string q = query(0x0102, "in.the.guest");
  ASSERT_EQ(::send(g.get(), q.data(), q.size(), 0), (ssize_t)q.size()) << std::strerror(errno);
  auto a = recv_within(g.get(), 3000ms);
  ASSERT_TRUE(a);
  EXPECT_EQ(id_of(*a), 0x0102);
  EXPECT_NE(a->find("in.the.guest!answered"), std::string::npos);
  EXPECT_EQ(stub.seen(), 1u);
  relay.stop();
  (*conn)->close();
  // connect_udp_in_netns checks its arguments.
  EXPECT_EQ(connect_udp_in_netns(sandbox_ns.get(), "localhost", 53).error().code(),
            Code::kInvalidArgument);
  auto bad_ns = connect_udp_in_netns(g.get(), "127.0.0.53", 53);
  ASSERT_FALSE(bad_ns);
  EXPECT_NE(bad_ns.error().message().find("setns"), std::string::npos);
}

}  // namespace
}  // namespace space::daemon
