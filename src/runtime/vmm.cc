// The host side shared by the microVM runtimes' instances; see vmm.h.
#include "runtime/vmm.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/guard.h"
#include "host/host_files.h"
#include "host/process.h"
#include "host/syscalls.h"
#include "runtime/vm_host.h"
#include "runtime/vm_steps.h"

namespace space::runtime::vm {
using nlohmann::json;

Result<Usage> VmmInstance::usage() const {
  if (!base_.cgroup) return fail(Code::kConflict, "VM " + base_.id + " is destroyed");
  return TRY_CTX(base_.cgroup->usage(), "reading usage of VM " + base_.id);
}

Result<UniqueFd> VmmInstance::writable_layer() {
  return fail(Code::kUnimplemented,
              "a microVM sandbox keeps its files on its own disk, which the host does not "
              "mount, and its snapshots are whole machines, not file trees");
}

Result<void> VmmInstance::check_resumable(const Image& image) const {
  UniqueFd fd(image.vm_disk.empty() ? -1 : ::open(image.vm_disk.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd || !base_.machine.is_object() || disk_identity(fd.get()) != base_.machine["image_disk"])
    return fail(Code::kConflict, image_changed(image.name));
  return {};
}

Result<void> VmmInstance::stop_locked() {
  if (!has_control()) return fail(Code::kConflict, "VM " + base_.id + " is destroyed");
  if (base_.paused) return {};
  TRY_VOID(vmm_stop());
  base_.paused = true;
  return {};
}

Result<void> VmmInstance::pause() {
  std::lock_guard lock(base_.control_mu);
  if (base_.paused) return {};
  TRY_VOID_CTX(stop_locked(), "pausing VM " + base_.id);
  return {};
}

Result<void> VmmInstance::resume() {
  std::lock_guard lock(base_.control_mu);
  if (!base_.paused) return {};
  std::string ctx = "resuming VM " + base_.id;
  if (!has_control()) return fail(Code::kConflict, ctx + ": VM " + base_.id + " is destroyed");
  TRY_VOID_CTX(vmm_cont(), ctx);
  base_.paused = false;
  return {};
}

bool VmmInstance::paused() const {
  std::lock_guard lock(base_.control_mu);
  return base_.paused;
}

Result<void> VmmInstance::read_writable_disk(const std::function<Result<void>(int)>& read) {
  std::lock_guard lock(base_.control_mu);
  std::string ctx = "reading the disk of VM " + base_.id;
  if (!has_control()) return fail(Code::kConflict, ctx + ": VM " + base_.id + " is destroyed");
  UniqueFd disk = TRY_CTX(open_writable_disk(), ctx);
  const bool stop = !base_.paused;
  if (stop) TRY_VOID_CTX(vmm_stop(), ctx);
  auto r = read(disk.get());
  if (stop) TRY_VOID_CTX(vmm_cont(), ctx);
  return r;
}

Result<void> VmmInstance::save_machine(int dir_fd) {
  std::lock_guard lock(base_.control_mu);
  std::string ctx = "saving VM " + base_.id;
  TRY_VOID_CTX(stop_locked(), ctx);
  TRY_VOID_CTX(vmm_save(dir_fd), ctx);
  TRY_VOID_CTX(write_machine_file(dir_fd, kSavedMachine, base_.machine), ctx);
  return {};
}

Result<void> VmmInstance::destroy() {
  if (base_.destroyed) return {};
  {
    std::lock_guard lock(base_.control_mu);
    close_control();
  }
  TRY_VOID(stop_vmm());
  remove_host_files();
  return {};
}

Result<void> VmmInstance::stop_vmm() {
  std::string ctx = "destroying VM " + base_.id;
  base_.channel.reset();
  if (base_.cgroup) base_.cgroup->kill_all();
  TRY_VOID_CTX(host::kill_and_reap(base_.pidfd.get(), base_.is_child, base_.stop_timeout), ctx);
  if (base_.cgroup) {
    (void)base_.cgroup->thaw();
    TRY_VOID_CTX(base_.cgroup->wait_empty(base_.stop_timeout), ctx);
    TRY_VOID_CTX(base_.cgroup->remove(), ctx);
  }
  base_.netns.reset();
  base_.pidfd.reset();
  base_.destroyed = true;
  return {};
}

json VmmInstance::persist_base() const {
  json j = {{"pid", base_.pid}, {"start_time", base_.start_time}, {"machine", base_.machine}};
  if (base_.cgroup) j["cgroups"] = base_.cgroup->persist();
  return j;
}

Result<VmmPersisted> parse_vmm_persisted(const json& j) {
  try {
    VmmPersisted p;
    p.pid = j.at("pid").get<pid_t>();
    p.start_time = j.at("start_time").get<uint64_t>();
    if (j.contains("cgroups")) p.cgroups = j["cgroups"];
    if (j.contains("machine")) p.machine = j["machine"];
    if (p.pid <= 1) return fail(Code::kInvalidArgument, "persisted pid is not a VMM process");
    return p;
  } catch (const json::exception& e) {
    return fail(Code::kInvalidArgument, std::string("persisted VM state: ") + e.what());
  }
}

Result<UniqueFd> find_vmm(const VmmPersisted& p, const std::string& needle, const char* what) {
  UniqueFd pidfd(host::sys_pidfd_open(p.pid));
  if (!pidfd) {
    if (errno == ESRCH) return fail(Code::kNotFound, std::string(what) + " process is gone");
    return fail_sys("pidfd_open", std::to_string(p.pid));
  }
  auto start = host::process_start_time(p.pid);
  if (!start || *start != p.start_time)
    return fail(Code::kNotFound, "pid " + std::to_string(p.pid) + " is another process now");
  auto cmdline = host::read_text("/proc/" + std::to_string(p.pid) + "/cmdline");
  if (!cmdline || cmdline->find(needle) == std::string::npos)
    return fail(Code::kNotFound, "pid " + std::to_string(p.pid) + " is not this sandbox's " + what);
  return pidfd;
}

Result<void> adopt_vmm(VmmParts& parts, const std::string& id, const VmmPersisted& p,
                       UniqueFd pidfd, UniqueFd channel, const host::CgroupLayout& layout,
                       const std::string& cgroup_name, std::chrono::milliseconds stop_timeout) {
  if (p.cgroups.is_null()) return fail(Code::kInvalidArgument, "no persisted cgroups");
  parts.netns.reset(
      ::open(("/proc/" + std::to_string(p.pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!parts.netns) return fail_sys("open", "the VM's network namespace");
  parts.cgroup = TRY(host::Cgroup::open(layout, cgroup_name, p.cgroups));
  parts.id = id;
  parts.pid = p.pid;
  parts.start_time = p.start_time;
  parts.is_child = false;
  parts.pidfd = std::move(pidfd);
  parts.channel = std::move(channel);
  parts.machine = p.machine;
  parts.stop_timeout = stop_timeout;
  return {};
}

Result<void> cleanup_vmm(const VmmPersisted* p, const std::string& id, const std::string& needle,
                         const char* what, const host::CgroupLayout& layout,
                         const std::string& cgroup_name, std::chrono::milliseconds timeout) {
  if (p) {
    if (auto pidfd = find_vmm(*p, needle, what))
      TRY_VOID(host::kill_and_reap(pidfd->get(), false, timeout));
  }
  return host::remove_sandbox_cgroups(layout, cgroup_name, id, p ? p->cgroups : json(), timeout);
}

namespace {
struct ChildError {
  int step;
  int err;
};
}  // namespace

void child_failed(int err_fd, int step) {
  ChildError e{step, errno};
  (void)!::write(err_fd, &e, sizeof e);
  ::_exit(127);
}

Result<LaunchedVmm> launch_vmm(uint64_t ns_flags, host::Cgroup& cgroup, ChildMain child, void* plan,
                               const char* const* step_names, size_t n_steps,
                               const std::string& what, std::chrono::milliseconds stop) {
  int go[2], err[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return fail_sys("pipe2");
  UniqueFd go_r(go[0]), go_w(go[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return fail_sys("pipe2");
  UniqueFd err_r(err[0]), err_w(err[1]);
  int pidfd_raw = -1;
  clone_args args{};
  args.flags = CLONE_PIDFD | ns_flags;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd_raw);
  args.exit_signal = SIGCHLD;
  if (int cfd = cgroup.clone_into_fd(); cfd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cfd);
  }
  long pid = host::sys_clone3(&args);
  if (pid < 0) return fail_sys("clone3", what);
  if (pid == 0) {
    child(plan, ChildPipes{go_r.get(), err_w.get()});
    ::_exit(127);
  }
  LaunchedVmm out;
  out.pidfd.reset(pidfd_raw);
  out.pid = static_cast<pid_t>(pid);
  Guard child_guard([&] { (void)host::kill_and_reap(out.pidfd.get(), true, stop); });
  go_r.reset();
  err_w.reset();
  out.netns.reset(
      ::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!out.netns) return fail_sys("open", what + "'s network namespace");
  out.start_time = TRY(host::process_start_time(static_cast<int>(pid)));
  TRY_VOID_CTX(cgroup.attach(out.pid), "joining " + what + "'s cgroups");
  if (::write(go_w.get(), "g", 1) != 1) return fail_sys("write", "go pipe");
  go_w.reset();
  // The child execs (its end of the pipe closes) or says which step failed; one that does
  // neither within kJailDeadline is stuck and killed (by child_guard).
  constexpr int kJailDeadlineMs = 10000;
  pollfd pfd{err_r.get(), POLLIN, 0};
  int ready;
  do ready = ::poll(&pfd, 1, kJailDeadlineMs);
  while (ready < 0 && errno == EINTR);
  if (ready < 0) return fail_sys("poll", what + "'s jail");
  if (ready == 0)
    return fail(Code::kTimeout, what + "'s jail did not exec within " +
                                    std::to_string(kJailDeadlineMs / 1000) + " s");
  ChildError ce{};
  ssize_t n;
  do n = ::read(err_r.get(), &ce, sizeof ce);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof ce)) {
    size_t step = std::min(static_cast<size_t>(std::max(ce.step, 0)), n_steps - 1);
    return fail(Error::sys(what + "'s jail: " + step_names[step], "", ce.err));
  }
  child_guard.dismiss();
  return out;
}

int bring_up_lo_raw() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int rc = ::ioctl(s, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP;
    rc = ::ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  int err = errno;
  ::close(s);
  errno = err;
  return rc;
}

}  // namespace space::runtime::vm
