#include "common/relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace space {
namespace {

constexpr size_t kBuffer = 64 * 1024;

// One direction: bytes read from `from`, not yet written to `to`.
struct Pipe {
  int from, to;
  std::string buf;
  bool eof = false;   // `from` ended
  bool shut = false;  // and `to` was told (SHUT_WR)
  bool done() const { return shut; }
};

}  // namespace

Result<void> relay(int a, int b, RelayOptions o) {
  for (int fd : {a, b}) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return fail_sys("fcntl");
  }
  Pipe ab{a, b, std::move(o.a_pending)}, ba{b, a, std::move(o.b_pending)};
  auto next_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  auto last_moved = std::chrono::steady_clock::now();
  while (!(ab.done() && ba.done())) {
    if (o.still_allowed && std::chrono::steady_clock::now() >= next_check) {
      TRY_VOID(o.still_allowed());
      next_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
    for (Pipe* p : {&ab, &ba}) {
      if (p->eof && p->buf.empty() && !p->shut) {
        ::shutdown(p->to, SHUT_WR);
        p->shut = true;
      }
    }
    if (ab.done() && ba.done()) break;
    pollfd fds[3];
    nfds_t n = 0;
    // Read a side while its buffer has room; write a side while there is something for it.
    short ev_a = 0, ev_b = 0;
    if (!ab.eof && ab.buf.size() < kBuffer) ev_a |= POLLIN;
    if (!ba.buf.empty()) ev_a |= POLLOUT;
    if (!ba.eof && ba.buf.size() < kBuffer) ev_b |= POLLIN;
    if (!ab.buf.empty()) ev_b |= POLLOUT;
    // A side with nothing to do is left out: a closed socket's POLLHUP would spin the loop.
    fds[n++] = {ev_a ? a : -1, ev_a, 0};
    fds[n++] = {ev_b ? b : -1, ev_b, 0};
    if (o.stop_fd >= 0) fds[n++] = {o.stop_fd, POLLIN, 0};
    int r = ::poll(fds, n, 1000);
    if (r < 0) {
      if (errno == EINTR) continue;
      return fail_sys("poll");
    }
    if (o.stop_fd >= 0 && fds[2].revents != 0) return {};
    if (o.idle_timeout.count() > 0 &&
        std::chrono::steady_clock::now() - last_moved >= o.idle_timeout)
      return {};
    for (Pipe* p : {&ab, &ba}) {
      short rev = p == &ab ? fds[0].revents : fds[1].revents;
      short wev = p == &ab ? fds[1].revents : fds[0].revents;
      if ((rev & (POLLIN | POLLHUP | POLLERR)) && !p->eof && p->buf.size() < kBuffer) {
        char tmp[kBuffer];
        ssize_t got = ::read(p->from, tmp, kBuffer - p->buf.size());
        if (got > 0) {
          p->buf.append(tmp, static_cast<size_t>(got));
          last_moved = std::chrono::steady_clock::now();
        } else if (got == 0) {
          p->eof = true;
        } else if (errno != EAGAIN && errno != EINTR) {
          if (errno == ECONNRESET) {
            p->eof = true;
          } else {
            return fail_sys("read");
          }
        }
      }
      if ((wev & (POLLOUT | POLLERR | POLLHUP)) && !p->buf.empty()) {
        ssize_t put = ::send(p->to, p->buf.data(), p->buf.size(), MSG_NOSIGNAL);
        if (put > 0) {
          p->buf.erase(0, static_cast<size_t>(put));
          last_moved = std::chrono::steady_clock::now();
        } else if (put < 0 && errno != EAGAIN && errno != EINTR) {
          if (errno == EPIPE || errno == ECONNRESET) return {};  // the other side is gone
          return fail_sys("send");
        }
      }
    }
  }
  return {};
}

}  // namespace space
