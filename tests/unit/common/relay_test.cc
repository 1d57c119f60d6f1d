// relay(): bytes both ways between two sockets, half-closes passed on, early bytes first, the
// stop fd and a failing still_allowed end it.
#include "common/relay.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "common/fd.h"

namespace space {
namespace {

struct Pair {
  UniqueFd a, b;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

void write_all_then_shut(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
}

// client <-> [a relay b] <-> server
TEST(Relay, CarriesBothWaysWithHalfClosesAndEarlyBytes) {
  Pair client_side, server_side;
  std::string up(3 << 20, 'u'), down(2 << 20, 'd');
  for (size_t i = 0; i < up.size(); i += 4096) up[i] = static_cast<char>(i / 4096);
  RelayOptions o;
  o.a_pending = "early-up:";
  o.b_pending = "early-down:";
  std::thread r([&] {
    auto res = relay(client_side.b.get(), server_side.a.get(), std::move(o));
    EXPECT_TRUE(res) << res.error().message();
  });
  std::string got_up, got_down;
  std::thread server([&] {
    got_up = read_all(server_side.b.get());  // ends when the client half-closed
    write_all_then_shut(server_side.b.get(), down);
  });
  std::thread client([&] { write_all_then_shut(client_side.a.get(), up); });
  got_down = read_all(client_side.a.get());
  client.join();
  server.join();
  r.join();
  EXPECT_EQ(got_up, "early-up:" + up);
  EXPECT_EQ(got_down, "early-down:" + down);
}

TEST(Relay, StopFdEndsIt) {
  Pair x, y;
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC));
  RelayOptions o;
  o.stop_fd = stop.get();
  std::thread r([&] { EXPECT_TRUE(relay(x.b.get(), y.a.get(), std::move(o))); });
  uint64_t one = 1;
  ASSERT_EQ(::write(stop.get(), &one, sizeof one), 8);
  r.join();  // returns although neither side closed
}

TEST(Relay, StillAllowedFailingEndsItWithThatError) {
  Pair x, y;
  RelayOptions o;
  o.still_allowed = [] { return Result<void>(fail(Code::kUnauthenticated, "token revoked")); };
  auto res = relay(x.b.get(), y.a.get(), std::move(o));
  ASSERT_FALSE(res);
  EXPECT_EQ(res.error().code(), Code::kUnauthenticated);
}

}  // namespace
}  // namespace space
