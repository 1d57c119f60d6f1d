// A small frame-speaking client for tests that run the REAL space-agent binary as a child over
// a socketpair, the way the linux runtime starts it:
//   space-agent --channel-fd 3 --spare-fds 4,5 --hold-fds 6
// The test keeps the daemon's end of the channel and its own copy of the spare's daemon end
// (what a restarted daemon would take with pidfd_getfd). With ListenChannel the agent instead
// listens on a Unix socket (`--channel-listen unix:PATH`, the code path of the firecracker
// runtime's vsock listener) and the test connects to it. Frames for other streams are queued
// per stream, so tests can run several execs at once. The destructor SIGKILLs the agent; its
// shims see their control pipes close and kill their process trees.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "proto/frame.h"

namespace space::agent::testing {

using nlohmann::json;
using proto::Frame;
using proto::FrameType;
using namespace std::chrono_literals;

// A loopback port of `type` (SOCK_STREAM, SOCK_DGRAM) that was free a moment ago.
inline uint16_t free_loopback_port(int type) {
  UniqueFd fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

// The next datagram on `fd` within `timeout`, or nullopt.
inline std::optional<std::string> recv_datagram(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  char buf[8192];
  ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

// A socket of `type` connected to 127.0.0.1:port (a guest process reaching an agent listener).
inline UniqueFd connect_loopback(int type, uint16_t port) {
  UniqueFd fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0)
      << std::strerror(errno);
  return fd;
}

// The agent binary: $SPACE_AGENT_BIN, else the build's own (SPACE_AGENT_BIN_DEFAULT, set by
// tests/CMakeLists.txt), else space-agent next to the test binary or one level up
// (<build>/tests/space_unit_tests -> <build>/space-agent). Empty if none exists.
inline std::string agent_binary() {
  if (const char* env = std::getenv("SPACE_AGENT_BIN"); env && *env)
    return ::access(env, X_OK) == 0 ? env : "";
#ifdef SPACE_AGENT_BIN_DEFAULT
  if (::access(SPACE_AGENT_BIN_DEFAULT, X_OK) == 0) return SPACE_AGENT_BIN_DEFAULT;
#endif
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string dir(self, static_cast<size_t>(n));
  dir.resize(dir.rfind('/'));
  for (std::string cand : {dir + "/space-agent", dir.substr(0, dir.rfind('/')) + "/space-agent"})
    if (::access(cand.c_str(), X_OK) == 0) return cand;
  return "";
}

#define SKIP_WITHOUT_AGENT()                                                               \
  do {                                                                                     \
    if (::space::agent::testing::agent_binary().empty())                                   \
      GTEST_SKIP() << "space-agent binary not found: build the space-agent target or set " \
                      "SPACE_AGENT_BIN";                                                   \
  } while (0)

// A connection to the Unix socket at `path`, retried while it does not exist yet or refuses
// (the agent is still starting) for up to `timeout`; an empty fd if none came.
inline UniqueFd connect_unix(const std::string& path, std::chrono::milliseconds timeout = 5000ms) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  path.copy(sa.sun_path, sizeof sa.sun_path - 1);
  while (true) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return {};
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) return fd;
    if ((errno != ENOENT && errno != ECONNREFUSED) || std::chrono::steady_clock::now() > deadline)
      return {};
    ::usleep(5000);
  }
}

// Where an agent started with `--channel-listen unix:PATH` listens.
struct ListenChannel {
  std::string path;
};

// What an exec stream produced.
struct ExecResult {
  std::optional<int> pid;  // from `started`
  std::string out;
  std::string err;
  json exit;  // the `exit` payload; null if none arrived in time
};

