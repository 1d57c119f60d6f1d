// A tiny HTTP/1.1 server on loopback for the cluster client's tests: it accepts on 127.0.0.1
// (port 0), reads each request (head and Content-Length body) and hands it to the test's
// handler, which writes whatever raw bytes it wants back (a whole response, a chunked stream
// written piece by piece, or nothing before closing). With a TLS context each connection is
// ended by tls::serve_tls on a thread of its own, the handler speaking plaintext. Every request
// seen is recorded.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/tcp_listen.h"
#include "tls/tunnel.h"

namespace space::test_support {

struct FakeRequest {
  std::string method, target, head, body;
  // The value of a header (case-insensitive name), "" if absent.
  std::string header(const std::string& name) const {
    std::string lower_head;
    for (char c : head)
      lower_head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string key = "\r\n";
    for (char c : name) key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    key += ":";
    size_t at = lower_head.find(key);
    if (at == std::string::npos) return "";
    size_t start = at + key.size();
    size_t end = head.find("\r\n", start);
    std::string v = head.substr(start, end - start);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    return v;
  }
};

class FakeConn {
 public:
  explicit FakeConn(int fd, int stop_fd) : fd_(fd), stop_fd_(stop_fd) {}
  // Writes all of `data`; false once the client is gone or the server stops.
  bool write(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Writes one chunk of a chunked body.
  bool chunk(const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return write(size + data + "\r\n");
  }
  // Sleeps up to `ms` unless the server stops meanwhile (then false).
  bool sleep_ms(int ms) {
    pollfd p{stop_fd_, POLLIN, 0};
    return ::poll(&p, 1, ms) == 0;
  }
  // Waits until the client closes the connection or the server stops (up to `ms`).
  bool wait_client_gone(int ms) {
    pollfd p[2] = {{fd_, POLLRDHUP, 0}, {stop_fd_, POLLIN, 0}};
    return ::poll(p, 2, ms) > 0 && p[0].revents != 0;
  }

 private:
  int fd_;
  int stop_fd_;
};

class FakeHttpServer {
 public:
  // Returns whether the connection may carry another request.
  using Handler = std::function<bool(const FakeRequest&, FakeConn&)>;

  explicit FakeHttpServer(Handler handler, std::shared_ptr<SSL_CTX> tls = nullptr)
      : handler_(std::move(handler)), tls_(std::move(tls)), stop_(::eventfd(0, EFD_CLOEXEC)) {
    ListenAddress a{AF_INET, "127.0.0.1", 0, true};
    auto l = listen_tcp(a);
    EXPECT_TRUE(l.has_value()) << (l ? "" : l.error().message());
    if (!l) return;
    listener_ = std::move(l->first);
    port_ = l->second;
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~FakeHttpServer() { stop(); }

  void stop() {
    if (stopped_.exchange(true)) return;
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    if (accept_thread_.joinable()) accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  uint16_t port() const { return port_; }
  std::string url() const {
    return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
  }
  std::vector<FakeRequest> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int connections() const { return connections_.load(); }

 private:
  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents != 0) return;
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++connections_;
      std::lock_guard lock(mu_);
      if (tls_) {
        auto pair = tls::plaintext_pair();
        if (!pair) {
          ::close(fd);
          continue;
        }
        int app = pair->second.release();
        // The TLS side ends with the stop eventfd; only the plaintext end is listed.
        open_fds_.push_back(app);
        threads_.emplace_back([this, fd, relay = std::move(pair->first)]() mutable {
          tls::TunnelOptions o;
          o.cancel_fd = stop_.get();
          (void)tls::serve_tls(UniqueFd(fd), std::move(relay), tls_.get(), o);
        });
        threads_.emplace_back([this, app] { serve(app); });
      } else {
        open_fds_.push_back(fd);
        threads_.emplace_back([this, fd] { serve(fd); });
      }
    }
  }

  void forget(int fd) {
    std::lock_guard lock(mu_);
    std::erase(open_fds_, fd);
  }

  void serve(int fd) {
    FakeConn conn(fd, stop_.get());
    std::string buf;
    for (;;) {
      size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        if (!read_more(fd, buf)) return finish(fd);
      }
      FakeRequest r;
      r.head = buf.substr(0, end + 2);
      buf.erase(0, end + 4);
      size_t sp1 = r.head.find(' '), sp2 = r.head.find(' ', sp1 + 1);
      r.method = r.head.substr(0, sp1);
      r.target = r.head.substr(sp1 + 1, sp2 - sp1 - 1);
      std::string cl = r.header("Content-Length");
      size_t len = cl.empty() ? 0 : std::stoul(cl);
      while (buf.size() < len) {
        if (!read_more(fd, buf)) return finish(fd);
      }
      r.body = buf.substr(0, len);
      buf.erase(0, len);
      {
        std::lock_guard lock(mu_);
        requests_.push_back(r);
      }
      if (!handler_(r, conn)) return finish(fd);
    }
  }

  bool read_more(int fd, std::string& buf) {
    char tmp[4096];
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(p, 2, 10'000) <= 0 || p[1].revents != 0) return false;
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  }

  void finish(int fd) {
    ::shutdown(fd, SHUT_RDWR);
    forget(fd);
    ::close(fd);
  }

  Handler handler_;
  std::shared_ptr<SSL_CTX> tls_;
  UniqueFd stop_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> connections_{0};
  std::mutex mu_;
  std::vector<int> open_fds_;
  std::vector<std::thread> threads_;
  std::vector<FakeRequest> requests_;
};

// A whole response with a Content-Length body.
inline std::string fake_response(int status, const std::string& body,
                                 const std::string& extra_headers = "",
                                 const std::string& content_type = "application/json") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" +
         body;
}

}  // namespace space::test_support
