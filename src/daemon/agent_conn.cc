// Agent channel: frame routing, validation and bounded writes. Everything read here comes from
// inside a sandbox and is treated as hostile: frame headers are validated by the decoder,
// frames for unknown streams are dropped, a stream whose agent overruns the flow-control window
// or a malformed hello closes the channel. Agent-initiated (egress) streams follow the same
// rule: a malformed connect, a reused id or more than kMaxEgressConns open closes the channel;
// so does a `dns` frame on a daemon-range id or outside the DNS datagram bounds.
#include "daemon/agent_conn.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

namespace space::daemon {

using proto::Frame;
using proto::FrameType;

Result<Frame> Stream::pop(std::optional<Clock::time_point> deadline) {
  std::unique_lock lock(mu_);
  while (q_.empty() && !err_) {
    if (deadline) {
      if (cv_.wait_until(lock, *deadline) == std::cv_status::timeout && q_.empty() && !err_)
        return space::fail(Code::kTimeout, "timed out waiting for the agent");
    } else {
      cv_.wait(lock);
    }
  }
  if (!q_.empty()) {
    Frame f = std::move(q_.front());
    q_.pop_front();
    return f;
  }
  return std::unexpected(*err_);
}

std::optional<Frame> Stream::try_pop() {
  std::lock_guard lock(mu_);
  if (q_.empty()) return std::nullopt;
  Frame f = std::move(q_.front());
  q_.pop_front();
  return f;
}

bool Stream::reserve_stdin(size_t n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    return ended_ || err_ || stdin_unacked_ == 0 || stdin_unacked_ + n <= proto::kStreamWindow;
  });
  if (ended_ || err_) return false;
  stdin_unacked_ += n;
  return true;
}

void Stream::stdin_credited(size_t n) {
  std::lock_guard lock(mu_);
  stdin_unacked_ = n > stdin_unacked_ ? 0 : stdin_unacked_ - n;
  cv_.notify_all();
}

bool Stream::push(Frame f) {
  std::lock_guard lock(mu_);
  if (f.type == FrameType::kExit) ended_ = true;
  if (f.type == FrameType::kStdout || f.type == FrameType::kStderr ||
      (f.type == FrameType::kData && !f.payload.empty())) {
    unacked_ += f.payload.size();
    if (unacked_ > proto::kStreamWindow) return false;
  }
  q_.push_back(std::move(f));
  cv_.notify_all();
  return true;
}

void Stream::fail(const Error& e) {
  std::lock_guard lock(mu_);
  if (!err_) err_ = e;
  cv_.notify_all();
}

void Stream::credited(size_t n) {
  std::lock_guard lock(mu_);
  unacked_ = n > unacked_ ? 0 : unacked_ - n;
}

AgentConn::AgentConn(int fd, std::string name) : fd_(fd), name_(std::move(name)) {
  // Stream ids start at a random point: after a daemon restart the agent may still have
  // streams of the previous daemon open (detached execs), and a reused id would collide.
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, 0) != sizeof r) r = static_cast<uint32_t>(::getpid());
  next_stream_ = 1 + (r & 0x3fffffff);
}

Result<std::unique_ptr<AgentConn>> AgentConn::open(int fd, std::string name, bool ping_first,
                                                   std::chrono::milliseconds timeout) {
  std::unique_ptr<AgentConn> c(new AgentConn(fd, std::move(name)));
  c->wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!c->wake_) return fail_sys("eventfd");
  c->reader_ = std::thread([p = c.get()] { p->reader(); });
  if (ping_first) TRY_VOID_CTX(c->send(FrameType::kPing, 0, "reattach"), "pinging the agent");
  std::unique_lock lock(c->mu_);
  bool ok = c->hello_cv_.wait_for(lock, timeout, [&] { return c->hello_ || c->lost_error_; });
  if (!c->hello_) {
    Error e = c->lost_error_ ? *c->lost_error_
                             : Error(Code::kTimeout, "the agent did not say hello within " +
                                                         std::to_string(timeout.count()) + " ms");
    (void)ok;
    lock.unlock();
    c->close();
    return fail(std::move(e));
  }
  return c;
}

AgentConn::~AgentConn() { close(); }

void AgentConn::close() {
  if (closed_.exchange(true)) {
    if (reader_.joinable() && reader_.get_id() != std::this_thread::get_id()) reader_.join();
    return;
  }
  uint64_t one = 1;
  if (wake_) (void)!::write(wake_.get(), &one, sizeof one);
  if (reader_.joinable()) {
    if (reader_.get_id() == std::this_thread::get_id())
      reader_.detach();
    else
      reader_.join();
  }
  lose(Error(Code::kUnavailable, "the sandbox's agent channel is closed"));
}

