// Exec streams: starting a process under its shim, forwarding stdin, streaming stdout/stderr
// under the per-stream flow-control window, delivering signals to the process tree and sending
// `exit` once the main process has exited and its output is drained.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "agent/agent.h"
#include "agent/response.h"
#include "agent/shim.h"

namespace space::agent {
namespace {

void send_start_error(Channel* ch, uint32_t stream, int exit_code, const Error& err) {
  if (!ch) return;
  json j = {{"exit_code", exit_code}, {"error", error_object(err)}};
  ch->send(proto::FrameType::kExit, stream, dump_json(j));
}

}  // namespace

Agent::Exec* Agent::exec_for_stream(uint32_t stream) {
  auto it = stream_execs_.find(stream);
  if (it == stream_execs_.end()) return nullptr;
  auto e = execs_.find(it->second);
  return e == execs_.end() ? nullptr : e->second.get();
}

void Agent::start_exec(uint32_t stream, std::string_view payload) {
  // Failures to start that are not about the program itself are SPACE's: exit code 125.
  if (stream == 0)
    return send_start_error(channel_.get(), stream, 125,
                            Error(Code::kInvalidArgument, "exec on the control stream 0"));
  if (stream_execs_.contains(stream) || reads_.contains(stream) || walks_.contains(stream) ||
      writes_.contains(stream))
    return send_start_error(
        channel_.get(), stream, 125,
        Error(Code::kAlreadyExists, "stream " + std::to_string(stream) + " is already active",
              EEXIST));
  auto spec = parse_exec_spec(payload);
  if (!spec) return send_start_error(channel_.get(), stream, 125, spec.error());
  if (!spec->user.empty()) {
    // The sandbox's own /etc/passwd, as it is now: a regular file, read whole (at most 1 MiB).
    std::string passwd;
    if (auto fd = resolver_->open("/etc/passwd", O_RDONLY | O_NONBLOCK | O_CLOEXEC); fd) {
      struct stat st;
      if (::fstat(fd->get(), &st) == 0 && S_ISREG(st.st_mode)) {
        char buf[65536];
        ssize_t n;
        while (passwd.size() < (1u << 20) && (n = ::read(fd->get(), buf, sizeof buf)) > 0)
          passwd.append(buf, static_cast<size_t>(n));
      }
    }
    if (auto r = apply_user(*spec, passwd); !r)
      return send_start_error(channel_.get(), stream, 125, r.error());
    // A home that does not exist (the host image's "user") is no place to start: "/".
    if (!spec->cwd_given && !resolver_->open(spec->cwd, O_PATH | O_DIRECTORY | O_CLOEXEC))
      spec->cwd = "/";
  }
  auto h = spawn_shim(*spec);
  if (!h) return send_start_error(channel_.get(), stream, 125, h.error());

  auto e = std::make_unique<Exec>();
  e->serial = next_serial_++;
  e->stream = stream;
  e->spec = std::move(*spec);
  e->shim_pid = h->pid;
  e->status_r = std::move(h->status);
  e->stdin_w = std::move(h->stdin_w);
  e->stdout_r = std::move(h->stdout_r);
  e->stderr_r = std::move(h->stderr_r);
  e->tty = std::move(h->tty);
  shims_[h->pid] = ShimInfo{stream, std::move(h->control)};
  if (auto r = epoll_add(e->status_r.get(), EPOLLIN, key(kExecStatus, e->serial)); !r) {
    // Cannot watch it: kill the tree (the shim sees its control pipe close) and report.
    shims_.erase(h->pid);
    return send_start_error(channel_.get(), stream, 125, r.error());
  }
  stream_execs_[stream] = e->serial;
  execs_[e->serial] = std::move(e);
}

void Agent::on_exec_event(Kind kind, uint64_t serial) {
  auto it = execs_.find(serial);
  if (it == execs_.end()) return;  // finished earlier in this batch
  Exec& e = *it->second;
  switch (kind) {
    case kExecStatus:
      read_status(e);
      break;
    case kExecStdout:
      read_output(e, false, kReadChunk);
      break;
    case kExecStderr:
      read_output(e, true, kReadChunk);
      break;
    case kExecStdin:
      write_stdin(e);
      break;
    default:
      break;
  }
  update_exec_interest(e);
  maybe_finish(e);  // may destroy e
}

void Agent::read_status(Exec& e) {
  if (!e.status_r.valid()) return;
  char buf[sizeof(ShimRecord) * 8];
  while (true) {
    ssize_t n = ::read(e.status_r.get(), buf, sizeof(buf));
    if (n > 0) {
      e.status_buf.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    epoll_del(e.status_r.get());
    e.status_r.reset();
    break;
  }
  size_t off = 0;
  for (; off + sizeof(ShimRecord) <= e.status_buf.size(); off += sizeof(ShimRecord)) {
    ShimRecord r;
    std::memcpy(&r, e.status_buf.data() + off, sizeof(r));
    switch (r.kind) {
      case ShimRecord::kForked:
        if (e.worker_pid > 0 || e.failure || r.a <= 0) break;
        e.worker_pid = r.a;
        worker_execs_[r.a] = e.serial;
        break;
      case ShimRecord::kStarted:
        if (e.started || e.failure || r.a <= 0) break;
        if (e.worker_pid != r.a) {
          worker_execs_.erase(e.worker_pid);
          e.worker_pid = r.a;
          worker_execs_[r.a] = e.serial;
        }
        mark_started(e);
        break;
      case ShimRecord::kFailed:
        if (e.started || e.failure) break;
        e.failure = describe_start_failure(e.spec, static_cast<WorkerStep>(r.a), r.b);
        break;
      case ShimRecord::kExited:
        if (!e.started || e.wait_status) break;
        e.wait_status = r.a;
        worker_execs_.erase(e.worker_pid);
        e.drain_deadline = Clock::now() + kDrainGrace;
        break;
    }
  }
  e.status_buf.erase(0, off);
  if (!e.status_r.valid() && !e.started && !e.failure) {
    if (e.worker_pid > 0) {
      // The shim died after the worker was about to exec (a sandbox process killed it): the
      // worker is re-parented to us and we report its status ourselves.
      mark_started(e);
    } else {
      e.failure = StartFailure{125, Error(Code::kInternal,
                                          "the exec shim died before the "
                                          "process started")};
    }
  }
}

void Agent::mark_started(Exec& e) {
  e.started = true;
  if (e.attached) send(proto::FrameType::kStarted, e.stream, dump_json({{"pid", e.worker_pid}}));
}

// Reads one chunk (at most max bytes, and no more than the window allows) from stdout or
// stderr and forwards it. Returns the byte count, 0 at EOF (the pipe is closed), -1 if nothing
// was available or the window is full.
ssize_t Agent::read_output(Exec& e, bool is_stderr, size_t max) {
  UniqueFd& fd = is_stderr ? e.stderr_r : e.stdout_r;
  if (!fd.valid()) return 0;
  size_t room = e.attached
                    ? proto::kStreamWindow - std::min<uint64_t>(e.unacked, proto::kStreamWindow)
                    : kReadChunk;
  size_t want = std::min({kReadChunk, room, max});
  if (want == 0) return -1;
  static char buf[kReadChunk];
  ssize_t n;
  do {
    n = ::read(fd.get(), buf, want);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return -1;
  if (n <= 0) {
    epoll_del(fd.get());
    fd.reset();
    (is_stderr ? e.stderr_polled : e.stdout_polled) = false;
    return 0;
  }
  if (e.attached) {
    send(is_stderr ? proto::FrameType::kStderr : proto::FrameType::kStdout, e.stream,
         std::string_view(buf, static_cast<size_t>(n)));
    e.unacked += static_cast<uint64_t>(n);
  }
  return n;
}

void Agent::write_stdin(Exec& e) {
  if (!e.stdin_w.valid()) return;
  size_t wrote = 0;
  while (e.stdin_off < e.stdin_pending.size()) {
    ssize_t n = ::write(e.stdin_w.get(), e.stdin_pending.data() + e.stdin_off,
                        e.stdin_pending.size() - e.stdin_off);
    if (n > 0) {
      e.stdin_off += static_cast<size_t>(n);
      wrote += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    // EPIPE: the process closed its stdin; what is left can never be delivered.
    e.stdin_pending.clear();
    e.stdin_off = 0;
    e.stdin_close_requested = true;
    break;
  }
  if (e.stdin_off == e.stdin_pending.size()) {
    e.stdin_pending.clear();
    e.stdin_off = 0;
  } else if (e.stdin_off > (1u << 20) && e.stdin_off > e.stdin_pending.size() / 2) {
    e.stdin_pending.erase(0, e.stdin_off);
    e.stdin_off = 0;
  }
  if (wrote > 0 && e.spec.stdin_credit && e.attached)
    send(proto::FrameType::kCredit, e.stream, dump_json({{"bytes", wrote}}));
  if (e.stdin_pending.empty() && e.stdin_close_requested) {
    epoll_del(e.stdin_w.get());
    e.stdin_w.reset();
    e.stdin_polled = false;
  }
}

void Agent::update_exec_interest(Exec& e) {
  bool can_read = e.started && (!e.attached || e.unacked < proto::kStreamWindow);
  auto set = [&](UniqueFd& fd, bool& polled, bool want, uint32_t events, Kind kind) {
    want = want && fd.valid();
    if (want == polled) return;
    if (want) {
      if (epoll_add(fd.get(), events, key(kind, e.serial))) polled = true;
    } else {
      if (fd.valid()) epoll_del(fd.get());
      polled = false;
    }
  };
  set(e.stdout_r, e.stdout_polled, can_read, EPOLLIN, kExecStdout);
  set(e.stderr_r, e.stderr_polled, can_read, EPOLLIN, kExecStderr);
  set(e.stdin_w, e.stdin_polled, e.stdin_off < e.stdin_pending.size(), EPOLLOUT, kExecStdin);
}

bool Agent::drain_blocked(const Exec& e) const {
  return e.attached && e.unacked >= proto::kStreamWindow &&
         (e.stdout_r.valid() || e.stderr_r.valid());
}

void Agent::maybe_finish(Exec& e) {
  if (e.failure) return finish(e);
  if (!e.wait_status || e.stdout_r.valid() || e.stderr_r.valid()) return;
  finish(e);
}

void Agent::finish(Exec& e) {
  if (e.attached) {
    json j;
    if (e.failure) {
      j = {{"exit_code", e.failure->exit_code}, {"error", error_object(e.failure->error)}};
    } else if (WIFSIGNALED(*e.wait_status)) {
      j = {{"signal", WTERMSIG(*e.wait_status)},
           {"core_dumped", static_cast<bool>(WCOREDUMP(*e.wait_status))}};
    } else {
      j = {{"exit_code", WEXITSTATUS(*e.wait_status)}};
    }
    send(proto::FrameType::kExit, e.stream, dump_json(j));
  }
  for (UniqueFd* fd : {&e.status_r, &e.stdin_w, &e.stdout_r, &e.stderr_r})
    if (fd->valid()) epoll_del(fd->get());
  if (auto it = stream_execs_.find(e.stream); it != stream_execs_.end() && it->second == e.serial)
    stream_execs_.erase(it);
  if (auto it = worker_execs_.find(e.worker_pid);
      it != worker_execs_.end() && it->second == e.serial)
    worker_execs_.erase(it);
  execs_.erase(e.serial);  // closes the remaining pipes; the shim lives on while it has children
}

void Agent::on_stdin_frame(uint32_t stream, std::string&& payload) {
  Exec* e = exec_for_stream(stream);
  if (!e || !e->stdin_w.valid() || e->stdin_close_requested) return;
  if (payload.empty()) {
    e->stdin_close_requested = true;
  } else if (e->stdin_pending.size() - e->stdin_off + payload.size() > kMaxStdinPending) {
    // The daemon outran the documented bound; closing stdin is the one lossless-to-detect
    // answer (the process sees EOF early) that keeps the agent's memory bounded.
    log_line("stream " + std::to_string(stream) + ": more than " +
             std::to_string(kMaxStdinPending) + " stdin bytes pending; closing stdin");
    e->stdin_pending.clear();
    e->stdin_off = 0;
    e->stdin_close_requested = true;
  } else {
    e->stdin_pending += payload;
  }
  write_stdin(*e);
  update_exec_interest(*e);
}

void Agent::on_signal_frame(uint32_t stream, std::string_view payload) {
  auto req = parse_object(payload);
  std::optional<int64_t> sig;
  if (req && req->contains("rows")) {
    // A terminal resize: {"rows": R, "cols": C}; the kernel tells the foreground group (SIGWINCH).
    auto rows = opt_int(*req, "rows", 1, 4096);
    auto cols = opt_int(*req, "cols", 1, 4096);
    Exec* e = exec_for_stream(stream);
    if (rows && cols && *rows && *cols && e && e->tty.valid()) {
      winsize ws{static_cast<uint16_t>(**rows), static_cast<uint16_t>(**cols), 0, 0};
      (void)::ioctl(e->tty.get(), TIOCSWINSZ, &ws);
    }
    return;
  }
  if (req) {
    auto s = opt_int(*req, "signal", 1, 64);
    if (s) sig = *s;
  }
  if (!sig) {
    log_line("stream " + std::to_string(stream) + ": ignoring a malformed signal frame");
    return;
  }
  pid_t shim = -1;
  if (Exec* e = exec_for_stream(stream)) {
    shim = e->shim_pid;
  } else {
    // The exec has ended but its shim may still hold background processes.
    for (const auto& [pid, info] : shims_)
      if (info.stream == stream) shim = pid;
  }
  auto it = shims_.find(shim);
  if (it == shims_.end()) {
    // The shim was killed from inside the sandbox: its worker is now our child (unreaped, so
    // its pid is still its process group's id) and gets the signal directly.
    Exec* e = exec_for_stream(stream);
    if (e) read_status(*e);  // it may have reported the worker's exit just before dying
    if (e && e->worker_pid > 0 && !e->wait_status) ::kill(-e->worker_pid, static_cast<int>(*sig));
    return;
  }
  int32_t s = static_cast<int32_t>(*sig);
  if (::write(it->second.control.get(), &s, sizeof(s)) < 0 && errno != EAGAIN)
    log_line(Error::sys("write", "shim control pipe").message());
}

void Agent::on_credit_frame(uint32_t stream, std::string_view payload) {
  auto req = parse_object(payload);
  if (!req) return;
  auto bytes = opt_int(*req, "bytes", 0, int64_t{1} << 53);
  if (!bytes || !*bytes) return;
  auto n = static_cast<uint64_t>(**bytes);
  if (Exec* e = exec_for_stream(stream)) {
    e->unacked -= std::min(n, e->unacked);
    update_exec_interest(*e);
  } else if (auto it = reads_.find(stream); it != reads_.end()) {
    it->second.unacked -= std::min(n, it->second.unacked);
  } else if (auto w = walks_.find(stream); w != walks_.end()) {
    w->second.unacked -= std::min(n, w->second.unacked);
  }
}

void Agent::on_worker_reaped(pid_t pid, int status) {
  auto it = worker_execs_.find(pid);
  if (it == worker_execs_.end()) return;
  uint64_t serial = it->second;
  auto e = execs_.find(serial);
  if (e == execs_.end()) {
    worker_execs_.erase(pid);
    return;
  }
  read_status(*e->second);  // its shim may have reported it just before dying
  if (!e->second->wait_status) {
    e->second->wait_status = status;
    e->second->drain_deadline = Clock::now() + kDrainGrace;
  }
  worker_execs_.erase(pid);
  update_exec_interest(*e->second);
  maybe_finish(*e->second);
}

void Agent::check_exec_deadlines() {
  auto now = Clock::now();
  std::vector<uint64_t> due;
  for (const auto& [serial, e] : execs_)
    if (e->drain_deadline && *e->drain_deadline <= now && !drain_blocked(*e)) due.push_back(serial);
  for (uint64_t serial : due) {
    auto it = execs_.find(serial);
    if (it == execs_.end()) continue;
    Exec& e = *it->second;
    // Take what the pipes hold right now (bounded: a background writer may never stop), then
    // close them. If the window fills meanwhile, wait for credits first: no output is dropped.
    for (int i = 0; i < 32; ++i) {
      ssize_t a = read_output(e, false, kReadChunk);
      ssize_t b = read_output(e, true, kReadChunk);
      if (a <= 0 && b <= 0) break;
    }
    if (drain_blocked(e)) {
      update_exec_interest(e);
      continue;
    }
    for (UniqueFd* fd : {&e.stdout_r, &e.stderr_r})
      if (fd->valid()) {
        epoll_del(fd->get());
        fd->reset();
      }
    e.stdout_polled = e.stderr_polled = false;
    maybe_finish(e);
  }
}

void Agent::detach_execs() {
  stream_execs_.clear();
  for (auto& [serial, e] : execs_) {
    e->attached = false;
    // No client can send stdin any more: let the process see EOF.
    e->stdin_pending.clear();
    e->stdin_off = 0;
    if (e->stdin_w.valid()) {
      epoll_del(e->stdin_w.get());
      e->stdin_w.reset();
      e->stdin_polled = false;
    }
    update_exec_interest(*e);
  }
}

}  // namespace space::agent
