// The agent's start-up, event loop, channel handling (including reattach through the spare
// socketpair, and the listener of --channel-listen) and PID 1 reaping. Exec streams live in
// agent_exec.cc, requests and file transfers in agent_requests.cc.
#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
// After sys/socket.h, which it needs.
#include <linux/vm_sockets.h>

#include <algorithm>

#include "agent/response.h"

namespace space::agent {

void log_line(std::string_view msg) {
  // At most kBurst lines per 10 s window, so a misbehaving daemon cannot flood the log.
  constexpr int kBurst = 20;
  static Clock::time_point window_start;
  static int in_window = 0;
  static int suppressed = 0;
  auto now = Clock::now();
  std::string line;
  if (now - window_start > std::chrono::seconds(10)) {
    if (suppressed > 0)
      line = "space-agent: (" + std::to_string(suppressed) + " messages suppressed)\n";
    window_start = now;
    in_window = 0;
    suppressed = 0;
  }
  if (++in_window > kBurst) {
    ++suppressed;
    return;
  }
  line += "space-agent: ";
  line += msg;
  line += '\n';
  (void)!::write(2, line.data(), line.size());
}

namespace {

// Backlog of the --channel-listen socket: one daemon connects at a time; a few more only queue
// to be replaced (on_channel_accept).
constexpr int kChannelBacklog = 4;
// Connections accepted in one pass of on_channel_accept; the rest wait for the next pass.
constexpr int kMaxChannelAcceptsPerPass = 16;

Result<void> set_cloexec(int fd) {
  int fl = ::fcntl(fd, F_GETFD);
  if (fl < 0 || ::fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0)
    return fail_sys("fcntl", "F_SETFD fd " + std::to_string(fd));
  return {};
}

Result<void> set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return fail_sys("fcntl", "F_SETFL fd " + std::to_string(fd));
  return {};
}

// Stdio must be open so that no pipe the agent makes lands on 0..2 (the worker dup2s onto them).
void ensure_stdio_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0) continue;
    int n = ::open("/dev/null", O_RDWR);
    if (n < 0) n = ::open("/", O_PATH);
    if (n >= 0 && n != fd) {
      ::dup2(n, fd);
      ::close(n);
    }
  }
}

}  // namespace

Result<void> Agent::init() {
  ensure_stdio_open();
  // Files the daemon creates get exactly the requested mode; workers get 022 back.
  ::umask(0);
  // Non-dumpable: sandbox processes (same uid) can neither ptrace the agent nor open
  // /proc/1/fd/*, where the channel and the spare socketpair live.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) return fail_sys("prctl", "PR_SET_DUMPABLE 0");
  // Executed from a memfd, our comm would read "memfd:space-age"; ps should say what we are.
  (void)::prctl(PR_SET_NAME, "space-agent", 0, 0, 0);
  // Outside a pid namespace (tests) orphans still have to come to us.
  if (::getpid() != 1 && ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
    return fail_sys("prctl", "PR_SET_CHILD_SUBREAPER");
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (::sigprocmask(SIG_BLOCK, &chld, nullptr) < 0) return fail_sys("sigprocmask");
  int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return fail_sys("signalfd");
  sigfd_.reset(sfd);

  for (int fd : opts_.hold_fds)
    if (auto r = set_cloexec(fd); !r) log_line("held fd: " + r.error().message());
  UniqueFd channel;
  if (opts_.channel_listen) {
    // No channel until a daemon connects; the listener is made once epoll exists.
  } else if (!opts_.channel_path.empty()) {
    int fd = ::open(opts_.channel_path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fail_sys("open", "\"" + opts_.channel_path + "\"");
    channel.reset(fd);
  } else {
    TRY_VOID_CTX(set_cloexec(opts_.channel_fd), "channel");
    channel.reset(opts_.channel_fd);
  }
  if (opts_.spare_agent_fd >= 0) {
    TRY_VOID_CTX(set_cloexec(opts_.spare_agent_fd), "spare fds");
    TRY_VOID_CTX(set_cloexec(opts_.spare_daemon_fd), "spare fds");
    TRY_VOID_CTX(set_nonblocking(opts_.spare_agent_fd), "spare fds");
  }

  int root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return fail_sys("open", "\"/\"");
  root_fd_.reset(root);
  resolver_ = std::make_unique<PathResolver>(root_fd_.get());

  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return fail_sys("epoll_create1");
  epoll_.reset(ep);
  TRY_VOID(epoll_add(sigfd_.get(), EPOLLIN, key(kSignalFd, 0)));
  if (opts_.spare_agent_fd >= 0) TRY_VOID(epoll_add(opts_.spare_agent_fd, EPOLLIN, key(kSpare, 0)));
  // Before anything is spawned: every process the agent starts inherits the filter.
  if (opts_.exec_audit_wanted(::getpid())) TRY_VOID_CTX(start_exec_audit(), "exec auditing");
  for (size_t i = 0; i < opts_.egress_listen.size(); ++i)
    TRY_VOID_CTX(start_egress_listener(i), "egress listener " + opts_.egress_listen[i].text);
  if (opts_.dns_listen)
    TRY_VOID_CTX(start_dns_listener(), "DNS listener " + opts_.dns_listen->text);
  if (opts_.channel_listen)
    TRY_VOID_CTX(start_channel_listener(), "--channel-listen " + opts_.channel_listen->text);
  else
    set_channel(std::move(channel));
  return {};
}

Result<void> Agent::epoll_add(int fd, uint32_t events, uint64_t k) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = k;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0)
    return fail_sys("epoll_ctl", "ADD fd " + std::to_string(fd));
  return {};
}

