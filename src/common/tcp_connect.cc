// tcp_connect (tcp_connect.h): getaddrinfo, then a non-blocking connect per address, waited
// for with poll() until the deadline or the stop fd.
#include "common/tcp_connect.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace space {
namespace {

using ConnectClock = std::chrono::steady_clock;

// 0 once `fd` connected, else the errno (ETIMEDOUT for the deadline, ECANCELED for the stop).
int wait_connected(int fd, ConnectClock::time_point deadline, int stop_fd) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - ConnectClock::now());
    if (left.count() <= 0) return ETIMEDOUT;
    pollfd fds[2] = {{fd, POLLOUT, 0}, {stop_fd, POLLIN, 0}};
    int r = ::poll(fds, stop_fd >= 0 ? 2 : 1,
                   static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (stop_fd >= 0 && fds[1].revents != 0) return ECANCELED;
    if (r == 0) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
  }
}

}  // namespace

Result<UniqueFd> tcp_connect(const std::string& host, uint16_t port,
                             std::chrono::milliseconds timeout, int stop_fd) {
  const auto deadline = ConnectClock::now() + timeout;
  const std::string where =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    return fail(Code::kUnavailable, "cannot resolve " + host + ": " + ::gai_strerror(rc));
  int err = ECONNREFUSED;
  UniqueFd tcp;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) {
      err = errno;
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      tcp = std::move(fd);
      break;
    }
    err = errno;
    if (err != EINPROGRESS) continue;
    err = wait_connected(fd.get(), deadline, stop_fd);
    if (err == 0) {
      tcp = std::move(fd);
      break;
    }
    if (err == ECANCELED || err == ETIMEDOUT) break;
  }
  ::freeaddrinfo(res);
  if (tcp) return tcp;
  if (err == ETIMEDOUT)
    return fail(
        Code::kTimeout,
        "connecting to " + where + ": no answer within " + std::to_string(timeout.count()) + " ms",
        err);
  if (err == ECANCELED)
    return fail(Code::kUnavailable, "connecting to " + where + ": stopped", err);
  return fail(Code::kUnavailable, Error::sys("connect", where, err).message(), err);
}

}  // namespace space
