// The exec supervisor (see exec_supervisor.h). Everything read from the sandbox is hostile:
// pointers may be wild, strings unterminated, /proc entries gone; every read is bounded and a
// failure only marks the field unknown. The supervisor never answers with an error and never
// skips the sink: an exec either waits for its event to be recorded or does not happen.
#include "runtime/linux/exec_supervisor.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <spdlog/spdlog.h>

namespace space::runtime::linux {
using nlohmann::json;

namespace {

constexpr size_t kPage = 4096;

std::string proc_path(pid_t pid, const std::string& rest) {
  return "/proc/" + std::to_string(pid) + "/" + rest;
}

std::string read_link(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Reads a NUL-terminated string at `addr` from the process memory fd, at most `max` bytes,
// never crossing into a page it has not reached yet (so an unmapped page after the string
// does not fail the read). `truncated` is set when no NUL was found within `max`.
bool read_string(int mem, uint64_t addr, size_t max, std::string& out, bool& truncated) {
  out.clear();
  truncated = false;
  char buf[kPage];
  while (out.size() < max) {
    size_t room = kPage - (addr % kPage);
    size_t want = std::min(room, max - out.size());
    ssize_t n = ::pread(mem, buf, want, static_cast<off_t>(addr));
    if (n <= 0) {  // unmapped: what was read so far, marked as cut short
      truncated = !out.empty();
      return !out.empty();
    }
    auto* nul = static_cast<char*>(::memchr(buf, 0, static_cast<size_t>(n)));
    if (nul) {
      out.append(buf, static_cast<size_t>(nul - buf));
      return true;
    }
    out.append(buf, static_cast<size_t>(n));
    addr += static_cast<uint64_t>(n);
  }
  truncated = true;
  return true;
}

bool read_u64(int mem, uint64_t addr, uint64_t& v) {
  return ::pread(mem, &v, sizeof v, static_cast<off_t>(addr)) == static_cast<ssize_t>(sizeof v);
}

struct Status {
  pid_t ppid = -1;
  int64_t uid = -1;
  pid_t nspid = -1;  // innermost namespace pid
};

Status read_status(pid_t pid) {
  Status s;
  std::ifstream in(proc_path(pid, "status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("PPid:")) {
      s.ppid = static_cast<pid_t>(std::atol(line.c_str() + 5));
    } else if (line.starts_with("Uid:")) {
      s.uid = std::atoll(line.c_str() + 4);
    } else if (line.starts_with("NSpid:")) {
      auto pos = line.find_last_of(" \t");
      if (pos != std::string::npos) s.nspid = static_cast<pid_t>(std::atol(line.c_str() + pos + 1));
    }
  }
  return s;
}

std::string join_path(const std::string& base, const std::string& rel) {
  if (base.empty()) return rel;
  return base.back() == '/' ? base + rel : base + "/" + rel;
}

}  // namespace

json ExecSupervisor::describe(pid_t pid, int nr, const uint64_t args[6], uint32_t uid_base) {
  const bool at = nr == __NR_execveat;
  json ev = {{"syscall", at ? "execveat" : "execve"}};
  Status st = read_status(pid);
  ev["pid"] = st.nspid > 0 ? json(st.nspid) : json(nullptr);
  ev["host_pid"] = pid;
  json ppid = nullptr;
  if (st.nspid == 1) {
    ppid = 0;  // the agent: its parent (the daemon) is outside the sandbox
  } else if (st.ppid > 0) {
    Status pst = read_status(st.ppid);
    // A parent outside the sandbox (the agent's launcher) shows as 0, like in the sandbox.
    ppid = pst.nspid > 0 ? pst.nspid : 0;
  } else if (st.ppid == 0) {
    ppid = 0;
  }
  ev["ppid"] = ppid;
  ev["uid"] = st.uid >= 0 ? json(st.uid - static_cast<int64_t>(uid_base)) : json(nullptr);
  std::string cwd = read_link(proc_path(pid, "cwd"));
  ev["cwd"] = cwd;

  UniqueFd mem(::open(proc_path(pid, "mem").c_str(), O_RDONLY | O_CLOEXEC));
  std::string path;
  bool path_truncated = false;
  uint64_t path_addr = at ? args[1] : args[0];
  uint64_t argv_addr = at ? args[2] : args[1];
  bool readable = mem && read_string(mem.get(), path_addr, kMaxAuditArgBytes, path, path_truncated);
  ev["path"] = readable ? json(path) : json(nullptr);
  if (path_truncated) ev["path_truncated"] = true;
  // What the kernel will run, as far as the caller's view tells.
  std::string resolved;
  if (readable) {
    if (!path.empty() && path[0] == '/') {
      resolved = path;
    } else if (at) {
      int dirfd = static_cast<int>(args[0]);
      std::string base = dirfd == AT_FDCWD ? cwd
                                           : read_link(proc_path(pid, "fd/" + std::to_string(dirfd)));
      if (path.empty() && (args[4] & AT_EMPTY_PATH)) {
        resolved = base;  // e.g. "/memfd:payload (deleted)" for memfd_create + execveat
        ev["fd"] = dirfd;
      } else {
        resolved = join_path(base, path);
      }
      if (args[4] & AT_EMPTY_PATH) ev["at_empty_path"] = true;
    } else {
      resolved = join_path(cwd, path);
    }
  }
  ev["resolved"] = resolved;
  if (resolved.starts_with("/memfd:") || path.starts_with("/proc/self/fd/") ||
      path.starts_with("/dev/fd/"))
    ev["fileless"] = true;

  json argv = json::array();
  bool argv_truncated = false, argv_unreadable = false;
  if (mem && argv_addr != 0) {
    for (size_t i = 0;; ++i) {
      if (i == kMaxAuditArgs) {
        argv_truncated = true;
        break;
      }
      uint64_t p = 0;
      if (!read_u64(mem.get(), argv_addr + i * 8, p)) {
        argv_unreadable = true;
        break;
      }
      if (p == 0) break;
      std::string a;
      bool t = false;
      if (!read_string(mem.get(), p, kMaxAuditArgBytes, a, t)) {
        argv_unreadable = true;
        break;
      }
      argv_truncated |= t;
      argv.push_back(std::move(a));
    }
  } else if (!mem) {
    argv_unreadable = true;
  }
  ev["argv"] = std::move(argv);
  if (argv_truncated) ev["argv_truncated"] = true;
  if (argv_unreadable) ev["argv_unreadable"] = true;
  return ev;
}

bool ExecSupervisor::is_listener(int fd) {
  return read_link("/proc/self/fd/" + std::to_string(fd)) == "anon_inode:seccomp notify";
}

Result<std::unique_ptr<ExecSupervisor>> ExecSupervisor::start(UniqueFd listener,
                                                              uint32_t uid_base, Sink sink) {
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return fail_sys("eventfd", "exec supervisor");
  std::unique_ptr<ExecSupervisor> s(
      new ExecSupervisor(std::move(listener), std::move(stop), uid_base, std::move(sink)));
  s->thread_ = std::thread([p = s.get()] { p->loop(); });
  return s;
}

ExecSupervisor::ExecSupervisor(UniqueFd listener, UniqueFd stop, uint32_t uid_base, Sink sink)
    : listener_(std::move(listener)),
      stop_(std::move(stop)),
      uid_base_(uid_base),
      sink_(std::move(sink)) {}

ExecSupervisor::~ExecSupervisor() {
  uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void ExecSupervisor::loop() {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("exec supervisor: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) return;  // no task uses the filter
    if (!(fds[0].revents & POLLIN)) continue;

    seccomp_notif req;
    std::memset(&req, 0, sizeof req);
    if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
      if (errno == EINTR || errno == ENOENT) continue;  // the caller died meanwhile
      spdlog::error("exec supervisor: NOTIF_RECV: {}", std::strerror(errno));
      return;
    }
    json ev;
    if (req.data.nr == __NR_execve || req.data.nr == __NR_execveat) {
      uint64_t args[6];
      for (int i = 0; i < 6; ++i) args[i] = req.data.args[i];
      ev = describe(static_cast<pid_t>(req.pid), req.data.nr, args, uid_base_);
    } else {
      ev = {{"syscall", req.data.nr}, {"pid", nullptr}};
    }
    // The reads above are only about this exec if the caller is still waiting in it.
    if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_ID_VALID, &req.id) != 0) {
      ev["caller_gone"] = true;  // died before its exec: recorded, nothing to answer
      sink_(std::move(ev));
      continue;
    }
    sink_(std::move(ev));  // may block while the audit log is behind: the exec waits
    seccomp_notif_resp resp;
    std::memset(&resp, 0, sizeof resp);
    resp.id = req.id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0 && errno != ENOENT)
      spdlog::warn("exec supervisor: NOTIF_SEND: {}", std::strerror(errno));
  }
}

}  // namespace space::runtime::linux