void Agent::epoll_del(int fd) { ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

void Agent::send(proto::FrameType type, uint32_t stream, std::string_view payload) {
  if (channel_) channel_->send(type, stream, payload);
}

void Agent::send_hello() {
  json hello = {{"version", proto::kProtocolVersion}, {"pid", ::getpid()}};
  send(proto::FrameType::kHello, 0, dump_json(hello));
}

void Agent::set_channel(UniqueFd fd) {
  if (auto r = set_nonblocking(fd.get()); !r) log_line(r.error().message());
  if (::isatty(fd.get())) {
    // A tty (hvc console) must pass bytes through untouched.
    termios t;
    if (::tcgetattr(fd.get(), &t) == 0) {
      ::cfmakeraw(&t);
      ::tcsetattr(fd.get(), TCSANOW, &t);
    }
  }
  int raw = fd.get();
  channel_ = std::make_unique<Channel>(std::move(fd));
  ++channel_gen_;
  channel_in_polled_ = true;
  channel_out_polled_ = false;
  reopen_at_.reset();
  if (auto r = epoll_add(raw, EPOLLIN, key(kChannel, channel_gen_)); !r) {
    log_line(r.error().message());
    channel_.reset();
    return;
  }
  send_hello();
}

void Agent::channel_lost(std::string_view why) {
  if (!channel_) return;
  log_line("channel closed: " + std::string(why));
  epoll_del(channel_->fd());
  channel_.reset();
  ++channel_gen_;
  // Processes keep running; their output is drained and discarded until a daemon reattaches.
  detach_execs();
  drop_transfers();
  drop_egress();
  if (!opts_.channel_path.empty()) {
    reopen_at_ = Clock::now() + std::chrono::milliseconds(reopen_backoff_ms_);
    reopen_backoff_ms_ = std::min(reopen_backoff_ms_ * 2, 1000);
  }
}

void Agent::try_reopen_channel() {
  int fd = ::open(opts_.channel_path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    reopen_at_ = Clock::now() + std::chrono::milliseconds(reopen_backoff_ms_);
    reopen_backoff_ms_ = std::min(reopen_backoff_ms_ * 2, 1000);
    return;
  }
  reopen_backoff_ms_ = 50;
  set_channel(UniqueFd(fd));
}

// --channel-listen: a vsock port on VMADDR_CID_ANY (the firecracker runtime's guests), or a
// Unix socket path (the unit tests: the same code on a host without vsock).
Result<void> Agent::start_channel_listener() {
  const auto& l = *opts_.channel_listen;
  const bool vsock = l.family == Options::ChannelListen::Family::kVsock;
  int fd = ::socket(vsock ? AF_VSOCK : AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return fail_sys("socket",
                    vsock ? "AF_VSOCK (is the vsock transport module loaded?)" : "AF_UNIX");
  UniqueFd sock(fd);
  int r;
  if (vsock) {
    sockaddr_vm sa{};
    sa.svm_family = AF_VSOCK;
    sa.svm_cid = VMADDR_CID_ANY;
    sa.svm_port = l.port;
    r = ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
  } else {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    l.path.copy(sa.sun_path, sizeof sa.sun_path - 1);  // length checked by parse_options
    r = ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
  }
  if (r < 0) return fail_sys("bind", l.text + " (is the port or path already in use?)");
  if (::listen(fd, kChannelBacklog) < 0) return fail_sys("listen", l.text);
  TRY_VOID(epoll_add(fd, EPOLLIN, key(kChannelListen, 0)));
  channel_listener_ = std::move(sock);
  return {};
}

// A daemon connected to the listener: a first daemon, the same one again after a snapshot
// restore reset the vsock transport, or a restarted one (whose predecessor's connection the
// guest may not have seen close). The newest connection becomes the channel; the current one
// is let go as on a lost channel (execs keep running detached, transfers and egress end), and
// the new daemon is greeted with hello.
//
// Every connection waiting in the backlog is accepted in this pass and all but the newest are
// closed at once, so a burst of connects holds at most one fd besides the channel and never
// exhausts the agent's fds; the per-pass cap keeps a storm from starving the loop (the rest
// wait, and replace this one, on the next pass). A daemon whose connection lost that race sees
// EOF before any hello.
void Agent::on_channel_accept() {
  const bool vsock = opts_.channel_listen->family == Options::ChannelListen::Family::kVsock;
  UniqueFd newest;
  for (int i = 0; i < kMaxChannelAcceptsPerPass; ++i) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    int fd = ::accept4(channel_listener_.get(), reinterpret_cast<sockaddr*>(&peer), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        log_line(Error::sys("accept4", opts_.channel_listen->text).message());
      break;
    }
    UniqueFd conn(fd);
    if (vsock) {
      // Only the host may be the daemon. Guest processes cannot reach a guest port anyway
      // without the vsock_loopback transport (absent from the initramfs); this keeps it so.
      const auto* vm = reinterpret_cast<const sockaddr_vm*>(&peer);
      if (len < sizeof(sockaddr_vm) || vm->svm_cid != VMADDR_CID_HOST) {
        log_line("refused a channel connection from vsock CID " +
                 std::to_string(len < sizeof(sockaddr_vm) ? 0 : vm->svm_cid) +
                 " (only the host, CID 2, may connect)");
        continue;
      }
    }
    newest = std::move(conn);  // closes the one accepted before it, if any
  }
  if (!newest) return;
  channel_lost("a new daemon connected");
  set_channel(std::move(newest));  // sends hello
}

// Reattach: a restarted daemon took the spare's daemon end (pidfd_getfd) and wrote to it.
// The spare's agent end becomes the channel; a fresh spare pair takes the fixed fd numbers.
void Agent::on_spare_readable() {
  const int a = opts_.spare_agent_fd;
  const int d = opts_.spare_daemon_fd;
  char peek;
  ssize_t n = ::recv(a, &peek, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;  // spurious wake-up
  if (n == 0 || (n < 0 && errno != ENOTSOCK)) {
    // Hang-up without a frame: the spare is unusable; keep the current channel.
    log_line("the spare socketpair is broken; reattach is no longer possible");
    epoll_del(a);
    return;
  }
  // Deregister before the fd number is reused: epoll keys on (fd, file), and the file lives on
  // in the duplicate below.
  epoll_del(a);
  int nc = ::fcntl(a, F_DUPFD_CLOEXEC, 3);
  if (nc < 0) {
    log_line(Error::sys("fcntl", "F_DUPFD spare").message());
    (void)epoll_add(a, EPOLLIN, key(kSpare, 0));
    return;
  }
  channel_lost("a daemon reattached on the spare socketpair");
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0) {
    ::dup3(sp[0], a, O_CLOEXEC);
    ::dup3(sp[1], d, O_CLOEXEC);
    ::close(sp[0]);
    ::close(sp[1]);
    if (auto r = set_nonblocking(a); !r) log_line(r.error().message());
    if (auto r = epoll_add(a, EPOLLIN, key(kSpare, 0)); !r) log_line(r.error().message());
  } else {
    // No new spare: a later reattach is impossible, the current one still proceeds.
    log_line(Error::sys("socketpair", "new spare").message());
    ::close(a);
    ::close(d);
  }
  set_channel(UniqueFd(nc));  // sends hello; the daemon's first frame is then read from nc
}

void Agent::update_channel_interest() {
  if (!channel_) return;
  bool want_in = channel_->queued() < kOutputHighWater;
  bool want_out = channel_->queued() > 0;
  if (want_in == channel_in_polled_ && want_out == channel_out_polled_) return;
  epoll_event ev{};
  ev.events = (want_in ? uint32_t{EPOLLIN} : 0u) | (want_out ? uint32_t{EPOLLOUT} : 0u);
  ev.data.u64 = key(kChannel, channel_gen_);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, channel_->fd(), &ev);
  channel_in_polled_ = want_in;
  channel_out_polled_ = want_out;
}