class AgentClient {
 public:
  // Starts the agent. `extra_args` are appended to the standard command line. With run_as_uid
  // (needs root) the agent runs as that uid and gid instead of the test's.
  explicit AgentClient(std::vector<std::string> extra_args = {}, int run_as_uid = -1) {
    int ch[2], sp[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch) < 0 ||
        ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
      ADD_FAILURE() << "socketpair failed";
      return;
    }
    int hold = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    std::string bin = agent_binary();
    std::vector<std::string> args = {bin,   "--channel-fd", "3", "--spare-fds",
                                     "4,5", "--hold-fds",   "6"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    char* envp[] = {nullptr};
    pid_ = ::fork();
    if (pid_ == 0) {
      // Async-signal-safe only. Move the sources out of the way first, then place them.
      int src[4] = {ch[1], sp[0], sp[1], hold};
      for (int& s : src) s = ::fcntl(s, F_DUPFD, 100);
      for (int i = 0; i < 4; ++i) ::dup2(src[i], 3 + i);
      ::close_range(7, ~0u, 0);
      if (run_as_uid >= 0 &&
          (::setgroups(0, nullptr) < 0 || ::setresgid(run_as_uid, run_as_uid, run_as_uid) < 0 ||
           ::setresuid(run_as_uid, run_as_uid, run_as_uid) < 0))
        _exit(126);
      ::execve(argv[0], argv.data(), envp);
      _exit(127);
    }
    ::close(ch[1]);
    ::close(sp[0]);
    ::close(hold);
    channel_.reset(ch[0]);
    spare_.reset(sp[1]);
  }
  // Starts `space-agent --channel DEVICE` (no spare, no held fd); `daemon_end` is the test's
  // side of that device (e.g. a pty master).
  AgentClient(const std::string& device, UniqueFd daemon_end) {
    spawn({agent_binary(), "--channel", device});
    channel_ = std::move(daemon_end);
  }
  // Starts `space-agent --channel-listen unix:PATH` (no spare, no held fd) plus `extra_args`.
  // There is no channel until connect().
  explicit AgentClient(ListenChannel listen, std::vector<std::string> extra_args = {})
      : listen_path_(listen.path) {
    std::vector<std::string> args = {agent_binary(), "--channel-listen", "unix:" + listen.path};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    spawn(std::move(args));
  }
  ~AgentClient() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  pid_t pid() const { return pid_; }
  int channel_fd() const { return channel_.get(); }
  UniqueFd& channel() { return channel_; }
  // The test's copy of the spare's daemon end (the agent's fd 5).
  UniqueFd& spare() { return spare_; }

  // A new connection to the agent's listener (ListenChannel), as a new daemon would make.
  UniqueFd connect_listener(std::chrono::milliseconds timeout = 5000ms) {
    UniqueFd fd = connect_unix(listen_path_, timeout);
    EXPECT_TRUE(fd) << "connect " << listen_path_ << ": " << std::strerror(errno);
    return fd;
  }
  // connect_listener(), and the client switches to that connection.
  bool connect(std::chrono::milliseconds timeout = 5000ms) {
    UniqueFd fd = connect_listener(timeout);
    if (!fd) return false;
    use_channel(std::move(fd));
    return true;
  }

  // Switches the client to another fd (after a reattach); pending frames are dropped.
  void use_channel(UniqueFd fd) {
    channel_ = std::move(fd);
    decoder_ = proto::Decoder();
    queued_.clear();
    eof_ = false;
  }

