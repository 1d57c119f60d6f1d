// The agent's side of a channel, driven by hand in daemon unit tests: a socketpair whose
// daemon end a test gives to AgentConn (or reads itself), with frames written raw and the
// daemon's frames read back decoded. ConnectedPeer has also sent the hello and opened the
// AgentConn.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "common/fd.h"
#include "daemon/agent_conn.h"
#include "proto/frame.h"

namespace space::daemon::testing {

using namespace std::chrono_literals;

struct AgentPeer {
  UniqueFd daemon_end, agent_end;
  proto::Decoder dec;

  AgentPeer() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    daemon_end.reset(sv[0]);
    agent_end.reset(sv[1]);
  }
  void send(proto::FrameType t, uint32_t stream, std::string_view payload) {
    std::string buf;
    ASSERT_TRUE(proto::encode(t, stream, payload, buf));
    raw(buf);
  }
  void raw(std::string_view bytes) {
    ASSERT_EQ(::write(agent_end.get(), bytes.data(), bytes.size()), (ssize_t)bytes.size());
  }
  // The next frame from the daemon within `timeout`; nullopt if none came or the bytes were
  // not a frame.
  std::optional<proto::Frame> recv_within(std::chrono::milliseconds timeout = 2000ms) {
    char buf[8192];
    for (;;) {
      auto f = dec.next();
      if (!f) return std::nullopt;
      if (*f) return std::move(**f);
      pollfd p{agent_end.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
      ssize_t n = ::read(agent_end.get(), buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      dec.feed(std::span<const char>(buf, (size_t)n));
    }
  }
  // The next frame from the daemon, which must come within 2 s.
  proto::Frame recv() {
    auto f = recv_within();
    EXPECT_TRUE(f) << "no frame from the daemon within 2 s";
    return f ? std::move(*f) : proto::Frame{};
  }
};

struct ConnectedPeer : AgentPeer {
  std::unique_ptr<AgentConn> conn;

  ConnectedPeer() {
    send(proto::FrameType::kHello, 0, R"({"version":1,"pid":1})");
    auto c = AgentConn::open(daemon_end.get(), "t", false, 2s);
    EXPECT_TRUE(c);
    if (c) conn = std::move(*c);
  }
  // Whether the AgentConn gives the channel up within `t`.
  bool lost_within(std::chrono::milliseconds t) {
    auto deadline = std::chrono::steady_clock::now() + t;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!conn->alive()) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }
};

}  // namespace space::daemon::testing
