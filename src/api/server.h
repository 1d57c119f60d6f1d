// The REST API server of spaced: HTTP/1.1 over a Unix domain socket, a thread per connection.
//
//   auto server = TRY(api::ApiServer::listen("/run/space/space.sock", service));
//   std::thread t([&] { server->serve(); });   // or serve() on the main thread
//   ...                                        // on SIGTERM: server->stop(); t.join();
//
// listen() creates the socket file mode 0600 (its parent directory 0700 if missing), replacing
// a stale socket only if nothing answers on it. Connections beyond max_connections get a 503.
// A request header must arrive within idle_timeout of the previous request (so a slow-loris
// client cannot pin a thread), a body may not stall for longer than body_timeout (except
// exec's stdin, which is interactive), JSON bodies are limited to 1 MiB, headers to 16 KiB.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>

#include "api/metrics.h"
#include "common/error.h"
#include "common/fd.h"
#include "daemon/service.h"

namespace space::api {

class ApiServer {
 public:
  struct Options {
    size_t max_connections = 512;
    std::chrono::milliseconds idle_timeout{60'000};
    std::chrono::milliseconds body_timeout{60'000};
    uint32_t header_limit = 16 * 1024;
  };

  // Binds and listens (clients may connect from here on; they are served once serve() runs).
  static Result<std::unique_ptr<ApiServer>> listen(const std::filesystem::path& socket_path,
                                                   daemon::SandboxService& service,
                                                   Options options);
  static Result<std::unique_ptr<ApiServer>> listen(const std::filesystem::path& socket_path,
                                                   daemon::SandboxService& service) {
    return listen(socket_path, service, Options{});
  }

  // Stops, waits for the connections still open, and removes the socket file (if it is still
  // ours). serve() must have returned (or never run).
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Accepts and serves connections until stop(); returns after every connection has ended.
  void serve();
  // Makes serve() return: idempotent, callable from any thread and async-signal-safe. Open
  // connections are cut, running execs streamed to them are killed.
  void stop();

  const std::filesystem::path& socket_path() const { return socket_path_; }
  const ApiMetrics& metrics() const { return metrics_; }

 private:
  ApiServer(std::filesystem::path socket_path, daemon::SandboxService& service, Options options,
            UniqueFd listen_fd, UniqueFd stop_fd, ino_t socket_ino);
  void serve_connection(UniqueFd fd);
  void reject(UniqueFd fd);
  void wait_connections();

  std::filesystem::path socket_path_;
  daemon::SandboxService& service_;
  Options options_;
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // eventfd: readable once stop() was called
  ino_t socket_ino_;
  ApiMetrics metrics_;

  std::mutex mu_;
  std::condition_variable idle_cv_;
  size_t active_ = 0;  // guarded by mu_
};

}  // namespace space::api
