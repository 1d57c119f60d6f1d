// Egress over the agent channel, end to end in one process tree: the REAL space-agent (child,
// --egress-listen on a free loopback port) <-> socketpair <-> AgentConn + EgressRelay, whose
// dial connects to a TCP server this test runs (standing in for the egress gateway). A "guest"
// client connects to the agent's listener. Also connect_in_netns against a listener in a
// network namespace the test makes.
#include "daemon/egress_relay.h"

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
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "../agent/agent_client.h"

namespace space::daemon {
namespace {

using agent::testing::AgentClient;
using namespace std::chrono_literals;

uint16_t local_port(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

UniqueFd listen_any() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  EXPECT_EQ(::listen(fd.get(), 512), 0);
  return fd;
}

uint16_t free_port() {
  UniqueFd fd = listen_any();
  return local_port(fd.get());
}

// A blocking TCP client to 127.0.0.1:port; retries briefly while nothing listens yet.
UniqueFd dial_local(uint16_t port) {
  for (int i = 0; i < 200; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(port);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
    ::usleep(10000);
  }
  ADD_FAILURE() << "cannot connect to 127.0.0.1:" << port;
  return {};
}

bool write_all(int fd, std::string_view b) {
  while (!b.empty()) {
    ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    b.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until EOF (or error/timeout). *err gets errno on error, 0 on a clean EOF, -1 on timeout.
std::string read_to_end(int fd, int* err = nullptr, std::chrono::milliseconds timeout = 10s) {
  std::string out;
  char buf[65536];
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      if (err) *err = -1;
      return out;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (err) *err = n == 0 ? 0 : errno;
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

// Deterministic bytes for the large transfers: position i holds pattern(i).
char pattern(uint64_t i) { return static_cast<char>((i * 2654435761u) >> 13); }

// The agent's peak resident memory (VmHWM), in KiB.
long agent_hwm_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.starts_with("VmHWM:")) return std::stol(line.substr(6));
  return -1;
}

// The stand-in gateway: accepts on 127.0.0.1:<port> and runs `handler` per connection on its
// own thread.
class Upstream {
 public:
  explicit Upstream(std::function<void(UniqueFd)> handler) : handler_(std::move(handler)) {
    listener_ = listen_any();
    port_ = local_port(listener_.get());
    acceptor_ = std::thread([this] {
      for (;;) {
        int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;  // shutdown() in the destructor
        std::lock_guard lock(mu_);
        ++accepted_;
        workers_.emplace_back([this, fd] { handler_(UniqueFd(fd)); });
      }
    });
  }
  ~Upstream() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    acceptor_.join();
    for (auto& t : workers_) t.join();
  }
  uint16_t port() const { return port_; }
  int accepted() {
    std::lock_guard lock(mu_);
    return accepted_;
  }
  EgressRelay::Dial dial() {
    return [p = port_](uint16_t) -> Result<UniqueFd> {
      UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      sa.sin_port = htons(p);
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0)
        return fail_sys("connect", "upstream");
      return fd;
    };
  }

 private:
  std::function<void(UniqueFd)> handler_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  int accepted_ = 0;
  std::vector<std::thread> workers_;
};

void echo(UniqueFd fd) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!write_all(fd.get(), std::string_view(buf, static_cast<size_t>(n)))) return;
  }
  ::shutdown(fd.get(), SHUT_WR);
}

// The agent, its channel (AgentConn) and a relay dialing `dial`.
struct Harness {
  uint16_t port = free_port();
  AgentClient agent{{"--egress-listen", "127.0.0.1:" + std::to_string(port)}};
  std::unique_ptr<AgentConn> conn;
  std::unique_ptr<EgressRelay> relay;