  void send_raw(std::string_view bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(channel_.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == ENOTSOCK)  // a device channel (pty)
        n = ::write(channel_.get(), bytes.data() + off, bytes.size() - off);
      if (n < 0 && errno == EINTR) continue;
      ASSERT_GT(n, 0) << "send to agent: " << std::strerror(errno);
      off += static_cast<size_t>(n);
    }
  }
  void send(FrameType t, uint32_t stream, std::string_view payload) {
    std::string out;
    ASSERT_TRUE(proto::encode(t, stream, payload, out));
    send_raw(out);
  }
  void send_json(FrameType t, uint32_t stream, const json& j) { send(t, stream, j.dump()); }

  // The next frame on `stream` (frames of other streams are queued), or nullopt on timeout/EOF.
  std::optional<Frame> next(uint32_t stream, std::chrono::milliseconds timeout = 5000ms) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (auto& q = queued_[stream]; !q.empty()) {
        Frame f = std::move(q.front());
        q.pop_front();
        return f;
      }
      if (!pump(deadline)) return std::nullopt;
    }
  }
  // The next frame on any stream.
  std::optional<Frame> next_any(std::chrono::milliseconds timeout = 5000ms) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      for (auto& [s, q] : queued_)
        if (!q.empty()) {
          Frame f = std::move(q.front());
          q.pop_front();
          return f;
        }
      if (!pump(deadline)) return std::nullopt;
    }
  }
  bool eof() const { return eof_; }

  json hello(std::chrono::milliseconds timeout = 5000ms) {
    auto f = next(0, timeout);
    if (!f || f->type != FrameType::kHello) {
      ADD_FAILURE() << "no hello frame";
      return nullptr;
    }
    return json::parse(f->payload);
  }

  // Sends a request and returns the response payload (null on timeout).
  json request(uint32_t stream, const json& req, std::chrono::milliseconds timeout = 5000ms) {
    send_json(FrameType::kRequest, stream, req);
    return response(stream, timeout);
  }
  json response(uint32_t stream, std::chrono::milliseconds timeout = 5000ms) {
    while (auto f = next(stream, timeout)) {
      if (f->type == FrameType::kResponse) return json::parse(f->payload);
      ADD_FAILURE() << "unexpected frame " << proto::frame_type_name(f->type) << " on stream "
                    << stream;
    }
    return nullptr;
  }

  // Collects an exec stream until `exit`, crediting output as it arrives if `credit`.
  ExecResult collect(uint32_t stream, std::chrono::milliseconds timeout = 10000ms,
                     bool credit = true) {
    ExecResult r;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      auto f = next(stream, left);
      if (!f) break;
      switch (f->type) {
        case FrameType::kStarted:
          r.pid = json::parse(f->payload).at("pid").get<int>();
          break;
        case FrameType::kStdout:
        case FrameType::kStderr:
          (f->type == FrameType::kStdout ? r.out : r.err) += f->payload;
          if (credit) send_json(FrameType::kCredit, stream, {{"bytes", f->payload.size()}});
          break;
        case FrameType::kExit:
          r.exit = json::parse(f->payload);
          return r;
        default:
          ADD_FAILURE() << "unexpected frame " << proto::frame_type_name(f->type);
      }
    }
    return r;
  }

  ExecResult run(uint32_t stream, json spec, std::chrono::milliseconds timeout = 10000ms) {
    if (!spec.contains("env")) spec["env"] = {"PATH=/usr/local/bin:/usr/bin:/bin"};
    send_json(FrameType::kExec, stream, spec);
    return collect(stream, timeout);
  }

 private:
  // Forks and execs `args` (the agent and its options) with an empty environment and no fd
  // above stderr.
  void spawn(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    char* envp[] = {nullptr};
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close_range(3, ~0u, 0);
      ::execve(argv[0], argv.data(), envp);
      _exit(127);
    }
  }

  // Reads more frames into the queues; false on timeout or EOF.
  bool pump(std::chrono::steady_clock::time_point deadline) {
    while (true) {
      auto r = decoder_.next();
      if (!r) {
        ADD_FAILURE() << "agent sent a bad frame: " << r.error().message();
        return false;
      }
      if (r->has_value()) {
        uint32_t s = (*r)->stream;
        queued_[s].push_back(std::move(**r));
        return true;
      }
      if (eof_) return false;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) return false;
      pollfd p{channel_.get(), POLLIN, 0};
      int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      char buf[65536];
      ssize_t got = ::read(channel_.get(), buf, sizeof(buf));
      if (got <= 0) {
        eof_ = true;
        continue;
      }
      decoder_.feed(std::span<const char>(buf, static_cast<size_t>(got)));
    }
  }

  pid_t pid_ = -1;
  std::string listen_path_;
  UniqueFd channel_;
  UniqueFd spare_;
  proto::Decoder decoder_;
  std::map<uint32_t, std::deque<Frame>> queued_;
  bool eof_ = false;
};

// True once `pid` is gone (kill(pid, 0) says ESRCH), polling up to `timeout`. With
// allow_zombie a dead process still waiting for a reaper outside our control (the host's init,
// once the agent itself is gone) counts as gone too.
inline bool wait_gone(pid_t pid, std::chrono::milliseconds timeout = 3000ms,
                      bool allow_zombie = false) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::kill(pid, 0) < 0 && errno == ESRCH) return true;
    if (allow_zombie) {
      std::string path = "/proc/" + std::to_string(pid) + "/stat";
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        char buf[512] = {};
        size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
        std::fclose(f);
        std::string_view s(buf, n);
        size_t close = s.rfind(')');
        if (close != std::string_view::npos && close + 2 < s.size() && s[close + 2] == 'Z')
          return true;
      }
    }
    ::usleep(5000);
  }
  return false;
}

// A temporary directory removed (recursively) at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/space-agent-test.XXXXXX";
    path_ = ::mkdtemp(tmpl) ? tmpl : "";
    EXPECT_FALSE(path_.empty());
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);  // does not follow symlinks
  }
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view rel) const { return path_ + "/" + std::string(rel); }

 private:
  std::string path_;
};

}  // namespace space::agent::testing
