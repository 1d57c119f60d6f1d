// The control channel between spaced and space-egress (egress/wire.h): messages with fds over a
// SOCK_SEQPACKET pair, and the counters' fields both ways.
#include "egress/wire.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace space::egress {
namespace {

TEST(Wire, MessageWithFdsAndPeerGone) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  UniqueFd r(p[0]), w(p[1]);
  int fds[] = {w.get()};
  ASSERT_TRUE(wire::send(a.get(), {{"op", "x"}, {"bad", std::string("\xff")}}, fds));
  auto m = wire::recv(b.get());
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->body["op"], "x");
  ASSERT_EQ(m->fds.size(), 1u);
  ASSERT_EQ(::write(m->fds[0].get(), "z", 1), 1);  // the passed fd is the pipe's write end
  char c = 0;
  ASSERT_EQ(::read(r.get(), &c, 1), 1);
  EXPECT_EQ(c, 'z');
  a.reset();
  auto gone = wire::recv(b.get());
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code(), Code::kUnavailable);
}

TEST(Wire, StatsBothWays) {
  Gateway::Stats s;
  s.connections = 1;
  s.requests = 2;
  s.denied = 3;
  s.bytes_up = 4;
  s.bytes_down = 5;
  s.credential_uses = 6;
  s.dns_queries = 7;
  s.active_connections = 8;
  s.sandboxes = 9;
  auto t = wire::stats_of(nlohmann::json::parse(wire::stats_json(s).dump()));
  EXPECT_EQ(t.connections, 1u);
  EXPECT_EQ(t.requests, 2u);
  EXPECT_EQ(t.denied, 3u);
  EXPECT_EQ(t.bytes_up, 4u);
  EXPECT_EQ(t.bytes_down, 5u);
  EXPECT_EQ(t.credential_uses, 6u);
  EXPECT_EQ(t.dns_queries, 7u);
  EXPECT_EQ(t.active_connections, 8u);
  EXPECT_EQ(t.sandboxes, 9u);
  // What an untrusted process sends mistyped reads as 0, never throws.
  auto u = wire::stats_of({{"requests", "many"}, {"denied", -1}});
  EXPECT_EQ(u.requests, 0u);
  EXPECT_EQ(u.denied, 0u);
}

}  // namespace
}  // namespace space::egress