void AgentConn::set_on_lost(std::function<void(const Error&)> cb) {
  std::optional<Error> already;
  {
    std::lock_guard lock(mu_);
    if (lost_error_)
      already = lost_error_;
    else
      on_lost_ = std::move(cb);
  }
  if (already && cb) cb(*already);
}

void AgentConn::lose(const Error& e) {
  std::map<uint32_t, std::shared_ptr<Stream>> streams;
  std::function<void(const Error&)> cb;
  {
    std::lock_guard lock(mu_);
    if (lost_error_) return;
    lost_error_ = e;
    lost_ = true;
    streams.swap(streams_);
    agent_streams_ = 0;
    cb = std::move(on_lost_);
    hello_cv_.notify_all();
  }
  // The callback first: whoever then sees a failed stream can rely on it having run.
  if (cb && !closed_.load()) cb(e);
  for (auto& [id, s] : streams) s->fail(e);
}

std::shared_ptr<Stream> AgentConn::open_stream() {
  // Daemon-chosen ids never have kAgentStreamBit (nor are 0, the control stream).
  uint32_t id;
  do {
    id = next_stream_.fetch_add(1) & ~proto::kAgentStreamBit;
  } while (id == 0);
  auto s = std::make_shared<Stream>(id);
  std::lock_guard lock(mu_);
  if (lost_error_)
    s->fail(*lost_error_);
  else
    streams_[s->id()] = s;
  return s;
}

void AgentConn::close_stream(uint32_t id) {
  std::lock_guard lock(mu_);
  if (streams_.erase(id) > 0 && proto::is_agent_stream(id)) --agent_streams_;
}

Result<void> AgentConn::accept_agent_stream(Stream& s) {
  s.accepted_ = true;  // before the ok goes out, so the agent's first data finds it set
  return send_json(FrameType::kResponse, s.id(), {{"ok", true}});
}

size_t AgentConn::agent_streams() const {
  std::lock_guard lock(mu_);
  return agent_streams_;
}

void AgentConn::set_on_agent_stream(AgentStreamHandler h) {
  std::lock_guard hl(handler_mu_);
  on_agent_stream_ = std::move(h);
  if (!on_agent_stream_) return;
  auto pending = std::move(pending_agent_streams_);
  pending_agent_streams_.clear();
  for (auto& [s, port] : pending) on_agent_stream_(std::move(s), port);
}

void AgentConn::on_connect(Frame f) {
  auto bad = [&](const std::string& why) {
    lose(Error(Code::kProtocol,
               "the agent sent a bad connect on stream " + std::to_string(f.stream) + ": " + why));
  };
  if (!proto::is_agent_stream(f.stream)) return bad("the id is not in the agent's range");
  auto j = nlohmann::json::parse(f.payload, nullptr, false);
  if (!j.is_object() || !j.contains("port") || !j["port"].is_number_integer())
    return bad("the payload is not {\"port\":N}");
  int64_t port = j["port"].get<int64_t>();
  if (port < 1 || port > 65535) return bad("port " + std::to_string(port) + " is out of range");
  auto s = std::make_shared<Stream>(f.stream);
  bool reused = false, full = false;
  size_t limit = 0;
  {
    std::lock_guard lock(mu_);
    limit = agent_stream_limit_;
    if (lost_error_) return;
    if (streams_.contains(f.stream))
      reused = true;
    else if (agent_streams_ >= agent_stream_limit_)
      full = true;
    else {
      streams_[f.stream] = s;
      ++agent_streams_;
    }
  }
  if (reused) return bad("the stream is already open");
  if (full) {
    // Not a violation: the agent keeps the same bound, but its count drops as soon as it closes
    // a connection and ours only when the relay has finished with the stream. Refused here, on
    // the reader thread (one small frame; send's wait is bounded).
    (void)send_json(
        FrameType::kResponse, f.stream,
        {{"ok", false},
         {"error",
          {{"code", "resource_exhausted"},
           {"message", "more than " + std::to_string(limit) + " egress connections are open"}}}});
    return;
  }
  std::lock_guard hl(handler_mu_);
  if (on_agent_stream_)
    on_agent_stream_(std::move(s), static_cast<uint16_t>(port));
  else
    pending_agent_streams_.emplace_back(std::move(s), static_cast<uint16_t>(port));
}

void AgentConn::set_on_dns(DnsHandler h) {
  std::lock_guard hl(handler_mu_);
  on_dns_ = std::move(h);
}

