// The Beast SyncReadStream/SyncWriteStream adaptor, written once: SyncStreamOps gives any
// stream that can read_some/write_some with an error_code the throwing overloads Beast also
// calls and write_all (the egress gateway's TlsStream and AnyStream use it too), and FdStream
// is that stream over a raw, non-blocking socket fd, with the timeouts and cancellation that
// Beast's synchronous API over Asio sockets lacks. Every wait is a poll() on the socket plus up
// to two "cancel" eventfds: `stop` (server shutdown, CLI signal) aborts reads and writes,
// `read_interrupt` aborts reads only (so one thread can stop another that is blocked reading
// while it keeps writing). Reads and writes may run concurrently on two threads (full duplex);
// each direction keeps its own timeout state. Header-only: the daemon's API server (src/api),
// the egress gateway (src/egress) and the CLI's client (src/cli) use it; only targets that link
// Boost include it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <chrono>
#include <string_view>

#include "common/error.h"
#include "common/fd.h"

namespace space {

// What every Beast stream of the project shares: `Derived` defines read_some(buffers, ec) and
// write_some(buffers, ec) (and says `using SyncStreamOps::read_some; using
// SyncStreamOps::write_some;`); this adds the overloads that throw boost::system::system_error
// and write_all.
template <class Derived>
class SyncStreamOps {
 public:
  using error_code = boost::system::error_code;

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    error_code ec;
    size_t n = self().read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers) {
    error_code ec;
    size_t n = self().write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  // Writes all of `data` or fails.
  error_code write_all(std::string_view data) {
    error_code ec;
    while (!data.empty()) {
      size_t n = self().write_some(boost::asio::const_buffer(data.data(), data.size()), ec);
      if (ec) return ec;
      data.remove_prefix(n);
    }
    return ec;
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

class FdStream : public SyncStreamOps<FdStream> {
 public:
  using Clock = std::chrono::steady_clock;
  using error_code = boost::system::error_code;
  using SyncStreamOps::read_some;
  using SyncStreamOps::write_some;

  explicit FdStream(UniqueFd fd) : fd_(std::move(fd)) {
    int flags = ::fcntl(fd_.get(), F_GETFL);
    if (flags >= 0) ::fcntl(fd_.get(), F_SETFL, flags | O_NONBLOCK);
  }

  int fd() const { return fd_.get(); }

  // Server-wide (or process-wide) cancellation: once `fd` is readable every wait fails with
  // operation_aborted. -1 = none.
  void set_stop_fd(int fd) { stop_fd_ = fd; }
  int stop_fd() const { return stop_fd_; }
  // Aborts waits for reading only. -1 = none.
  void set_read_interrupt_fd(int fd) { read_interrupt_fd_ = fd; }
  // A read fails with timed_out at `deadline` (absolute; Clock::time_point::max() = never).
  void set_read_deadline(Clock::time_point deadline) { read_deadline_ = deadline; }
  // Each single read must make progress within `timeout` (0 = no limit).
  void set_read_timeout(std::chrono::milliseconds timeout) { read_timeout_ = timeout; }
  void set_write_timeout(std::chrono::milliseconds timeout) { write_timeout_ = timeout; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    std::array<iovec, 16> iov;
    size_t n = to_iovec(buffers, iov);
    ec = {};
    if (n == 0) return 0;
    Clock::time_point deadline = read_deadline_;
    if (read_timeout_.count() > 0) deadline = std::min(deadline, Clock::now() + read_timeout_);
    for (;;) {
      msghdr msg{};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = n;
      ssize_t r = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (r > 0) return static_cast<size_t>(r);
      if (r == 0) {
        ec = boost::asio::error::eof;
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = error_code(errno, boost::system::system_category());
        return 0;
      }
      ec = wait(POLLIN | POLLRDHUP, deadline, read_interrupt_fd_);
      if (ec) return 0;
    }
  }

  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
    std::array<iovec, 16> iov;
    size_t n = to_iovec(buffers, iov);
    ec = {};
    if (n == 0) return 0;
    Clock::time_point deadline = Clock::time_point::max();
    if (write_timeout_.count() > 0) deadline = Clock::now() + write_timeout_;
    for (;;) {
      msghdr msg{};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = n;
      ssize_t r = ::sendmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = error_code(errno, boost::system::system_category());
        return 0;
      }
      ec = wait(POLLOUT, deadline, -1);
      if (ec) return 0;
    }
  }

  // Waits until the peer hangs up or half-closes, without consuming data, or until a cancel fd
  // fires (-> operation_aborted). Returns {} on hang-up.
  error_code wait_hangup() { return wait(POLLRDHUP, Clock::time_point::max(), read_interrupt_fd_); }

  void shutdown(int how) { ::shutdown(fd_.get(), how); }

 private:
  template <class BufferSequence>
  static size_t to_iovec(const BufferSequence& buffers, std::array<iovec, 16>& iov) {
    size_t n = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && n < iov.size(); ++it) {
      auto b = boost::asio::buffer(*it);
      if (b.size() == 0) continue;
      iov[n].iov_base = const_cast<void*>(static_cast<const void*>(b.data()));
      iov[n].iov_len = b.size();
      ++n;
    }
    return n;
  }

  error_code wait(short events, Clock::time_point deadline, int extra_cancel_fd) {
    for (;;) {
      pollfd fds[3] = {{fd_.get(), events, 0}, {stop_fd_, POLLIN, 0}, {extra_cancel_fd, POLLIN, 0}};
      int timeout_ms = -1;
      if (deadline != Clock::time_point::max()) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) return boost::asio::error::timed_out;
        timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
      }
      // poll() ignores entries whose fd is negative.
      int r = ::poll(fds, 3, timeout_ms);
      if (r < 0) {
        if (errno == EINTR) continue;
        return error_code(errno, boost::system::system_category());
      }
      if (fds[1].revents != 0 || fds[2].revents != 0) return boost::asio::error::operation_aborted;
      if (r == 0) return boost::asio::error::timed_out;
      if (fds[0].revents != 0) return {};
    }
  }

  UniqueFd fd_;
  int stop_fd_ = -1;
  int read_interrupt_fd_ = -1;
  Clock::time_point read_deadline_ = Clock::time_point::max();
  std::chrono::milliseconds read_timeout_{0};
  std::chrono::milliseconds write_timeout_{0};
};

// A Beast/Asio error_code as a space::Error (for the few places that leave the Beast layer).
inline Error stream_error(const boost::system::error_code& ec, std::string_view what) {
  Code code = Code::kUnavailable;
  if (ec == boost::asio::error::timed_out) code = Code::kTimeout;
  return Error(code, std::string(what) + ": " + ec.message());
}

}  // namespace space