  explicit Harness(EgressRelay::Dial dial) {
    auto c = AgentConn::open(agent.channel_fd(), "egress-test", false, 5s);
    if (!c) {
      ADD_FAILURE() << c.error().message();
      return;
    }
    conn = std::move(*c);
    relay = std::make_unique<EgressRelay>(*conn, std::move(dial), "egress-test");
    relay->start();
  }
  ~Harness() {
    if (relay) relay->stop();
    if (conn) conn->close();
  }
  UniqueFd guest() { return dial_local(port); }
  bool wait_idle(std::chrono::milliseconds t = 5s) {
    auto deadline = std::chrono::steady_clock::now() + t;
    while (std::chrono::steady_clock::now() < deadline) {
      if (relay->active() == 0 && conn->agent_streams() == 0) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
};

TEST(EgressRelay, RoundTripAndCleanEnd) {
  SKIP_WITHOUT_AGENT();
  Upstream up(echo);
  Harness h(up.dial());
  UniqueFd g = h.guest();
  ASSERT_TRUE(write_all(g.get(), "hello through the channel"));
  char buf[64] = {};
  ASSERT_EQ(::recv(g.get(), buf, 25, MSG_WAITALL), 25);
  EXPECT_EQ(std::string(buf, 25), "hello through the channel");
  ::shutdown(g.get(), SHUT_WR);  // echo then ends its side
  int err = 1;
  EXPECT_EQ(read_to_end(g.get(), &err), "");
  EXPECT_EQ(err, 0) << "a clean EOF, not a reset";
  EXPECT_TRUE(h.wait_idle());
  EXPECT_EQ(h.relay->served(), 1u);
}

TEST(EgressRelay, HalfCloseEachDirection) {
  SKIP_WITHOUT_AGENT();
  std::string got_after_eof;
  std::atomic<bool> done{false};
  Upstream up([&](UniqueFd fd) {
    write_all(fd.get(), "banner");
    ::shutdown(fd.get(), SHUT_WR);  // upstream -> guest ends first
    got_after_eof = read_to_end(fd.get());
    done = true;
  });
  Harness h(up.dial());
  UniqueFd g = h.guest();
  int err = 1;
  EXPECT_EQ(read_to_end(g.get(), &err), "banner");
  EXPECT_EQ(err, 0);
  // The other direction still carries bytes after the guest saw EOF.
  ASSERT_TRUE(write_all(g.get(), "still talking"));
  ::shutdown(g.get(), SHUT_WR);
  for (int i = 0; i < 500 && !done; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(done);
  EXPECT_EQ(got_after_eof, "still talking");
  EXPECT_TRUE(h.wait_idle());
}

constexpr uint64_t kBig = 32ull << 20;
// The agent's peak RSS must stay well below the transfer size (it holds at most a window per
// direction plus its channel queue). Not meaningful under ASan (its quarantine keeps freed
// buffers resident).
constexpr long kMaxAgentKib = 16 * 1024;

TEST(EgressRelay, LargeUploadToSlowGatewayIsBoundedAndLossless) {
  SKIP_WITHOUT_AGENT();
  std::atomic<uint64_t> received{0}, mismatches{0};
  Upstream up([&](UniqueFd fd) {
    char buf[16384];
    uint64_t pos = 0;
    // Nothing is read at first: without flow control the whole transfer would pile up in the
    // agent (or the daemon) meanwhile.
    std::this_thread::sleep_for(500ms);
    for (int reads = 0;; ++reads) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i)
        if (buf[i] != pattern(pos + static_cast<uint64_t>(i))) ++mismatches;
      pos += static_cast<uint64_t>(n);
      received = pos;
      if (reads < 400) std::this_thread::sleep_for(1ms);  // a slow reader for the first MiBs
    }
  });
  Harness h(up.dial());
  UniqueFd g = h.guest();
  std::string chunk(1 << 20, '\0');
  for (uint64_t off = 0; off < kBig; off += chunk.size()) {
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = pattern(off + i);
    ASSERT_TRUE(write_all(g.get(), chunk)) << "at " << off;
  }
  ::shutdown(g.get(), SHUT_WR);
  for (int i = 0; i < 3000 && received < kBig; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(received.load(), kBig);
  EXPECT_EQ(mismatches.load(), 0u);
  long hwm = agent_hwm_kib(h.agent.pid());
  std::cerr << "agent VmHWM " << hwm << " KiB\n";
  EXPECT_GT(hwm, 0);
  EXPECT_LT(hwm, kMaxAgentKib) << "the agent buffered the transfer instead of flow-controlling it";
}

TEST(EgressRelay, LargeDownloadToSlowGuestIsBoundedAndLossless) {
  SKIP_WITHOUT_AGENT();
  Upstream up([&](UniqueFd fd) {
    std::string chunk(1 << 20, '\0');
    for (uint64_t off = 0; off < kBig; off += chunk.size()) {
      for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = pattern(off + i);
      if (!write_all(fd.get(), chunk)) return;
    }
    ::shutdown(fd.get(), SHUT_WR);
    read_to_end(fd.get());
  });
  Harness h(up.dial());
  UniqueFd g = h.guest();
  char buf[16384];
  uint64_t pos = 0, mismatches = 0;
  std::this_thread::sleep_for(500ms);  // as above: a guest that does not read at first
  for (int reads = 0;; ++reads) {
    ssize_t n = ::read(g.get(), buf, sizeof buf);
    ASSERT_GE(n, 0) << std::strerror(errno);
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i)
      if (buf[i] != pattern(pos + static_cast<uint64_t>(i))) ++mismatches;
    pos += static_cast<uint64_t>(n);
    if (reads < 400) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(pos, kBig);
  EXPECT_EQ(mismatches, 0u);
  long hwm = agent_hwm_kib(h.agent.pid());
  std::cerr << "agent VmHWM " << hwm << " KiB\n";
  EXPECT_LT(hwm, kMaxAgentKib) << "the agent buffered the transfer instead of flow-controlling it";
}

TEST(EgressRelay, GuestResetReachesGateway) {
  SKIP_WITHOUT_AGENT();
  std::atomic<int> upstream_err{-2};
  Upstream up([&](UniqueFd fd) {
    int err = -2;
    read_to_end(fd.get(), &err);
    upstream_err = err;
  });
  Harness h(up.dial());
  UniqueFd g = h.guest();
  ASSERT_TRUE(write_all(g.get(), "x"));
  for (int i = 0; i < 500 && up.accepted() == 0; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(50ms);
  linger l{1, 0};
  ::setsockopt(g.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  g.reset();
  for (int i = 0; i < 500 && upstream_err == -2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(upstream_err.load(), ECONNRESET) << "the gateway must see an abort, not a clean EOF";
  EXPECT_TRUE(h.wait_idle());
}

TEST(EgressRelay, GatewayResetReachesGuest) {
  SKIP_WITHOUT_AGENT();
  Upstream up([&](UniqueFd fd) {
    char c;
    (void)::read(fd.get(), &c, 1);
    linger l{1, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  });
  Harness h(up.dial());
  UniqueFd g = h.guest();
  ASSERT_TRUE(write_all(g.get(), "x"));
  int err = -2;
  read_to_end(g.get(), &err);
  EXPECT_EQ(err, ECONNRESET);
  EXPECT_TRUE(h.wait_idle());
}

TEST(EgressRelay, DialFailureClosesTheGuestConnection) {
  SKIP_WITHOUT_AGENT();
  std::atomic<int> dials{0};
  std::atomic<int> guest_port{0};
  Harness h([&](uint16_t port) -> Result<UniqueFd> {
    ++dials;
    guest_port = port;  // the agent's listener the connection came to
    return fail(Code::kUnavailable, "no gateway here");
  });
  UniqueFd g = h.guest();
  int err = -2;
  EXPECT_EQ(read_to_end(g.get(), &err, 5s), "");
  EXPECT_NE(err, -1) << "the guest's connection must be closed, not left hanging";
  EXPECT_EQ(dials.load(), 1);
  EXPECT_EQ(guest_port.load(), h.port);
  EXPECT_TRUE(h.wait_idle());
}

TEST(EgressRelay, ManyConcurrentConnections) {
  SKIP_WITHOUT_AGENT();
  Upstream up(echo);
  Harness h(up.dial());
  constexpr int kConns = 48;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < kConns; ++c)
    clients.emplace_back([&, c] {
      UniqueFd g = h.guest();
      std::string msg(200 * 1024, static_cast<char>('a' + c % 26));
      std::thread w([&] {
        write_all(g.get(), msg);
        ::shutdown(g.get(), SHUT_WR);
      });
      std::string back = read_to_end(g.get());
      w.join();
      if (back == msg) ++ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kConns);
  EXPECT_TRUE(h.wait_idle());
  EXPECT_EQ(h.relay->served(), static_cast<uint64_t>(kConns));
}

TEST(EgressRelay, PerAgentBound) {
  SKIP_WITHOUT_AGENT();
  Upstream up(echo);
  Harness h(up.dial());
  std::vector<UniqueFd> open;
  for (size_t i = 0; i < proto::kMaxEgressConns; ++i) {
    open.push_back(h.guest());
    ASSERT_TRUE(write_all(open.back().get(), "p"));
    char c = 0;
    ASSERT_EQ(::recv(open.back().get(), &c, 1, 0), 1) << "connection " << i;
  }
  EXPECT_EQ(h.relay->active(), proto::kMaxEgressConns);
  // One more: the kernel completes the handshake, the agent then closes it unserved.
  UniqueFd extra = h.guest();
  int err = -2;
  read_to_end(extra.get(), &err, 5s);
  EXPECT_NE(err, -1) << "the connection over the bound must be closed";
  EXPECT_EQ(h.relay->served(), proto::kMaxEgressConns);
  // Closing one makes room again, once the agent has seen both ends of it finish.
  open.pop_back();
  bool served = false;
  for (int attempt = 0; attempt < 100 && !served; ++attempt) {
    UniqueFd again = h.guest();
    char c = 0;
    served = write_all(again.get(), "q") && ::recv(again.get(), &c, 1, 0) == 1 && c == 'q';
    if (!served) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(served);
}

// A sandbox's profile caps its guest's connections (each costs spaced two threads): a guest
// that floods connects is refused beyond it, not served by more threads.
TEST(EgressRelay, ProfileLimitCapsTheGuestsConnections) {
  SKIP_WITHOUT_AGENT();
  Upstream up(echo);
  Harness h(up.dial());
  h.conn->set_agent_stream_limit(4);
  std::vector<UniqueFd> open;
  for (int i = 0; i < 4; ++i) {
    open.push_back(h.guest());
    ASSERT_TRUE(write_all(open.back().get(), "p"));
    char c = 0;
    ASSERT_EQ(::recv(open.back().get(), &c, 1, 0), 1) << "connection " << i;
  }
  EXPECT_EQ(h.relay->active(), 4u);
  UniqueFd extra = h.guest();
  int err = -2;
  read_to_end(extra.get(), &err, 5s);
  EXPECT_NE(err, -1) << "the fifth connection is over the limit and closed";
  EXPECT_EQ(h.relay->served(), 4u);
  open.clear();
  EXPECT_TRUE(h.wait_idle());
}

TEST(EgressRelay, ChannelLossCutsEverything) {
  SKIP_WITHOUT_AGENT();
  std::atomic<int> upstream_done{0};
  Upstream up([&](UniqueFd fd) {
    echo(std::move(fd));
    ++upstream_done;
  });
  Harness h(up.dial());
  UniqueFd g1 = h.guest(), g2 = h.guest();
  for (int fd : {g1.get(), g2.get()}) {
    ASSERT_TRUE(write_all(fd, "z"));
    char c;
    ASSERT_EQ(::recv(fd, &c, 1, 0), 1);
  }
  ::shutdown(h.agent.channel_fd(), SHUT_RDWR);  // the channel breaks under both sides
  for (int fd : {g1.get(), g2.get()}) {
    int err = -2;
    read_to_end(fd, &err, 5s);
    EXPECT_NE(err, -1) << "the guest's connection outlived the channel";
  }
  for (int i = 0; i < 500 && upstream_done < 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(upstream_done.load(), 2) << "the gateway's connections outlived the channel";
  for (int i = 0; i < 500 && h.relay->active() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(h.relay->active(), 0u);
  h.relay->stop();  // safe after the loss
  EXPECT_FALSE(h.conn->alive());
}

TEST(EgressRelay, StopCutsLiveConnections) {
  SKIP_WITHOUT_AGENT();
  Upstream up(echo);
  Harness h(up.dial());
  UniqueFd g = h.guest();
  ASSERT_TRUE(write_all(g.get(), "z"));
  char c;
  ASSERT_EQ(::recv(g.get(), &c, 1, 0), 1);
  h.relay->stop();
  EXPECT_EQ(h.relay->active(), 0u);
  int err = -2;
  read_to_end(g.get(), &err, 5s);
  EXPECT_EQ(err, ECONNRESET);
}

// --- connect_in_netns ------------------------------------------------------------------------

std::string netns_id(const char* path) {
  char buf[128] = {};
  ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST(ConnectInNetns, ReachesOnlyTheNamespacesListener) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (unshare CLONE_NEWNET, setns)";
  // A private network namespace held by fds: made by a thread that unshares and exits.
  UniqueFd nsfd, listener;
  std::string why;
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) < 0) {
      why = std::string("unshare: ") + std::strerror(errno);
      return;
    }
    int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    ::ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) < 0) why = "lo up failed";
    ::close(s);
    listener = listen_any();
    nsfd.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  }).join();
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(nsfd);
  uint16_t port = local_port(listener.get());
  // The same port on the host stays bound but not listening, so a host-side connect is refused.
  UniqueFd host_block(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  bool host_port_ours = ::bind(host_block.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;

  std::string before = netns_id("/proc/thread-self/ns/net");
  auto fd = connect_in_netns(nsfd.get(), "127.0.0.1", port);
  ASSERT_TRUE(fd) << fd.error().message();
  EXPECT_EQ(netns_id("/proc/thread-self/ns/net"), before) << "the caller's netns changed";
  UniqueFd accepted(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(accepted);
  ASSERT_TRUE(write_all(fd->get(), "in the netns"));
  char buf[16] = {};
  ASSERT_EQ(::recv(accepted.get(), buf, 12, MSG_WAITALL), 12);
  EXPECT_EQ(std::string(buf, 12), "in the netns");
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_NONBLOCK, 0) << "the socket should be blocking";

  if (host_port_ours) {
    UniqueFd h(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_NE(::connect(h.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0)
        << "the host reached the namespace's listener";
  }
  // Nothing listens on another port in the namespace: refused, with the errno.
  auto refused = connect_in_netns(nsfd.get(), "127.0.0.1", static_cast<uint16_t>(port ^ 1));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().sys_errno(), ECONNREFUSED) << refused.error().message();
  auto bad_ip = connect_in_netns(nsfd.get(), "localhost", port);
  ASSERT_FALSE(bad_ip);
  EXPECT_EQ(bad_ip.error().code(), Code::kInvalidArgument);
  auto bad_ns = connect_in_netns(listener.get(), "127.0.0.1", port);
  ASSERT_FALSE(bad_ns);
  EXPECT_NE(bad_ns.error().message().find("setns"), std::string::npos);
}

// The microVM situation: the agent starts in a network namespace whose `lo` is down (no
// 127.0.0.1 yet). It brings lo up, listens, and guest connections made inside that namespace
// reach the gateway in the daemon's namespace only through the channel.
TEST(EgressRelay, AgentInFreshNetnsBringsUpLoopback) {
  SKIP_WITHOUT_AGENT();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (unshare CLONE_NEWNET)";
  uint16_t port = free_port();
  std::unique_ptr<AgentClient> agent;
  UniqueFd nsfd;
  std::string why;
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) < 0) {
      why = std::string("unshare: ") + std::strerror(errno);
      return;
    }
    nsfd.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    // The child inherits this thread's (fresh) network namespace.
    agent = std::make_unique<AgentClient>(
        std::vector<std::string>{"--egress-listen", "127.0.0.1:" + std::to_string(port)});
  }).join();
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(agent && nsfd);
  auto conn = AgentConn::open(agent->channel_fd(), "egress-test", false, 5s);
  ASSERT_TRUE(conn) << conn.error().message();
  Upstream up(echo);
  EgressRelay relay(**conn, up.dial(), "egress-test");
  relay.start();
  auto g = connect_in_netns(nsfd.get(), "127.0.0.1", port);
  ASSERT_TRUE(g) << g.error().message();
  ASSERT_TRUE(write_all(g->get(), "from inside"));
  char buf[16] = {};
  ASSERT_EQ(::recv(g->get(), buf, 11, MSG_WAITALL), 11);
  EXPECT_EQ(std::string(buf, 11), "from inside");
  relay.stop();
  (*conn)->close();
}

}  // namespace
}  // namespace space::daemon