void AgentConn::on_dns(Frame f) {
  auto bad = [&](const std::string& why) {
    lose(Error(Code::kProtocol, "the agent sent a bad dns frame on stream " +
                                    std::to_string(f.stream) + ": " + why));
  };
  if (!proto::is_agent_stream(f.stream)) return bad("the id is not in the agent's range");
  if (f.payload.size() < proto::kDnsHeaderSize || f.payload.size() > proto::kMaxDnsDatagram)
    return bad(std::to_string(f.payload.size()) + " bytes is not a DNS query size (" +
               std::to_string(proto::kDnsHeaderSize) + ".." +
               std::to_string(proto::kMaxDnsDatagram) + ")");
  std::lock_guard hl(handler_mu_);
  if (on_dns_) on_dns_(f.stream, std::move(f.payload));
}

void AgentConn::set_on_exec_report(ExecReportHandler h) {
  std::lock_guard rl(report_mu_);
  on_exec_report_ = std::move(h);
  std::vector<std::string> pending = std::move(pending_exec_reports_);
  pending_exec_reports_.clear();
  pending_exec_report_bytes_ = 0;
  if (!on_exec_report_) return;
  for (const std::string& payload : pending) {
    if (auto r = on_exec_report_(payload); !r) {
      lose(Error(Code::kProtocol, "the agent sent a bad proc_exec: " + r.error().message()));
      return;
    }
  }
}

void AgentConn::on_exec_report(Frame f) {
  if (f.stream != 0) {
    lose(Error(Code::kProtocol, "the agent sent proc_exec on stream " + std::to_string(f.stream) +
                                    " (it belongs on stream 0)"));
    return;
  }
  std::lock_guard rl(report_mu_);
  if (on_exec_report_) {
    if (auto r = on_exec_report_(f.payload); !r)
      lose(Error(Code::kProtocol, "the agent sent a bad proc_exec: " + r.error().message()));
    return;
  }
  if (pending_exec_report_bytes_ + f.payload.size() > kMaxPendingExecReportBytes) {
    if (!warned_exec_reports_)
      spdlog::warn("{}: dropping the agent's exec reports: nobody takes them", name_);
    warned_exec_reports_ = true;
    return;
  }
  pending_exec_report_bytes_ += f.payload.size();
  pending_exec_reports_.push_back(std::move(f.payload));
}

Result<void> AgentConn::send(FrameType type, uint32_t stream, std::string_view payload) {
  std::string buf;
  TRY_VOID(proto::encode(type, stream, payload, buf));

  std::lock_guard lock(write_mu_);
  if (lost_) return fail(Code::kUnavailable, "the sandbox's agent is gone");
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = ::send(fd_, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The agent is not reading. Wait a bounded time: a stuck or hostile agent must not
      // pin a daemon thread forever.
      pollfd p{fd_, POLLOUT, 0};
      int r = ::poll(&p, 1, 10000);
      if (r == 0) {
        Error e(Code::kTimeout, "the agent stopped reading its channel for 10 s");
        lose(e);
        return fail(e);
      }
      continue;
    }
    Error e = Error::sys("writing to the agent channel");
    lose(e);
    return fail(e);
  }
  return {};
}

Result<void> AgentConn::send_json(FrameType type, uint32_t stream, const nlohmann::json& j) {
  return send(type, stream, j.dump());
}

void AgentConn::credit(Stream& s, size_t bytes) {
  if (bytes == 0) return;
  s.credited(bytes);
  (void)send_json(FrameType::kCredit, s.id(), {{"bytes", bytes}});
}

Error AgentConn::agent_error(const nlohmann::json& err, std::string_view what) {
  std::string code = err.is_object() && err.contains("code") && err["code"].is_string()
                         ? err["code"].get<std::string>()
                         : "internal";
  std::string msg = err.is_object() && err.contains("message") && err["message"].is_string()
                        ? err["message"].get<std::string>()
                        : "the agent reported an error";
  int en = err.is_object() && err.contains("errno") && err["errno"].is_number_integer()
               ? err["errno"].get<int>()
               : 0;
  if (msg.size() > 4096) msg.resize(4096);
  Code c = Code::kInternal;
  if (code == "not_found")
    c = Code::kNotFound;
  else if (code == "permission_denied")
    c = Code::kPermissionDenied;
  else if (code == "invalid_argument" || code == "not_dir" || code == "is_dir")
    c = Code::kInvalidArgument;
  else if (code == "exists")
    c = Code::kAlreadyExists;
  else if (code == "no_space")
    c = Code::kResourceExhausted;
  std::string m = std::string(what);
  if (!m.empty()) m += ": ";
  return Error(c, m + msg, en);
}

