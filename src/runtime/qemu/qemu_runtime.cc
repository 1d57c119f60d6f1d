// The qemu runtime's recipe (qemu_runtime.h), of vm_steps.h's shared steps and QEMU's own:
// the writable disk (made, a template's copied, or a saved machine's received) -> cgroup ->
// jailed QEMU (clone3 into new namespaces and the cgroup; the child builds its tmpfs root,
// drops to the sandbox's uid and execs QEMU) -> the agent's port and QMP -> a clone's or saved
// machine's incoming migration, or wait for a booted agent's first byte. Every step leaves a
// guard; a failure unwinds them and reports the guest console's last lines. The instance is
// vmm.h's VmmInstance over QMP.
#include "runtime/qemu/qemu_runtime.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/guard.h"
#include "host/host_files.h"
#include "host/limits.h"
#include "host/process.h"
#include "host/syscalls.h"
#include "runtime/kvm.h"
#include "runtime/qemu/qemu_args.h"
#include "runtime/qemu/qemu_template.h"
#include "runtime/qemu/qmp.h"
#include "runtime/sparse_file.h"
#include "runtime/vm_host.h"
#include "runtime/vm_steps.h"
#include "runtime/vmm.h"

extern char** environ;

namespace space::runtime::qemu {
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using host::Cgroup;
using host::CgroupLayout;
using vm::tail_of;

namespace {

// Fds the child hands to QEMU at fixed numbers (-add-fd): the two disks.
constexpr int kImageFd = 10;
constexpr int kDiskFd = 11;
constexpr int kDiskRoFd = 12;  // QEMU probes the disk read-only first: a set needs both modes
// A template's or clone's RAM (the memfd), which QEMU opens as /proc/self/fd/<kRamFd>.
constexpr int kRamFd = 13;

// A saved machine (Instance::save_machine, SandboxSpec::restore_machine) is vm_steps.h's three
// files: QEMU's migration stream (RAM and device state) as the memory, the writable disk as it
// was when the stream ended, and machine.json. The writable disk of a running VM is the
// sandbox's disk.img, outside QEMU's jail (QEMU gets it as an fd only).
using vm::kSavedDisk;
using vm::kSavedMemory;

// Where things are inside QEMU's jail.
constexpr const char* kJailVm = "/vm";
constexpr const char* kJailKernel = "/boot/vmlinux";
constexpr const char* kJailInitrd = "/boot/initrd";

// Waits until the migration that was just started (either way) ends: kTimeout after
// `deadline` (an outgoing one is cancelled then), QEMU's reason if it failed.
Result<void> await_migration(Qmp& qmp, Clock::time_point deadline, bool outgoing) {
  for (int polls = 0;;) {
    json info = TRY(qmp.execute("query-migrate"));
    std::string status = info.is_object() ? info.value("status", "") : "";
    if (status == "completed") return {};
    if (status == "failed" || status == "cancelled") {
      std::string why = info.is_object() ? info.value("error-desc", "") : "";
      return fail(Code::kInternal, "QEMU's migration " + status +
                                       (why.empty() ? std::string() : ": " + why.substr(0, 300)));
    }
    if (Clock::now() >= deadline) {
      if (outgoing) (void)qmp.execute("migrate_cancel");
      return fail(Code::kTimeout,
                  "QEMU's migration did not end in time (status \"" + status.substr(0, 40) + "\")");
    }
    // A clone's device state loads in a few ms: look often at first.
    std::this_thread::sleep_for(std::chrono::milliseconds(++polls < 50 ? 1 : 10));
  }
}

// QEMU's `x-ignore-shared` migration capability: with it on, RAM mapped from a shared file
// (a template's memfd) is neither written nor read by a migration; only the device state is.
Result<void> set_ignore_shared(Qmp& qmp, bool on) {
  TRY(qmp.execute(
      "migrate-set-capabilities",
      {{"capabilities", json::array({{{"capability", "x-ignore-shared"}, {"state", on}}})}}));
  return {};
}

// --- The child: between clone3 and QEMU's exec. Only raw syscalls from here (the daemon is
// multithreaded; the child is a copy of one thread), everything precomputed by the parent.

struct Bind {
  std::string src, dst;  // dst inside the new root (already prefixed with the jail dir)
  bool dir = true;       // a directory (else a file)
  bool rw = false;
  bool dev = false;     // a device node: keep dev, drop exec
  std::string symlink;  // if non-empty: create dst as a symlink to this instead of binding
};

struct ChildPlan {
  std::string jail;  // mount point of the tmpfs root
  std::vector<Bind> binds;
  std::vector<std::string> tmpfs_dirs;  // extra tmpfs mounts (dst, prefixed)
  std::string proc_dir;                 // prefixed
  std::string old_root;                 // prefixed put_old for pivot_root
  uint32_t uid = 0;
  std::vector<gid_t> groups;
  int go_fd = -1, err_fd = -1, log_fd = -1, null_fd = -1, image_fd = -1, disk_fd = -1,
      disk_ro_fd = -1, ram_fd = -1;
  std::string exe;
  std::vector<std::string> argv;
  std::vector<char*> argv_p;
};

constexpr const char* kStepNames[] = {
    "wait for the cgroup",
    "make mounts private",
    "mount the tmpfs root",
    "create a mount point",
    "bind mount",
    "remount read-only",
    "mount /proc",
    "mount a tmpfs",
    "pivot_root",
    "detach the old root",
    "remount / read-only",
    "bring up lo",
    "set groups",
    "set gid",
    "set uid",
    "no_new_privs",
    "set up fds",
    "exec QEMU",
};

[[noreturn]] void child_fail(const ChildPlan& p, int step) { vm::child_failed(p.err_fd, step); }

int mkdir_p_raw(const std::string& path) {
  // Parents first; `path` is absolute. Uses a stack buffer: no allocation in the child.
  char buf[4096];
  if (path.size() >= sizeof buf) return -1;
  std::memcpy(buf, path.c_str(), path.size() + 1);
  for (char* p = buf + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = 0;
    if (::mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (::mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

int touch_raw(const std::string& path) {
  char buf[4096];
  if (path.size() >= sizeof buf) return -1;
  std::memcpy(buf, path.c_str(), path.size() + 1);
  char* slash = std::strrchr(buf, '/');
  if (slash && slash != buf) {
    *slash = 0;
    if (mkdir_p_raw(buf) != 0) return -1;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  ::close(fd);
  return 0;
}

[[noreturn]] void child_main(const ChildPlan& p) {
  char c;
  if (::read(p.go_fd, &c, 1) != 1) child_fail(p, 0);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(p, 1);
  if (::mount("tmpfs", p.jail.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") != 0)
    child_fail(p, 2);
  for (const Bind& b : p.binds) {
    if (!b.symlink.empty()) {
      if (::symlink(b.symlink.c_str(), b.dst.c_str()) != 0) child_fail(p, 3);
      continue;
    }
    if ((b.dir ? mkdir_p_raw(b.dst) : touch_raw(b.dst)) != 0) child_fail(p, 3);
    if (::mount(b.src.c_str(), b.dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
      child_fail(p, 4);
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID;
    if (!b.dev) flags |= MS_NODEV;
    if (b.dev || b.rw) flags |= MS_NOEXEC;
    if (!b.rw) flags |= MS_RDONLY;
    if (::mount(nullptr, b.dst.c_str(), nullptr, flags, nullptr) != 0) child_fail(p, 5);
  }
  if (mkdir_p_raw(p.proc_dir) != 0) child_fail(p, 3);
  if (::mount("proc", p.proc_dir.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    child_fail(p, 6);
  for (const std::string& d : p.tmpfs_dirs) {
    if (mkdir_p_raw(d) != 0) child_fail(p, 3);
    if (::mount("tmpfs", d.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "mode=01777,size=16m") != 0)
      child_fail(p, 7);
  }
  if (mkdir_p_raw(p.old_root) != 0) child_fail(p, 3);
  if (host::sys_pivot_root(p.jail.c_str(), p.old_root.c_str()) != 0) child_fail(p, 8);
  if (::chdir("/") != 0) child_fail(p, 8);
  if (::umount2("/.old", MNT_DETACH) != 0) child_fail(p, 9);
  (void)::rmdir("/.old");
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              nullptr) != 0)
    child_fail(p, 10);
  // The network namespace holds only lo, where the gateway's listeners will be bound.
  if (vm::bring_up_lo_raw() != 0) child_fail(p, 11);
  // Raw syscalls, not glibc's wrappers: those broadcast the change to every thread glibc
  // believes the process has (the daemon's, copied by clone3), taking a lock that another
  // daemon thread may have held at the clone — the child then waits on it forever.
  if (::syscall(SYS_setgroups, p.groups.size(), p.groups.data()) != 0) child_fail(p, 12);
  if (::syscall(SYS_setresgid, p.uid, p.uid, p.uid) != 0) child_fail(p, 13);
  if (::syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) child_fail(p, 14);  // caps go
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(p, 15);
  if (::dup2(p.null_fd, 0) < 0 || ::dup2(p.log_fd, 1) < 0 || ::dup2(p.log_fd, 2) < 0 ||
      ::dup2(p.image_fd, kImageFd) < 0 || ::dup2(p.disk_fd, kDiskFd) < 0 ||
      ::dup2(p.disk_ro_fd, kDiskRoFd) < 0 || (p.ram_fd >= 0 && ::dup2(p.ram_fd, kRamFd) < 0))
    child_fail(p, 16);
  ::execve(p.exe.c_str(), const_cast<char* const*>(p.argv_p.data()), nullptr);
  child_fail(p, 17);
}

void child_entry(void* plan, vm::ChildPipes pipes) {
  auto& p = *static_cast<ChildPlan*>(plan);  // the child's own copy of the parent's memory
  p.go_fd = pipes.go_fd;
  p.err_fd = pipes.err_fd;
  child_main(p);
}

// --- The instance.

struct Parts : vm::VmmParts {
  std::optional<Qmp> qmp;
  fs::path vm_dir;
  fs::path disk;  // the writable disk (QEMU has it as an fd)
  std::chrono::milliseconds save_timeout{120000};
  std::string accel;          // "kvm" or "tcg"
  std::string accel_note;     // with tcg: why KVM is not used
  std::string template_name;  // a clone's template; "" for a booted or restored machine
};

// Migrates the stopped VM into `fd` (passed over QMP as `fd_name`: QEMU's seccomp sandbox
// forbids the exec: transport), unthrottled since nothing competes with the stream; QEMU's
// block layer has flushed the disk when it ends.
Result<void> migrate_out(Qmp& qmp, int fd, const char* fd_name, Clock::time_point deadline) {
  TRY(qmp.execute("migrate-set-parameters", {{"max-bandwidth", 1ull << 40}}));
  TRY_VOID(qmp.send_fd(fd_name, fd));
  TRY(qmp.execute("migrate", {{"uri", std::string("fd:") + fd_name}}));
  return await_migration(qmp, deadline, true);
}

// The instance: pause, resume, `space diff`'s disk reads, saves and destroy are VmmInstance's
// steps around QMP's `stop` and `cont` (which also drains and flushes QEMU's block layer into
// disk.img) and its migration.
class QemuInstance final : public vm::VmmInstance {
 public:
  explicit QemuInstance(std::unique_ptr<Parts> p) : VmmInstance(*p), p_(std::move(p)) {}
  ~QemuInstance() override = default;

  // A template's save (QemuRuntime::build_template): reads what the agent said until it has
  // been quiet for a moment (its hello; the machine must stop with nothing in flight on its
  // port), stops the VM and migrates it into `state_fd` with `x-ignore-shared`: the device
  // state only, since its RAM is the memfd spaced holds. QEMU has flushed the disk when the
  // stream ends.
  Result<void> save_template(int state_fd) {
    std::string ctx = "saving template VM " + p_->id;
    auto quiet = std::chrono::milliseconds(150);
    auto until = Clock::now() + std::chrono::seconds(3);
    for (char buf[4096]; Clock::now() < until;) {
      pollfd pfd{channel_fd(), POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(quiet.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      if (::read(channel_fd(), buf, sizeof buf) <= 0)
        return fail(Code::kUnavailable, ctx + ": QEMU closed the agent's port");
    }
    std::lock_guard lock(p_->control_mu);
    auto deadline = Clock::now() + p_->save_timeout;
    if (!p_->qmp) return fail(Code::kConflict, ctx + ": the VM is destroyed");
    TRY_VOID_CTX(set_ignore_shared(*p_->qmp, true), ctx);
    TRY_VOID_CTX(stop_locked(), ctx);
    TRY_VOID_CTX(migrate_out(*p_->qmp, state_fd, "space-template", deadline), ctx);
    return {};
  }

  json persist() const override {
    json j = persist_base();
    j["vm_dir"] = p_->vm_dir.string();
    j["accel"] = p_->accel;
    j["accel_note"] = p_->accel_note;
    if (!p_->template_name.empty()) j["template"] = p_->template_name;
    return j;
  }

  json details() const override {
    json j = {{"accelerator", p_->accel}};
    if (!p_->accel_note.empty()) j["accelerator_note"] = p_->accel_note;
    if (!p_->template_name.empty()) j["template"] = p_->template_name;
    return j;
  }
  bool resumed_from_template() const override { return !p_->template_name.empty(); }

 protected:
  bool has_control() const override { return p_->qmp.has_value(); }
  void close_control() override { p_->qmp.reset(); }
  Result<void> vmm_stop() override { return command("stop"); }
  Result<void> vmm_cont() override { return command("cont"); }
  Result<UniqueFd> open_writable_disk() override {
    UniqueFd disk(::open(p_->disk.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!disk) return fail_sys("open", p_->disk.string());
    return disk;
  }
  // QEMU writes its migration stream (RAM and devices) into `memory`; disk.img is linked beside
  // it. Both stay as they are until the VM runs again.
  Result<void> vmm_save(int dir_fd) override {
    UniqueFd mem(::openat(dir_fd, kSavedMemory, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!mem) return fail_sys("openat", kSavedMemory);
    TRY_VOID(migrate_out(*p_->qmp, mem.get(), "space-save", Clock::now() + p_->save_timeout));
    mem.reset();
    if (::linkat(AT_FDCWD, p_->disk.c_str(), dir_fd, kSavedDisk, 0) != 0)
      return fail_sys("linkat", p_->disk.string());
    return {};
  }

 private:
  Result<void> command(const char* name) {
    TRY(p_->qmp->execute(name));
    return {};
  }
  std::unique_ptr<Parts> p_;
};

// The guest kernel's command line for a VM booted as `hostname`.
std::string guest_cmdline(const Config& config, const std::string& hostname, uint32_t pids) {
  std::string ports;
  for (uint16_t p : config.egress_ports) ports += (ports.empty() ? "" : ",") + std::to_string(p);
  return std::string(kGuestCmdline) + " space.hostname=" + hostname +
         " space.pids=" + std::to_string(pids) + " space.egress=" + ports;
}

// What identifies a sandbox's QEMU on its command line (find_vmm): `-name space-<id>`. Not the
// guest kernel's `space.hostname=`, which a clone has from its template.
std::string vmm_needle(const std::string& id) {
  return std::string(1, '\0') + "space-" + id + std::string(1, '\0');
}

// Connects to QEMU's chardev socket for the agent's port, retrying while QEMU starts.
Result<UniqueFd> connect_port(const fs::path& path, int pidfd, Clock::time_point deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() >= sizeof addr.sun_path)
    return fail(Code::kInvalidArgument, "socket path too long: " + path.string());
  std::memcpy(addr.sun_path, path.c_str(), path.native().size());
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return fail_sys("socket", "AF_UNIX");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    int err = errno;
    if (err != ENOENT && err != ECONNREFUSED) return fail_sys("connect", path.string(), err);
    pollfd pfd{pidfd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) == 1) return fail(Code::kUnavailable, "QEMU exited");
    if (Clock::now() >= deadline) return fail(Code::kTimeout, "QEMU did not open " + path.string());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

// --- The runtime.

QemuRuntime::QemuRuntime(Config config)
    : config_(std::move(config)),
      qemu_wanted_(config_.qemu),
      layout_(host::detect_cgroups(config_.cgroup_root)) {
  std::lock_guard lock(probe_mu_);
  probe_tools();
}

void QemuRuntime::probe_tools() const {
  // QEMU and the guest kernel may be installed after spaced started: each create looks again
  // while they are missing (a found QEMU is kept; config_.qemu changes once, from its name to
  // its path, before any VM can start).
  if (!qemu_found_) {
    if (auto q = vm::find_in_path(qemu_wanted_)) {
      if (qemu_error_) spdlog::info("qemu runtime: found {}", q->string());
      const_cast<fs::path&>(config_.qemu) = *q;
      qemu_found_ = true;
      qemu_error_.reset();
    } else {
      qemu_error_ = Error(Code::kUnavailable,
                          qemu_wanted_.string() +
                              " not found: install QEMU (apt-get install qemu-system-x86) or set "
                              "vm.qemu in spaced's config");
    }
  }
  kernel_error_.reset();
  std::string missing = vm::guest_file_missing(config_.kernel, true);
  if (missing.empty()) missing = vm::guest_file_missing(config_.initrd, false);
  if (!missing.empty()) kernel_error_ = Error(Code::kUnavailable, missing);
}

std::unique_ptr<QemuRuntime> QemuRuntime::create(Config config) {
  return std::unique_ptr<QemuRuntime>(new QemuRuntime(std::move(config)));
}

const AccelVerdict& QemuRuntime::kvm_verdict() const {
  std::call_once(kvm_once_, [this] {
    if (config_.accel == "tcg") {
      kvm_.facts = vm::gather_kvm_facts(config_.kvm_device);
      kvm_.reason = "vm.accel is \"tcg\" in spaced's config";
      kvm_.how = "config";
      return;
    }
    kvm_ = decide_kvm({.qemu = config_.qemu,
                       .kernel = config_.kernel,
                       .initrd = config_.initrd,
                       .cache = config_.probe_cache,
                       .kvm_device = config_.kvm_device});
    if (kvm_.usable)
      spdlog::info("qemu runtime: microVMs run under KVM ({})", kvm_.how);
    else
      spdlog::info("qemu runtime: KVM is not used, microVMs run under TCG emulation: {} ({})",
                   kvm_.reason, kvm_.how);
  });
  return kvm_;
}

Result<std::string> QemuRuntime::accelerator() const {
  if (config_.accel == "tcg") return std::string("tcg");
  const AccelVerdict& v = kvm_verdict();
  if (config_.accel == "kvm" && !v.usable)
    return fail(Code::kUnavailable,
                "vm.accel is \"kvm\" but KVM cannot run the guest here: " + v.reason +
                    "; set vm.accel to \"auto\" to fall back to TCG "
                    "emulation (see `space doctor`)");
  return std::string(v.usable ? "kvm" : "tcg");
}

Result<void> QemuRuntime::usable() const {
  {
    std::lock_guard lock(probe_mu_);
    if (qemu_error_ || kernel_error_) probe_tools();
    if (qemu_error_) return fail(Error(*qemu_error_));
    if (kernel_error_) return fail(Error(*kernel_error_));
  }
  TRY_VOID(accelerator());
  return {};
}

Result<const CgroupLayout*> QemuRuntime::cgroup_layout() const {
  if (!layout_) return fail(Error(layout_.error()).wrap("detecting cgroups"));
  return &*layout_;
}

Result<std::unique_ptr<Instance>> QemuRuntime::create(const SandboxSpec& spec) {
  std::string ctx = "starting VM " + spec.id;
  TRY_VOID_CTX(usable(), ctx);
  if (spec.image.vm_disk.empty() && !spec.image.ro_binds.empty())  // the host image
    return fail(Code::kConflict,
                ctx + ": image \"" + spec.image.name +
                    "\" binds the host's /usr and cannot "
                    "boot in a VM; give --image an image of its own: `space image import NAME DIR` "
                    "(a root filesystem, e.g. from debootstrap) and `space image build-vm NAME` "
                    "(docs/vm-guest.md)");
  TRY_VOID(vm::check_vm_spec(spec, ctx));
  std::string accel = TRY_CTX(accelerator(), ctx);
  if (spec.restore_machine) return start(spec, Launch{.mode = Launch::kRestore}, accel);
  if (!config_.templates || config_.template_dir.empty())
    return start(spec, Launch{.mode = Launch::kBoot}, accel);
  auto from = TRY_CTX(ensure_template(spec, accel), ctx + ": the image's template");
  if (spec.times) spec.times->mark("template");
  return start(spec, Launch{.mode = Launch::kClone, .from = std::move(from)}, accel);
}

Result<std::unique_ptr<Instance>> QemuRuntime::start(const SandboxSpec& spec, const Launch& how,
                                                     const std::string& accel) {
  std::string ctx = "starting VM " + spec.id;
  const bool restoring = how.mode == Launch::kRestore;
  const bool clone = how.mode == Launch::kClone;
  const CgroupLayout* layout = TRY_CTX(cgroup_layout(), ctx);
  StepTimes scratch;
  StepTimes& times = spec.times ? *spec.times : scratch;
  const auto stop = config_.stop_timeout;

  // 1. The VM's directory (QEMU's only writable place) and its writable disk: a sparse file
  //    of --disk bytes, an empty ext4 that the guest's init mounts as the overlay's upper layer.
  fs::path vm = spec.dir / "vm";
  fs::path jail = spec.dir / "jail";
  std::error_code ec;
  fs::create_directory(vm, ec);
  if (ec) return fail(Code::kInternal, ctx + ": creating " + vm.string() + ": " + ec.message());
  fs::create_directory(jail, ec);
  if (ec) return fail(Code::kInternal, ctx + ": creating " + jail.string() + ": " + ec.message());
  if (::chown(vm.c_str(), spec.uid_base, spec.uid_base) != 0 || ::chmod(vm.c_str(), 0700) != 0)
    return fail(Error::sys("chown", vm.string()).wrap(ctx));
  fs::path disk = spec.dir / kSavedDisk;  // outside `vm`: QEMU gets it as an fd only
  // A saved machine comes in `restore` (removed when start() returns): its disk is moved to
  // where a booted VM's would be, its memory is read by QEMU through an fd.
  vm::SavedMachine saved(spec.dir);
  UniqueFd memory_fd;
  if (restoring) {
    TRY_VOID_CTX(saved.receive(spec, {kSavedDisk, kSavedMemory}, "qemu"), ctx);
    memory_fd.reset(::openat(saved.dir_fd(), kSavedMemory, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!memory_fd) return fail(Error::sys("openat", kSavedMemory).wrap(ctx));
    if (::renameat(saved.dir_fd(), kSavedDisk, AT_FDCWD, disk.c_str()) != 0)
      return fail(Error::sys("rename", disk.string()).wrap(ctx));
    times.mark("saved machine");
  } else if (clone) {
    // The template's writable disk as it was when its machine stopped (whose RAM caches its
    // blocks).
    TRY_VOID_CTX(vm::copy_template_disk(how.from->dir / kTemplateDisk, AT_FDCWD, disk.c_str()),
                 ctx);
    times.mark("disk");
  } else {
    TRY_VOID_CTX(vm::make_writable_disk(disk, spec.limits, spec.dir / "mke2fs.log"),
                 ctx + ": making the writable disk");
    times.mark("disk");
  }

  // 2. A fresh cgroup: the sandbox's CPU limit; its memory plus QEMU's own; QEMU's threads.
  std::unique_ptr<Cgroup> cgroup = TRY_CTX(
      vm::make_vmm_cgroup(*layout, config_.cgroup_name, spec, config_.overhead_bytes, 256), ctx);
  Guard cgroup_guard([&] { vm::remove_vmm_cgroup(*cgroup, stop); });
  times.mark("cgroup");

  // 3. The plan for the child: its tmpfs root and QEMU's command line.
  ChildPlan plan;
  plan.jail = jail.string();
  auto in_jail = [&](const std::string& p) { return plan.jail + p; };
  for (const char* d : {"/usr", "/lib", "/lib64", "/bin", "/sbin", "/lib32", "/libx32"}) {
    struct stat st;
    if (::lstat(d, &st) != 0) continue;
    Bind b{.src = d, .dst = in_jail(d)};
    if (S_ISLNK(st.st_mode)) {
      std::error_code e2;
      b.symlink = fs::read_symlink(d, e2).string();
      if (e2) continue;
    } else if (!S_ISDIR(st.st_mode)) {
      continue;
    }
    plan.binds.push_back(b);
  }
  if (::access("/etc/ld.so.cache", R_OK) == 0)
    plan.binds.push_back(
        {.src = "/etc/ld.so.cache", .dst = in_jail("/etc/ld.so.cache"), .dir = false});
  for (const char* d : {"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"})
    plan.binds.push_back({.src = d, .dst = in_jail(d), .dir = false, .rw = true, .dev = true});
  if (accel == "kvm") {
    // QEMU's uid gets a KVM node of its own, as Firecracker's jailer makes one in its chroot:
    // made in the sandbox's root-only directory and bound to the jail's /dev/kvm, so the host's
    // node keeps its owner, group and mode. It goes with the sandbox's directory.
    fs::path node = spec.dir / "kvm";
    TRY_VOID_CTX(
        vm::make_private_device_node(node, makedev(vm::kKvmMajor, vm::kKvmMinor), spec.uid_base),
        ctx + ": making QEMU's /dev/kvm");
    plan.binds.push_back(
        {.src = node.string(), .dst = in_jail("/dev/kvm"), .dir = false, .rw = true, .dev = true});
  }
  plan.binds.push_back({.src = vm.string(), .dst = in_jail(kJailVm), .rw = true});
  plan.binds.push_back({.src = config_.kernel.string(), .dst = in_jail(kJailKernel), .dir = false});
  plan.binds.push_back({.src = config_.initrd.string(), .dst = in_jail(kJailInitrd), .dir = false});
  plan.tmpfs_dirs = {in_jail("/tmp"), in_jail("/var/tmp")};
  plan.proc_dir = in_jail("/proc");
  plan.old_root = in_jail("/.old");
  plan.uid = spec.uid_base;  // no supplementary groups: not even the host's kvm group
  plan.exe = config_.qemu.string();

  uint64_t mem_mib = spec.limits.memory_bytes >> 20;
  int smp = vm::vcpu_count(spec.limits);
  // A clone goes on from its template's boot: the same command line (QEMU's fw_cfg holds it).
  std::string cmdline =
      clone ? how.from->cmdline : guest_cmdline(config_, spec.id, spec.limits.pids);
  // The guest's RAM is a memory backend named "ram", so that every machine's migration stream
  // names it alike: anonymous memory for a boot or a restore; for a template, the memfd that
  // spaced keeps (shared: what the guest writes lands in it); for a clone, the template's sealed
  // memfd mapped privately (copy-on-write). A snapshot saved before backends were used names
  // QEMU's default block instead and is restored without one.
  const bool ram_backend = !restoring || saved.machine().value("ram", "") == "backend";
  std::string ram_object;
  if (how.mode == Launch::kTemplate || clone)
    ram_object = "memory-backend-file,id=ram,size=" + std::to_string(mem_mib) +
                 "M,mem-path=/proc/self/fd/" + std::to_string(kRamFd) +
                 (clone ? ",share=off" : ",share=on");
  else
    ram_object = "memory-backend-ram,id=ram,size=" + std::to_string(mem_mib) + "M";
  std::string vmd = kJailVm;
  plan.argv = {
      plan.exe,
      "-name",
      "space-" + spec.id,
      "-M",
      std::string(kMachine) + (ram_backend ? ",memory-backend=ram" : ""),
      "-accel",
      accel == "kvm" ? std::string("kvm") : "tcg,tb-size=" + std::to_string(kTcgCacheMiB),
      "-cpu",
      accel == "kvm" ? "host" : "max",
      "-m",
      std::to_string(mem_mib) + "M",
      "-smp",
      std::to_string(smp),
      "-nodefaults",
      "-no-user-config",
      "-nographic",
      "-no-reboot",
      "-nic",
      "none",
      "-kernel",
      kJailKernel,
      "-initrd",
      kJailInitrd,
      "-append",
      cmdline,
      "-chardev",
      "file,id=con,path=" + vmd + "/console.log",
      "-serial",
      "chardev:con",
      "-add-fd",
      "fd=" + std::to_string(kImageFd) + ",set=1,opaque=image",
      "-add-fd",
      "fd=" + std::to_string(kDiskFd) + ",set=2,opaque=disk",
      "-add-fd",
      "fd=" + std::to_string(kDiskRoFd) + ",set=2,opaque=disk-ro",
      // No image locking: each disk is this VM's alone (an fd), and a save's migration gives
      // up the lock that `cont` would then fail to take back.
      "-drive",
      "id=image,file=/dev/fdset/1,format=raw,if=none,readonly=on,file.locking=off",
      "-device",
      "virtio-blk-device,drive=image",
      "-drive",
      "id=disk,file=/dev/fdset/2,format=raw,if=none,discard=unmap,file.locking=off",
      "-device",
      "virtio-blk-device,drive=disk",
      "-device",
      "virtio-serial-device,max_ports=2",
      "-chardev",
      "socket,id=agent,path=" + vmd + "/agent.sock,server=on,wait=off",
      "-device",
      "virtserialport,chardev=agent,name=space.agent",
      "-qmp",
      "unix:" + vmd + "/qmp.sock,server=on,wait=off",
      "-sandbox",
      kQemuSandbox,
      "-msg",
      "timestamp=on",
  };
  if (ram_backend)
    for (const std::string& a : {std::string("-object"), ram_object}) plan.argv.push_back(a);
  if (restoring || clone) {
    // Stopped until the stream is in and the agent's port is connected (-S), then `cont`.
    for (const char* a : {"-incoming", "defer", "-S"}) plan.argv.push_back(a);
  }
  for (auto& a : plan.argv) plan.argv_p.push_back(a.data());
  plan.argv_p.push_back(nullptr);

  UniqueFd image_fd = TRY_CTX(vm::open_image_disk(spec.image), ctx);
  json machine = vm::describe_machine(image_fd.get(), spec.limits);
  if (ram_backend) machine["ram"] = "backend";
  if (restoring) TRY_VOID_CTX(vm::check_saved_machine(saved.machine(), machine, spec.image), ctx);
  UniqueFd disk_fd(::open(disk.c_str(), O_RDWR | O_CLOEXEC));
  if (!disk_fd) return fail(Error::sys("open", disk.string()).wrap(ctx));
  UniqueFd disk_ro_fd(::open(disk.c_str(), O_RDONLY | O_CLOEXEC));
  if (!disk_ro_fd) return fail(Error::sys("open", disk.string()).wrap(ctx));
  vm::ChildStdio stdio = TRY_CTX(vm::open_child_stdio(spec.dir / "qemu.log"), ctx);
  plan.log_fd = stdio.log.get();
  plan.null_fd = stdio.null.get();
  plan.image_fd = image_fd.get();
  plan.disk_fd = disk_fd.get();
  plan.disk_ro_fd = disk_ro_fd.get();
  plan.ram_fd = how.mode == Launch::kTemplate ? how.template_ram : clone ? how.from->ram.get() : -1;

  // 4. clone3 into the namespaces (and the v2 cgroup), attach the v1 controllers, let it go.
  vm::LaunchedVmm launched = TRY_CTX(
      vm::launch_vmm(
          CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP,
          *cgroup, child_entry, &plan, kStepNames, std::size(kStepNames), "QEMU", stop),
      ctx);
  const int pidfd = launched.pidfd.get();
  Guard child_guard([&] { (void)host::kill_and_reap(pidfd, true, stop); });
  times.mark("exec");

  // 5. The agent's port and QMP; then wait for the guest to boot up to the agent. The port is
  //    connected before the guest can write to it (an unconnected port drops what is written).
  auto deadline = Clock::now() + config_.boot_timeout;
  auto boot_failed = [&](Error e) {
    std::string msg = e.message();
    return Error(e.code(),
                 ctx + ": " + msg + "; QEMU said:" + tail_of(spec.dir / "qemu.log", 5) +
                     "\nthe guest console's last lines:" + tail_of(vm / "console.log", 12));
  };
  auto channel = connect_port(vm / "agent.sock", pidfd, deadline);
  if (!channel) return fail(boot_failed(std::move(channel.error())));
  auto qmp = Qmp::connect(vm / "qmp.sock", std::chrono::milliseconds(10000));
  if (!qmp) return fail(boot_failed(std::move(qmp.error())));
  times.mark("qemu up");
  if (clone) {
    memory_fd.reset(::open((how.from->dir / kTemplateState).c_str(), O_RDONLY | O_CLOEXEC));
    if (!memory_fd)
      return fail(Error::sys("open", (how.from->dir / kTemplateState).string()).wrap(ctx));
  }
  if (restoring || clone) {
    // The guest goes on where it was saved; its agent speaks when the daemon pings it. A
    // clone's stream has the device state only: its RAM is the template's, mapped already.
    auto incoming = [&]() -> Result<void> {
      if (clone) TRY_VOID(set_ignore_shared(*qmp, true));
      TRY_VOID(qmp->send_fd("space-restore", memory_fd.get()));
      memory_fd.reset();
      TRY(qmp->execute("migrate-incoming", {{"uri", "fd:space-restore"}}));
      TRY_VOID(await_migration(*qmp, deadline, false));
      // A snapshot of this machine later writes its RAM like any other's.
      if (clone) TRY_VOID(set_ignore_shared(*qmp, false));
      TRY(qmp->execute("cont"));
      return {};
    };
    if (auto r = incoming(); !r)
      return fail(
          boot_failed(std::move(r.error()).wrap(clone ? "cloning template " + how.from->name
                                                      : std::string("loading the saved machine"))));
    times.mark(clone ? "machine cloned" : "machine loaded");
  }
  while (!restoring && !clone) {
    pollfd pfds[2] = {{channel->get(), POLLIN, 0}, {pidfd, POLLIN, 0}};
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    int r = ::poll(pfds, 2, std::max(left, 0));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail(Error::sys("poll").wrap(ctx));
    if (r == 0)
      return fail(boot_failed(
          Error(Code::kTimeout, "the guest did not start its agent within " +
                                    std::to_string(config_.boot_timeout.count() / 1000) + " s")));
    if (pfds[1].revents) return fail(boot_failed(Error(Code::kUnavailable, "QEMU exited")));
    if (pfds[0].revents & POLLIN) break;
    return fail(boot_failed(Error(Code::kUnavailable, "QEMU closed the agent's port")));
  }
  times.mark("boot");

  auto parts = std::make_unique<Parts>();
  vm::take_launched(*parts, spec.id, std::move(launched), std::move(*channel), std::move(cgroup),
                    std::move(machine), stop);
  parts->qmp.emplace(std::move(*qmp));
  parts->vm_dir = vm;
  parts->disk = disk;
  parts->accel = accel;
  if (accel == "tcg") parts->accel_note = tcg_note();
  if (clone) parts->template_name = how.from->name;
  child_guard.dismiss();
  cgroup_guard.dismiss();
  return std::unique_ptr<Instance>(new QemuInstance(std::move(parts)));
}

Result<std::shared_ptr<const QemuRuntime::Template>> QemuRuntime::ensure_template(
    const SandboxSpec& spec, const std::string& accel) {
  json key = template_key(config_, spec, accel);
  std::string name = template_name(key);
  {
    std::lock_guard g(templates_mu_);
    if (auto it = templates_.find(name); it != templates_.end()) {
      it->second.used = Clock::now();
      return it->second.t;
    }
  }
  std::shared_ptr<std::mutex> lock = template_locks_.get(name);
  std::lock_guard g(*lock);  // one build per template; the others wait for it
  {
    std::lock_guard g2(templates_mu_);
    if (auto it = templates_.find(name); it != templates_.end()) return it->second.t;
  }
  std::error_code ec;
  fs::create_directories(config_.template_dir, ec);
  if (ec)
    return fail(Code::kInternal, "creating " + config_.template_dir.string() + ": " + ec.message());
  prune_templates(config_.template_dir, key, kTemplatesOnDisk);
  fs::path dir = config_.template_dir / name;
  std::shared_ptr<const Template> t = TRY_CTX(load_template(dir, key), "loading " + dir.string());
  if (!t) {
    fs::remove_all(dir, ec);  // made from something else (a hash collision ends here too)
    t = TRY(build_template(spec, key, name, accel));
  }
  std::lock_guard g2(templates_mu_);
  // Templates pruned from disk are let go, then the least recently used beyond what is kept in
  // memory (clones running from them keep their own mapping).
  for (auto it = templates_.begin(); it != templates_.end();)
    it = fs::exists(it->second.t->dir, ec) ? std::next(it) : templates_.erase(it);
  while (templates_.size() >= kTemplatesInMemory) {
    auto lru = std::min_element(templates_.begin(), templates_.end(),
                                [](auto& a, auto& b) { return a.second.used < b.second.used; });
    templates_.erase(lru);
  }
  templates_[name] = Loaded{t, Clock::now()};
  return t;
}

Result<std::shared_ptr<const QemuRuntime::Template>> QemuRuntime::build_template(
    const SandboxSpec& spec, const json& key, const std::string& name, const std::string& accel) {
  std::string ctx = "booting the template VM for image \"" + spec.image.name + "\"";
  auto t0 = Clock::now();
  auto build = TRY_CTX(vm::TemplateBuild::begin(config_.template_dir, name, 0700), ctx);
  const int out_fd = build->out_fd();
  // A sandbox of its own, with this sandbox's uid range (not in use yet) and RAM that spaced
  // keeps: the memfd QEMU maps shared.
  UniqueFd ram = TRY_CTX(new_template_ram(spec.limits.memory_bytes), ctx);
  SandboxSpec ts = vm::template_spec(spec, name, build->dir());
  auto inst = start(ts, Launch{.mode = Launch::kTemplate, .template_ram = ram.get()}, accel);
  if (!inst) return fail(std::move(inst.error()).wrap(ctx));
  auto* vmi = static_cast<QemuInstance*>(inst->get());
  Guard vm_guard([&] { (void)vmi->destroy(); });
  UniqueFd state(::openat(out_fd, kTemplateState, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
  if (!state) return fail(Error::sys("openat", kTemplateState).wrap(ctx));
  TRY_VOID_CTX(vmi->save_template(state.get()), ctx);
  state.reset();
  // QEMU goes before the RAM is sealed (a shared writable mapping of it forbids the seal) and
  // before the disk becomes root's: it runs as the sandbox's uid.
  TRY_VOID_CTX(vmi->destroy(), "stopping the template VM");
  vm_guard.dismiss();
  inst->reset();
  TRY_VOID_CTX(seal_template_ram(ram.get()), ctx);
  if (::renameat(AT_FDCWD, (build->dir() / kSavedDisk).c_str(), out_fd, kTemplateDisk) != 0 ||
      ::fchmodat(out_fd, kTemplateDisk, 0400, 0) != 0)
    return fail(Error::sys("rename", (build->dir() / kSavedDisk).string()).wrap(ctx));
  uint64_t ram_bytes = 0;
  {
    UniqueFd out(::openat(out_fd, kTemplateRam, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
    if (!out) return fail(Error::sys("openat", kTemplateRam).wrap(ctx));
    ram_bytes = TRY_CTX(vm::copy_nonzero_pages(ram.get(), out.get()), ctx + ": storing its RAM");
  }
  // The command line it booted with, as start() made it: every clone must give QEMU the same.
  std::string cmdline = guest_cmdline(config_, ts.id, ts.limits.pids);
  TRY_VOID_CTX(
      vm::write_machine_file(out_fd, kTemplateMachine, {{"key", key}, {"cmdline", cmdline}}), ctx);
  if (::fchmodat(out_fd, kTemplateMachine, 0400, 0) != 0)
    return fail(Error::sys("chmod", kTemplateMachine).wrap(ctx));
  fs::path dir = TRY_CTX(build->commit(), ctx);
  auto t = std::make_shared<Template>();
  t->name = name;
  t->dir = dir;
  t->ram = std::move(ram);
  t->cmdline = std::move(cmdline);
  t->ram_bytes = ram_bytes;
  spdlog::info(
      "qemu runtime: built template {} for image {} in {} ms ({} MiB of its RAM not zeros)", name,
      spec.image.name,
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(),
      t->ram_bytes >> 20);
  return std::shared_ptr<const Template>(std::move(t));
}

Result<std::unique_ptr<Instance>> QemuRuntime::reattach(const SandboxSpec& spec,
                                                        const json& persisted) {
  std::string ctx = "reattaching VM " + spec.id;
  vm::VmmPersisted p = TRY_CTX(vm::parse_vmm_persisted(persisted), ctx);
  const CgroupLayout* layout = TRY_CTX(cgroup_layout(), ctx);
  UniqueFd pidfd = TRY_CTX(vm::find_vmm(p, vmm_needle(spec.id), "QEMU"), ctx);
  fs::path vm = spec.dir / "vm";
  if (persisted.value("vm_dir", "") != vm.string())
    return fail(Code::kInvalidArgument, ctx + ": persisted vm_dir is not ours");
  auto deadline = Clock::now() + std::chrono::seconds(5);
  UniqueFd channel = TRY_CTX(connect_port(vm / "agent.sock", pidfd.get(), deadline), ctx);
  Qmp qmp = TRY_CTX(Qmp::connect(vm / "qmp.sock", std::chrono::seconds(5)), ctx);
  json status = TRY_CTX(qmp.execute("query-status"), ctx);
  auto parts = std::make_unique<Parts>();
  TRY_VOID_CTX(vm::adopt_vmm(*parts, spec.id, p, std::move(pidfd), std::move(channel), *layout,
                             config_.cgroup_name, config_.stop_timeout),
               ctx);
  // Stopped by a pause, or by a save that the last spaced did not see to its end.
  parts->paused = status.is_object() && !status.value("running", true);
  parts->qmp.emplace(std::move(qmp));
  parts->vm_dir = vm;
  parts->disk = spec.dir / kSavedDisk;
  parts->accel = persisted.value("accel", "");
  parts->accel_note = persisted.value("accel_note", "");
  parts->template_name = persisted.value("template", "");
  return std::unique_ptr<Instance>(new QemuInstance(std::move(parts)));
}

Result<void> QemuRuntime::cleanup(const SandboxSpec& spec, const json& persisted) {
  // Nothing persisted: a create interrupted before QEMU was recorded; its cgroup still says.
  auto p = vm::parse_vmm_persisted(persisted);
  const CgroupLayout* layout = TRY_CTX(cgroup_layout(), "cleaning up VM " + spec.id);
  TRY_VOID_CTX(vm::cleanup_vmm(p ? &*p : nullptr, spec.id, vmm_needle(spec.id), "QEMU", *layout,
                               config_.cgroup_name, config_.stop_timeout),
               "cleaning up VM " + spec.id);
  return {};
}

std::string QemuRuntime::tcg_note() const {
  return "TCG emulation, correct but slow (seconds to boot, every instruction emulated): " +
         kvm_verdict().reason;
}

json QemuRuntime::doctor() const {
  auto r = usable();  // first: it may find a QEMU installed since (config_.qemu)
  json j = {{"qemu", config_.qemu.string()},
            {"kernel", config_.kernel.string()},
            {"initrd", config_.initrd.string()},
            {"accel_config", config_.accel}};
  if (!r) {
    j["available"] = false;
    j["reason"] = r.error().message();
    return j;
  }
  std::string accel = *accelerator();
  j["available"] = true;
  j["accelerator"] = accel;
  j["kvm"] = kvm_verdict().to_json();
  j["note"] = accel == "kvm" ? "microVMs run under KVM (a test boot of the guest proved it)"
                             : "microVMs run under " + tcg_note();
  if (!layout_) j["cgroups"] = layout_.error().message();
  return j;
}

}  // namespace space::runtime::qemu
