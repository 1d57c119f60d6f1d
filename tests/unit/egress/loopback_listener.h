// A blocking TCP listener on 127.0.0.1 at a port the kernel picks, for the test upstreams of
// the gateway's tests (h2_test, request_stage_codecs_test).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "common/fd.h"

namespace space::test_support {

struct LoopbackListener {
  UniqueFd fd;
  uint16_t port = 0;
};

inline LoopbackListener listen_loopback() {
  LoopbackListener l;
  l.fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(l.fd.get(), 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  l.port = ntohs(a.sin_port);
  return l;
}

}  // namespace space::test_support