Result<nlohmann::json> AgentConn::request(const nlohmann::json& req,
                                          std::chrono::milliseconds timeout) {
  auto s = open_stream();
  struct Closer {
    AgentConn* c;
    uint32_t id;
    ~Closer() { c->close_stream(id); }
  } closer{this, s->id()};
  TRY_VOID(send_json(FrameType::kRequest, s->id(), req));
  auto deadline = Clock::now() + timeout;
  for (;;) {
    Frame f = TRY(s->pop(deadline));
    if (f.type != FrameType::kResponse) continue;  // stray data for a one-shot request
    auto j = nlohmann::json::parse(f.payload, nullptr, false);
    if (!j.is_object()) return fail(Code::kProtocol, "the agent sent a malformed response");
    // Typed checks only: json::value() throws on a wrong type, and this is agent input.
    if (j.contains("ok") && j["ok"].is_boolean() && j["ok"].get<bool>()) return j;
    return fail(agent_error(j.value("error", nlohmann::json::object()), ""));
  }
}

void AgentConn::route(Frame f) {
  frames_in_.fetch_add(1);
  switch (f.type) {
    case FrameType::kHello: {
      auto j = nlohmann::json::parse(f.payload, nullptr, false);
      if (!j.is_object() || !j.contains("version") || !j["version"].is_number_integer() ||
          j["version"].get<int64_t>() != proto::kProtocolVersion) {
        lose(Error(Code::kProtocol,
                   "the agent sent an unsupported hello: " + f.payload.substr(0, 200)));
        return;
      }
      std::lock_guard lock(mu_);
      hello_ = true;
      hello_cv_.notify_all();
      return;
    }
    case FrameType::kPong:
      return;
    case FrameType::kConnect:
      on_connect(std::move(f));
      return;
    case FrameType::kProcExec:
      on_exec_report(std::move(f));
      return;
    case FrameType::kDns:
      on_dns(std::move(f));
      return;
    case FrameType::kCredit: {
      // The agent moved this many stdin bytes into the process's pipe.
      auto j = nlohmann::json::parse(f.payload, nullptr, false);
      if (!j.is_object() || !j.contains("bytes") || !j["bytes"].is_number_unsigned()) {
        lose(Error(Code::kProtocol, "the agent sent a malformed credit"));
        return;
      }
      std::shared_ptr<Stream> s;
      {
        std::lock_guard lock(mu_);
        auto it = streams_.find(f.stream);
        if (it != streams_.end()) s = it->second;
      }
      if (s) s->stdin_credited(j["bytes"].get<size_t>());
      return;
    }
    case FrameType::kResponse:
    case FrameType::kStarted:
    case FrameType::kStdout:
    case FrameType::kStderr:
    case FrameType::kExit:
    case FrameType::kReset:
    case FrameType::kData: {
      if (f.type == FrameType::kReset && !proto::is_agent_stream(f.stream)) {
        lose(Error(Code::kProtocol, "the agent sent a reset on a daemon stream"));
        return;
      }
      std::shared_ptr<Stream> s;
      {
        std::lock_guard lock(mu_);
        auto it = streams_.find(f.stream);
        if (it != streams_.end()) s = it->second;
      }
      if (!s) return;  // a stream nobody waits for any more (client gone): drop
      if (f.type == FrameType::kData && proto::is_agent_stream(f.stream) && !s->accepted_) {
        lose(Error(Code::kProtocol, "the agent sent egress data before its connect was accepted"));
        return;
      }
      if (!s->push(std::move(f)))
        lose(Error(Code::kProtocol, "the agent overran the flow-control window"));
      return;
    }
    default:
      // Frames only the daemon may send (request, exec, stdin, signal, credit, ping).
      lose(Error(Code::kProtocol, std::string("the agent sent a frame of daemon-only type ") +
                                      proto::frame_type_name(f.type)));
  }
}

void AgentConn::reader() {
  proto::Decoder dec;
  std::string buf(64 * 1024, '\0');
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  for (;;) {
    int r = ::poll(fds, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      lose(Error::sys("poll on the agent channel"));
      return;
    }
    if (fds[1].revents) return;  // close() requested
    if (!fds[0].revents) continue;
    ssize_t n = ::read(fd_, buf.data(), buf.size());
    if (n == 0) {
      lose(Error(Code::kUnavailable, "the sandbox's agent closed its channel (it exited)"));
      return;
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      lose(Error::sys("reading the agent channel"));
      return;
    }
    dec.feed(std::span<const char>(buf.data(), static_cast<size_t>(n)));
    for (;;) {
      auto next = dec.next();
      if (!next) {
        spdlog::warn("{}: {}", name_, next.error().message());
        lose(next.error());
        return;
      }
      if (!*next) break;
      route(std::move(**next));
      if (lost_) return;
    }
  }
}

void AgentConn::set_agent_stream_limit(size_t n) {
  std::lock_guard lock(mu_);
  agent_stream_limit_ = std::clamp<size_t>(n, 1, proto::kMaxEgressConns);
}

}  // namespace space::daemon
