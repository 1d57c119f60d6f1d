// Exec notification: reading an exec call from /proc, the notify-only filter, and the
// receive/continue steps (see exec_notify.h).
#include "common/exec_notify.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace space {
using nlohmann::json;

namespace {

constexpr size_t kMemPage = 4096;

struct AbiRow {
  uint32_t arch;
  int execve;
  int execveat;
  unsigned ptr_size;
  const char* name;
};

#if defined(__x86_64__)
constexpr int kX32Bit = 0x40000000;  // __X32_SYSCALL_BIT
constexpr AbiRow kAbis[] = {
    {AUDIT_ARCH_X86_64, __NR_execve, __NR_execveat, 8, ""},
    {AUDIT_ARCH_X86_64, kX32Bit | 520, kX32Bit | 545, 4, "x32"},
    {AUDIT_ARCH_I386, 11, 358, 4, "i386"},
};
#elif defined(__aarch64__)
constexpr AbiRow kAbis[] = {
    {AUDIT_ARCH_AARCH64, __NR_execve, __NR_execveat, 8, ""},
    {AUDIT_ARCH_ARM, 11, 387, 4, "arm"},
};
#else
#error "exec_notify: add this architecture's execve/execveat ABIs to kAbis"
#endif

std::string proc_file(pid_t pid, const std::string& rest) {
  return "/proc/" + std::to_string(pid) + "/" + rest;
}

std::string link_target(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Reads a NUL-terminated string at `addr` from the process memory fd, at most `max` bytes,
// never crossing into a page it has not reached yet (so an unmapped page after the string
// does not fail the read). `truncated` is set when no NUL was found within `max`.
bool read_caller_string(int mem, uint64_t addr, size_t max, std::string& out, bool& truncated) {
  out.clear();
  truncated = false;
  char buf[kMemPage];
  while (out.size() < max) {
    size_t room = kMemPage - (addr % kMemPage);
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

// One pointer of the caller's argv array (4 or 8 bytes, little-endian like every ABI above).
bool read_caller_ptr(int mem, uint64_t addr, unsigned size, uint64_t& v) {
  v = 0;
  return ::pread(mem, &v, size, static_cast<off_t>(addr)) == static_cast<ssize_t>(size);
}

struct ProcStatus {
  pid_t ppid = -1;
  int64_t uid = -1;
  pid_t nspid = -1;  // innermost namespace pid
};

ProcStatus read_proc_status(pid_t pid) {
  ProcStatus s;
  std::ifstream in(proc_file(pid, "status"));
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

std::string join_under(const std::string& base, const std::string& rel) {
  if (base.empty()) return rel;
  return base.back() == '/' ? base + rel : base + "/" + rel;
}

// The caller's pid and parent as the reader reports them (ExecView::host).
void add_pids(json& ev, const ExecCall& call, const ProcStatus& st, bool host) {
  if (!host) {
    ev["pid"] = call.pid;
    ev["ppid"] = st.ppid >= 0 ? json(st.ppid) : json(nullptr);
    return;
  }
  ev["pid"] = st.nspid > 0 ? json(st.nspid) : json(nullptr);
  ev["host_pid"] = call.pid;
  json ppid = nullptr;
  if (st.nspid == 1) {
    ppid = 0;  // the sandbox's init: its parent is outside the sandbox
  } else if (st.ppid > 0) {
    ProcStatus pst = read_proc_status(st.ppid);
    // A parent outside the sandbox (the agent's launcher) shows as 0, like in the sandbox.
    ppid = pst.nspid > 0 ? pst.nspid : 0;
  } else if (st.ppid == 0) {
    ppid = 0;
  }
  ev["ppid"] = ppid;
}

}  // namespace

std::optional<ExecAbi> exec_abi(uint32_t arch, int nr) {
  for (const AbiRow& r : kAbis) {
    if (r.arch != arch || (nr != r.execve && nr != r.execveat)) continue;
    return ExecAbi{nr == r.execveat, r.ptr_size, r.name};
  }
  return std::nullopt;
}

json describe_exec(const ExecCall& call, const ExecView& view) {
  auto abi = exec_abi(call.arch, call.nr);
  if (!abi) return {{"syscall", call.nr}, {"pid", nullptr}};
  const bool at = abi->at;
  const uint64_t* args = call.args;
  json ev = {{"syscall", at ? "execveat" : "execve"}};
  if (*abi->name) ev["abi"] = abi->name;
  ProcStatus st = read_proc_status(call.pid);
  add_pids(ev, call, st, view.host);
  ev["uid"] = st.uid >= 0 ? json(st.uid - static_cast<int64_t>(view.uid_base)) : json(nullptr);
  std::string cwd = link_target(proc_file(call.pid, "cwd"));
  ev["cwd"] = cwd;

  UniqueFd mem(::open(proc_file(call.pid, "mem").c_str(), O_RDONLY | O_CLOEXEC));
  std::string path;
  bool path_truncated = false;
  uint64_t path_addr = at ? args[1] : args[0];
  uint64_t argv_addr = at ? args[2] : args[1];
  bool readable =
      mem && read_caller_string(mem.get(), path_addr, kMaxExecArgBytes, path, path_truncated);
  ev["path"] = readable ? json(path) : json(nullptr);
  if (path_truncated) ev["path_truncated"] = true;
  // What the kernel will run, as far as the caller's view tells.
  std::string resolved;
  if (readable) {
    if (!path.empty() && path[0] == '/') {
      resolved = path;
    } else if (at) {
      int dirfd = static_cast<int>(args[0]);
      std::string base =
          dirfd == AT_FDCWD ? cwd : link_target(proc_file(call.pid, "fd/" + std::to_string(dirfd)));
      if (path.empty() && (args[4] & AT_EMPTY_PATH)) {
        resolved = base;  // e.g. "/memfd:payload (deleted)" for memfd_create + execveat
        ev["fd"] = dirfd;
      } else {
        resolved = join_under(base, path);
      }
      if (args[4] & AT_EMPTY_PATH) ev["at_empty_path"] = true;
    } else {
      resolved = join_under(cwd, path);
    }
  }
  ev["resolved"] = resolved;
  if (resolved.starts_with("/memfd:") || path.starts_with("/proc/self/fd/") ||
      path.starts_with("/dev/fd/"))
    ev["fileless"] = true;

  json argv = json::array();
  bool argv_truncated = false, argv_unreadable = false;
  size_t budget = view.max_argv_bytes;
  if (mem && argv_addr != 0) {
    for (size_t i = 0;; ++i) {
      uint64_t p = 0;
      if (!read_caller_ptr(mem.get(), argv_addr + i * abi->ptr_size, abi->ptr_size, p)) {
        argv_unreadable = true;
        break;
      }
      if (p == 0) break;
      if (i == kMaxExecArgs || budget == 0) {  // there is more than the bounds keep
        argv_truncated = true;
        break;
      }
      std::string a;
      bool t = false;
      if (!read_caller_string(mem.get(), p, std::min(kMaxExecArgBytes, budget), a, t)) {
        argv_unreadable = true;
        break;
      }
      argv_truncated |= t;
      budget -= std::min(budget, a.size());
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

std::vector<sock_filter> exec_notify_program() {
  // Per architecture: "arch == A ? go on : skip to the next architecture's test", then
  // "nr == execve or execveat of an ABI of A ? notify : allow". The accumulator holds the arch
  // for every test of it; after the nr is loaded the block always returns.
  constexpr size_t kArchOffset = offsetof(seccomp_data, arch);
  constexpr size_t kNrOffset = offsetof(seccomp_data, nr);
  std::vector<sock_filter> p;
  std::vector<size_t> to_notify;  // jeq instructions whose true branch goes to the notify
  p.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArchOffset));
  std::vector<uint32_t> arches;
  for (const AbiRow& r : kAbis)
    if (std::find(arches.begin(), arches.end(), r.arch) == arches.end()) arches.push_back(r.arch);
  for (uint32_t arch : arches) {
    std::vector<int> nrs;
    for (const AbiRow& r : kAbis) {
      if (r.arch != arch) continue;
      nrs.push_back(r.execve);
      nrs.push_back(r.execveat);
    }
    // jeq arch, then ld nr, one jeq per nr, ret allow: the false branch skips all but the jeq.
    const auto block = static_cast<uint8_t>(1 + nrs.size() + 1);
    p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 0, block));
    p.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kNrOffset));
    for (int nr : nrs) {
      to_notify.push_back(p.size());
      p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 0));
    }
    p.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  }
  p.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));  // another architecture
  const size_t notify = p.size();
  p.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF));
  for (size_t i : to_notify) p[i].jt = static_cast<uint8_t>(notify - i - 1);
  return p;
}