void Agent::on_channel_event(uint32_t events) {
  uint64_t gen = channel_gen_;
  if (events & EPOLLOUT) channel_->flush();
  bool eof = false;
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
      (channel_->queued() < kOutputHighWater || (events & (EPOLLHUP | EPOLLERR)))) {
    eof = channel_->read_some() == Channel::ReadStatus::kEof;
    while (channel_ && channel_gen_ == gen) {
      auto next = channel_->decoder().next();
      if (!next) {
        // A bad header poisons the stream: close it and wait for a reattach.
        channel_lost(next.error().message());
        return;
      }
      if (!next->has_value()) break;
      dispatch(**next);
    }
  }
  if (channel_gen_ != gen || !channel_) return;
  if (eof)
    channel_lost("end of stream");
  else if (channel_->broken())
    channel_lost("write failed");
}

void Agent::dispatch(proto::Frame& f) {
  using proto::FrameType;
  if (proto::is_agent_stream(f.stream)) {
    on_egress_frame(f);
    return;
  }
  switch (f.type) {
    case FrameType::kRequest:
      on_request(f.stream, f.payload);
      return;
    case FrameType::kExec:
      start_exec(f.stream, f.payload);
      return;
    case FrameType::kStdin:
      on_stdin_frame(f.stream, std::move(f.payload));
      return;
    case FrameType::kSignal:
      // On a read or walk stream a signal cancels the transfer: its client went away.
      if (reads_.erase(f.stream) + walks_.erase(f.stream) > 0) return;
      on_signal_frame(f.stream, f.payload);
      return;
    case FrameType::kCredit:
      on_credit_frame(f.stream, f.payload);
      return;
    case FrameType::kData:
      on_data_frame(f.stream, std::move(f.payload));
      return;
    case FrameType::kPing:
      if (opts_.guest_channel() && f.stream == 0 && f.payload == "reattach") {
        // A restarted daemon on the same port (microVMs: QEMU's chardev accepted a new
        // connection, and the guest may never have seen the old one close; with a listener a
        // new connection already did this in on_channel_accept, and the ping only repeats it).
        // What belonged to the old daemon is let go, as on a lost channel, and it is greeted
        // like a new one.
        log_line("a new daemon reattached on " +
                 (opts_.channel_listen ? opts_.channel_listen->text : opts_.channel_path));
        detach_execs();
        drop_transfers();
        drop_egress();
        send_hello();
      }
      send(FrameType::kPong, f.stream, f.payload);
      return;
    default:
      if (!warned_direction_) {
        warned_direction_ = true;
        log_line(std::string("ignoring agent-to-daemon frame type \"") +
                 proto::frame_type_name(f.type) + "\" from the daemon");
      }
      return;
  }
}

void Agent::on_sigchld() {
  signalfd_siginfo si[16];
  while (::read(sigfd_.get(), si, sizeof(si)) > 0) {
  }
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    if (shims_.erase(pid) > 0) continue;  // its control pipe closes with it
    on_worker_reaped(pid, status);        // a worker whose shim died; else a silent orphan
  }
}

int Agent::next_timeout_ms() const {
  std::optional<Clock::time_point> next = reopen_at_;
  for (const auto& [serial, e] : execs_)
    if (e->drain_deadline && !drain_blocked(*e) && (!next || *e->drain_deadline < *next))
      next = e->drain_deadline;
  if (!next) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

Result<void> Agent::run() {
  epoll_event events[64];
  while (true) {
    bool busy = pump_transfers();
    check_exec_deadlines();
    if (reopen_at_ && Clock::now() >= *reopen_at_) try_reopen_channel();
    if (channel_ && channel_->broken()) channel_lost("write failed");
    flush_exec_audit();
    update_channel_interest();
    update_egress_interest();
    int n = ::epoll_wait(epoll_.get(), events, 64, busy ? 0 : next_timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_sys("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      uint64_t k = events[i].data.u64;
      auto kind = static_cast<Kind>(k >> 56);
      uint64_t id = k & ((1ull << 56) - 1);
      switch (kind) {
        case kChannel:
          if (channel_ && id == channel_gen_) on_channel_event(events[i].events);
          break;
        case kSpare:
          on_spare_readable();
          break;
        case kSignalFd:
          on_sigchld();
          break;
        case kExecStatus:
        case kExecStdout:
        case kExecStderr:
        case kExecStdin:
          on_exec_event(kind, id);
          break;
        case kEgressListen:
          on_egress_accept(id);
          break;
        case kEgressConn:
          on_egress_event(id, events[i].events);
          break;
        case kChannelListen:
          on_channel_accept();
          break;
        case kExecAudit:
          on_exec_audit_readable();
          break;
        case kDnsListen:
          on_dns_readable();
          break;
      }
    }
  }
}

}  // namespace space::agent