Result<UniqueFd> install_exec_notify_filter() {
  std::vector<sock_filter> program = exec_notify_program();
  sock_fprog prog;
  prog.len = static_cast<unsigned short>(program.size());
  prog.filter = program.data();
  long fd =
      ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
  if (fd < 0) return fail_sys("seccomp", "SECCOMP_SET_MODE_FILTER, FLAG_NEW_LISTENER");
  return UniqueFd(static_cast<int>(fd));  // the kernel makes it close-on-exec
}

bool is_exec_listener(int fd) {
  return link_target("/proc/self/fd/" + std::to_string(fd)) == "anon_inode:seccomp notify";
}

Result<std::optional<ExecNotice>> receive_exec(int listener, const ExecView& view) {
  seccomp_notif req;
  std::memset(&req, 0, sizeof req);
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
    if (errno == EINTR || errno == ENOENT) return std::nullopt;  // the caller died meanwhile
    return fail_sys("ioctl", "SECCOMP_IOCTL_NOTIF_RECV");
  }
  ExecCall call;
  call.pid = static_cast<pid_t>(req.pid);
  call.arch = req.data.arch;
  call.nr = req.data.nr;
  for (int i = 0; i < 6; ++i) call.args[i] = req.data.args[i];
  ExecNotice n;
  n.id = req.id;
  n.event = describe_exec(call, view);
  // The reads above are only about this exec if the caller is still waiting in it.
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req.id) != 0) {
    n.caller_gone = true;
    n.event["caller_gone"] = true;
  }
  return n;
}

Result<void> continue_exec(int listener, uint64_t id) {
  seccomp_notif_resp resp;
  std::memset(&resp, 0, sizeof resp);
  resp.id = id;
  resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0 && errno != ENOENT)
    return fail_sys("ioctl", "SECCOMP_IOCTL_NOTIF_SEND");
  return {};
}

}  // namespace space
