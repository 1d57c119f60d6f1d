// The firecracker runtime's recipe (firecracker_runtime.h): a jail directory holding links of
// what the VM needs -> the sandbox's cgroup -> the jailer, cloned into new pid/net/ipc/uts
// namespaces (it chroots, drops to the sandbox's uid and execs Firecracker) -> the API socket
// -> boot, or load the template's (or a saved machine's) snapshot -> the agent over vsock.
// Every step leaves a guard; a failure unwinds them and quotes Firecracker's last words. The
// steps both VM runtimes take are vm_steps.h's; the instance is vmm.h's VmmInstance over
// Firecracker's REST API.
#include "runtime/firecracker/firecracker_runtime.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>

#include "common/guard.h"
#include "common/subprocess.h"
#include "host/host_files.h"
#include "host/process.h"
#include "host/syscalls.h"
#include "runtime/firecracker/api.h"
#include "runtime/firecracker/vsock.h"
#include "runtime/kvm.h"
#include "runtime/sparse_file.h"
#include "runtime/vm_host.h"
#include "runtime/vmm.h"

namespace space::runtime::firecracker {
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using host::Cgroup;
using host::CgroupLayout;

namespace {

// Names inside a jail (its root is Firecracker's "/").
constexpr const char* kApiSock = "api.sock";
constexpr const char* kVsockSock = "v.sock";
constexpr const char* kKernel = "vmlinux";
constexpr const char* kInitrd = "initrd";
constexpr const char* kImageDisk = "image.ext4";
constexpr const char* kDisk = "disk.img";
constexpr const char* kLoadState = "load.vmstate";  // the snapshot a VM starts from
constexpr const char* kLoadMemory = "load.mem";
constexpr const char* kSnapState = "snap.vmstate";  // what save_machine has Firecracker write
constexpr const char* kSnapMemory = "snap.mem";     // full memory, diffs applied over it
constexpr const char* kSnapDiff = "snap.diff";
constexpr const char* kSnapNext = "snap.mem.next";  // a diff applied over a copy of snap.mem
// A saved machine (save_machine / restore_machine) and a template: Firecracker's VM state
// beside vm_steps.h's guest memory, writable disk and machine.json.
constexpr const char* kStateFile = "vmstate";
using vm::kSavedMachine;
using vm::kSavedMemory;

std::string in_jail(const char* name) { return std::string("/") + name; }

// Hard-links `src` into `dir_fd` as `name` (a copy, holes kept, across filesystems).
Result<void> link_or_copy(const fs::path& src, int dir_fd, const char* name) {
  if (::linkat(AT_FDCWD, src.c_str(), dir_fd, name, 0) == 0) return {};
  if (errno != EXDEV) return fail_sys("linkat", src.string());
  UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return fail_sys("open", src.string());
  UniqueFd out(::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  if (!out) return fail_sys("openat", name);
  return vm::copy_sparse(in.get(), out.get());
}

// Moves `src` into `dir_fd` as `name` (a copy across filesystems).
Result<void> move_into(const fs::path& src, int dir_fd, const char* name) {
  if (::renameat(AT_FDCWD, src.c_str(), dir_fd, name) == 0) return {};
  if (errno != EXDEV) return fail_sys("rename", src.string());
  TRY_VOID(link_or_copy(src, dir_fd, name));
  (void)::unlink(src.c_str());
  return {};
}

// Firecracker (the sandbox's uid) opens by path what is linked into its jail: read-only files
// must be readable by others. They are the host's kernel and the image's disk, which the
// sandbox sees anyway; the state directory above them stays 0700.
Result<void> ensure_world_readable(const fs::path& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return fail_sys("stat", p.string());
  if ((st.st_mode & 0004) == 0 && ::chmod(p.c_str(), (st.st_mode & 07777) | 0444) != 0)
    return fail_sys("chmod", p.string());
  return {};
}

// A regular file that Firecracker wrote in its jail, opened without following links.
Result<UniqueFd> open_jail_file(int root_fd, const char* name, int flags = O_RDONLY) {
  UniqueFd fd(::openat(root_fd, name, flags | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_sys("openat", name);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail_sys("fstat", name);
  if (!S_ISREG(st.st_mode)) return fail(Code::kProtocol, std::string(name) + " is not a file");
  return fd;
}

std::optional<RateLimiter> disk_limiter(const VmDevices& d) {
  if (!d.disk_bytes_per_s && !d.disk_ops_per_s) return std::nullopt;
  RateLimiter r;
  // Buckets refilled every second: size = the per-second budget.
  if (d.disk_bytes_per_s) r.bandwidth = TokenBucket{d.disk_bytes_per_s, 1000, std::nullopt};
  if (d.disk_ops_per_s) r.ops = TokenBucket{d.disk_ops_per_s, 1000, std::nullopt};
  return r;
}

// --- The child: between clone3 and the jailer's exec. Raw syscalls only (the daemon is
// multithreaded; the child is a copy of one thread), everything precomputed by the parent.

struct ChildPlan {
  int log_fd = -1, null_fd = -1;
  std::string exe;
  std::vector<char*> argv;
};
constexpr const char* kStepNames[] = {"wait for the cgroup", "bring up lo", "set up fds",
                                      "exec the jailer"};

void child_main(void* plan, vm::ChildPipes pipes) {
  const ChildPlan& p = *static_cast<const ChildPlan*>(plan);
  char c;
  if (::read(pipes.go_fd, &c, 1) != 1) vm::child_failed(pipes.err_fd, 0);
  // The network namespace holds only lo, where the gateway's listeners will be bound.
  if (vm::bring_up_lo_raw() != 0) vm::child_failed(pipes.err_fd, 1);
  // The jailer closes every fd above 2 itself; 1 and 2 (its and Firecracker's output, the
  // guest's serial console among it) go to the sandbox's firecracker.log.
  if (::dup2(p.null_fd, 0) < 0 || ::dup2(p.log_fd, 1) < 0 || ::dup2(p.log_fd, 2) < 0)
    vm::child_failed(pipes.err_fd, 2);
  char* envp[] = {nullptr};
  ::execve(p.exe.c_str(), p.argv.data(), envp);
  vm::child_failed(pipes.err_fd, 3);
}

// --- The instance.

struct Parts : vm::VmmParts {
  std::string jail_id;
  uint32_t uid = 0;
  UniqueFd root_fd;
  fs::path jail_dir;  // <dir>/jails/firecracker/<jail id>: removed by destroy()
  std::optional<ApiClient> api;
  bool from_template = false;
  bool has_base_memory = false;  // kSnapMemory holds the full memory of the last snapshot
  std::chrono::milliseconds snapshot_timeout{120000};
};

// Removes a jail directory: what the jailer made there (dev nodes, its copy of Firecracker)
// and what Firecracker wrote. Nothing in it is followed: remove_all deletes links themselves.
void remove_jail(const fs::path& jail_dir) {
  std::error_code e;
  fs::remove_all(jail_dir, e);
}

class FirecrackerInstance final : public vm::VmmInstance {
 public:
  explicit FirecrackerInstance(std::unique_ptr<Parts> p) : VmmInstance(*p), p_(std::move(p)) {}

  bool resumed_from_template() const override { return p_->from_template; }

  json persist() const override {
    json j = persist_base();
    j["jail_id"] = p_->jail_id;
    j["uid"] = p_->uid;
    j["from_template"] = p_->from_template;
    j["has_base_memory"] = p_->has_base_memory;
    return j;
  }

  // For the template: a full snapshot into the jail (the VM stays paused).
  Result<void> snapshot_into_jail(const char* state, const char* memory) {
    std::lock_guard lock(p_->control_mu);
    TRY_VOID(stop_locked());
    return p_->api->create_snapshot(
        {.snapshot_path = in_jail(state), .mem_file_path = in_jail(memory), .diff = false},
        p_->snapshot_timeout);
  }
  int root_fd() const { return p_->root_fd.get(); }
  void close_channel() { p_->channel.reset(); }

 protected:
  bool has_control() const override { return p_->api.has_value(); }
  void close_control() override { p_->api.reset(); }
  Result<void> vmm_stop() override { return p_->api->pause(); }
  Result<void> vmm_cont() override { return p_->api->resume(); }
  // The writable disk in the jail.
  Result<UniqueFd> open_writable_disk() override {
    return open_jail_file(p_->root_fd.get(), kDisk, O_RDONLY | O_NONBLOCK);
  }
  // Firecracker writes the VM's state and memory into the jail: a full snapshot the first
  // time, a diff (the pages dirtied since) after that, applied over a copy of the full memory
  // kept in the jail, so that every saved machine is complete on its own and none changes
  // after it was handed over. Firecracker writes only the dirty pages while the VM is stopped;
  // the copy costs a reflink on filesystems that have them (XFS, btrfs) and the memory's data
  // extents elsewhere.
  Result<void> vmm_save(int dir_fd) override {
    int root = p_->root_fd.get();
    (void)::unlinkat(root, kSnapState, 0);
    (void)::unlinkat(root, kSnapDiff, 0);
    bool diff = p_->has_base_memory;
    if (!diff) (void)::unlinkat(root, kSnapMemory, 0);
    TRY_VOID(p_->api->create_snapshot({.snapshot_path = in_jail(kSnapState),
                                       .mem_file_path = in_jail(diff ? kSnapDiff : kSnapMemory),
                                       .diff = diff},
                                      p_->snapshot_timeout));
    if (diff) {
      // Over a copy of the last full memory (a reflink where the filesystem has them), which
      // then replaces it: the previous snapshot's link to it must not change.
      UniqueFd base = TRY(open_jail_file(root, kSnapMemory));
      UniqueFd d = TRY(open_jail_file(root, kSnapDiff));
      (void)::unlinkat(root, kSnapNext, 0);
      UniqueFd next(::openat(root, kSnapNext, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!next) return fail_sys("openat", kSnapNext);
      TRY_VOID_CTX(vm::copy_sparse(base.get(), next.get()), "copying the last full memory");
      TRY_CTX(vm::apply_diff(next.get(), d.get()), "applying the diff snapshot");
      if (::renameat(root, kSnapNext, root, kSnapMemory) != 0)
        return fail_sys("renameat", kSnapNext);
      (void)::unlinkat(root, kSnapDiff, 0);
    }
    p_->has_base_memory = true;
    // Linked, not copied: the files stay as they are while the VM is paused, which it is until
    // the caller has read them.
    for (auto [from, to] : {std::pair{kSnapState, kStateFile}, std::pair{kSnapMemory, kSavedMemory},
                            std::pair{kDisk, kDisk}}) {
      UniqueFd f = TRY(open_jail_file(root, from));
      if (::linkat(f.get(), "", dir_fd, to, AT_EMPTY_PATH) != 0) return fail_sys("linkat", from);
    }
    return {};
  }
  // Firecracker is gone: so goes its jail.
  void remove_host_files() override {
    p_->root_fd.reset();
    remove_jail(p_->jail_dir);
  }

 private:
  std::unique_ptr<Parts> p_;
};

// What persist() wrote beyond the shared part.
struct Persisted {
  vm::VmmPersisted base;
  std::string jail_id;
  uint32_t uid = 0;
  bool from_template = false, has_base_memory = false;
};

Result<Persisted> parse_persisted(const json& j) {
  Persisted p;
  p.base = TRY(vm::parse_vmm_persisted(j));
  try {
    p.jail_id = j.at("jail_id").get<std::string>();
    p.uid = j.at("uid").get<uint32_t>();
    p.from_template = j.value("from_template", false);
    p.has_base_memory = j.value("has_base_memory", false);
  } catch (const json::exception& e) {
    return fail(Code::kInvalidArgument, std::string("persisted VM state: ") + e.what());
  }
  if (p.jail_id.empty() ||
      p.jail_id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    return fail(Code::kInvalidArgument, "persisted jail id is malformed");
  return p;
}

}  // namespace

// --- Pure helpers (unit-tested).

std::string jail_id(const std::string& sandbox_id) {
  std::string j = sandbox_id;
  for (char& c : j)
    if (c == '_') c = '-';
  return j;
}

std::vector<std::string> jailer_argv(const Config& config, const std::string& jail, uint32_t uid,
                                     const std::string& api_socket) {
  return {config.jailer.string(), "--id", jail, "--exec-file", config.firecracker.string(), "--uid",
          std::to_string(uid), "--gid", std::to_string(uid), "--chroot-base-dir",
          (config.dir / "jails").string(),
          // Firecracker's own file limits: the disks, sockets and eventfds of one VM.
          "--resource-limit", "no-file=1024", "--", "--api-sock", api_socket, "--level", "Warning"};
}

std::string boot_args(const Config& config, const std::string& hostname, uint32_t pids) {
  std::string ports;
  for (uint16_t p : config.egress_ports) ports += (ports.empty() ? "" : ",") + std::to_string(p);
  return "console=ttyS0 reboot=k panic=1 pci=off quiet loglevel=4 rdinit=/init "
         "space.hostname=" +
         hostname + " space.pids=" + std::to_string(pids) + " space.egress=" + ports +
         " space.channel=vsock:" + std::to_string(config.agent_port);
}

// The first "[v]MAJOR.MINOR" at the start of the text or after a blank, as the pattern
// (?:^|\s)v?(\d+)\.(\d+) finds it. Scanned by hand: std::regex cost this file ~5 s of
// compile time for one pattern.
std::optional<std::pair<int, int>> parse_version(const std::string& text) {
  auto digits_end = [&](size_t i) {
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i;
  };
  for (size_t at = 0; at < text.size(); ++at) {
    if (at > 0 && !std::isspace(static_cast<unsigned char>(text[at - 1]))) continue;
    size_t i = at + (text[at] == 'v' ? 1 : 0);
    size_t major_end = digits_end(i);
    if (major_end == i || major_end >= text.size() || text[major_end] != '.') continue;
    size_t minor_end = digits_end(major_end + 1);
    if (minor_end == major_end + 1) continue;
    int major = 0, minor = 0;
    if (std::from_chars(text.data() + i, text.data() + major_end, major).ec != std::errc() ||
        std::from_chars(text.data() + major_end + 1, text.data() + minor_end, minor).ec !=
            std::errc())
      continue;
    return std::pair{major, minor};
  }
  return std::nullopt;
}

// --- The runtime.

// How a VM starts: booted, or loaded from a snapshot whose files are linked into its jail.
struct FirecrackerRuntime::Launch {
  enum Mode { kBoot, kLoad } mode = kBoot;
  fs::path state, memory, disk;  // kLoad: the snapshot's files (disk copied, others linked)
  bool template_restore = false;
  json machine;  // what a saved machine must match (kLoad from a saved machine)
};

struct FirecrackerRuntime::Template {
  fs::path dir;  // <dir>/templates/<key>: vmstate, memory, disk.img, machine.json
};

std::string default_kvm_check(const fs::path& device) {
  return vm::kvm_non_starter(vm::gather_kvm_facts(device));
}

FirecrackerRuntime::FirecrackerRuntime(Config config)
    : config_(std::move(config)), layout_(host::detect_cgroups(config_.cgroup_root)) {
  if (auto f = vm::find_in_path(config_.firecracker)) {
    config_.firecracker = *f;
    version_ = first_output_line({config_.firecracker.string(), "--version"});
  }
  if (auto j = vm::find_in_path(config_.jailer)) config_.jailer = *j;
}

std::unique_ptr<FirecrackerRuntime> FirecrackerRuntime::create(Config config) {
  return std::unique_ptr<FirecrackerRuntime>(new FirecrackerRuntime(std::move(config)));
}

std::vector<std::string> FirecrackerRuntime::missing() const {
  std::vector<std::string> out;
  // KVM's known non-starters (a missing or unopenable node, nested PVM); Firecracker's own
  // boot of the template VM is the proof beyond them.
  if (std::string why = config_.kvm_check(config_.kvm_device); !why.empty())
    out.push_back(why + ": Firecracker needs KVM that runs a stock Linux guest");
  if (!config_.firecracker.is_absolute())
    out.push_back(config_.firecracker.string() +
                  " not found in PATH: download a release (firecracker-v1." +
                  std::to_string(kMaxMinor) +
                  ".x-x86_64.tgz from github.com/firecracker-microvm/firecracker/releases), "
                  "put firecracker and jailer in /usr/local/bin, or set vm.firecracker in "
                  "spaced's config");
  else if (auto v = parse_version(version_); !v)
    out.push_back(config_.firecracker.string() + " --version did not print a version");
  else if (v->first != 1 || v->second < kMinMinor || v->second > kMaxMinor)
    out.push_back("Firecracker " + version_ + " is not supported: use 1." +
                  std::to_string(kMinMinor) + " to 1." + std::to_string(kMaxMinor));
  if (config_.firecracker.is_absolute() &&
      config_.firecracker.filename().string().find("firecracker") == std::string::npos)
    out.push_back("the jailer execs only files whose name contains \"firecracker\": rename " +
                  config_.firecracker.string());
  if (!config_.jailer.is_absolute())
    out.push_back(config_.jailer.string() +
                  " not found in PATH: it comes in the same release archive as firecracker (same "
                  "version); or set vm.jailer in spaced's config");
  if (::geteuid() != 0)
    out.push_back(
        "spaced is not root: the jailer needs root to chroot, create device nodes "
        "and drop to each sandbox's uid");
  for (auto* p : {&config_.kernel, &config_.initrd}) {
    if (std::string why = vm::guest_file_missing(*p, p == &config_.kernel); !why.empty()) {
      out.push_back(why);
      continue;
    }
    if (p == &config_.kernel) {
      char magic[4] = {};
      std::ifstream in(*p, std::ios::binary);
      in.read(magic, 4);
      if (std::memcmp(magic,
                      "\x7f"
                      "ELF",
                      4) != 0)
        out.push_back("guest kernel " + p->string() +
                      " is not an uncompressed ELF vmlinux, which Firecracker needs on x86_64");
    }
  }
  if (!layout_) out.push_back("cgroups: " + layout_.error().message());
  return out;
}

Result<void> FirecrackerRuntime::usable() const {
  auto m = missing();
  if (m.empty()) return {};
  std::string msg = "the firecracker runtime cannot run on this host: " + m.front();
  if (m.size() > 1) msg += " (and " + std::to_string(m.size() - 1) + " more: see `space doctor`)";
  return fail(Code::kUnavailable, msg);
}

Result<const CgroupLayout*> FirecrackerRuntime::cgroup_layout() const {
  if (!layout_) return fail(Error(layout_.error()).wrap("detecting cgroups"));
  return &*layout_;
}

json FirecrackerRuntime::doctor() const {
  json j = {{"firecracker", config_.firecracker.string()},
            {"jailer", config_.jailer.string()},
            {"kernel", config_.kernel.string()},
            {"initrd", config_.initrd.string()},
            {"supported_versions",
             "1." + std::to_string(kMinMinor) + " to 1." + std::to_string(kMaxMinor)},
            {"templates", config_.templates}};
  if (!version_.empty()) j["version"] = version_;
  auto m = missing();
  j["available"] = m.empty();
  if (!m.empty()) {
    j["missing"] = m;
    j["reason"] = m.front();
  }
  std::error_code ec;
  size_t n = 0;
  for (auto it = fs::directory_iterator(config_.dir / "templates", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().front() != '.') ++n;
  j["templates_built"] = n;
  return j;
}

Result<std::unique_ptr<Instance>> FirecrackerRuntime::create(const SandboxSpec& spec) {
  std::string ctx = "starting VM " + spec.id;
  TRY_VOID_CTX(usable(), ctx);
  TRY_VOID(vm::check_vm_spec(spec, ctx));

  Launch how;
  vm::SavedMachine saved(spec.dir);  // a saved machine comes in `restore`, removed on return
  if (spec.restore_machine) {
    TRY_VOID_CTX(saved.receive(spec, {kStateFile, kSavedMemory, kDisk}, "firecracker"), ctx);
    how = {.mode = Launch::kLoad,
           .state = saved.path() / kStateFile,
           .memory = saved.path() / kSavedMemory,
           .disk = saved.path() / kDisk,
           .machine = saved.machine()};
  } else if (config_.templates) {
    Template t = TRY_CTX(ensure_template(spec), ctx + ": the image's template");
    how = {.mode = Launch::kLoad,
           .state = t.dir / kStateFile,
           .memory = t.dir / kSavedMemory,
           .disk = t.dir / kDisk,
           .template_restore = true};
  }
  return start(spec, how);
}

Result<std::unique_ptr<Instance>> FirecrackerRuntime::start(const SandboxSpec& spec,
                                                            const Launch& how) {
  std::string ctx = "starting VM " + spec.id;
  const CgroupLayout* layout = TRY_CTX(cgroup_layout(), ctx);
  StepTimes scratch;
  StepTimes& times = spec.times ? *spec.times : scratch;
  auto stop = config_.stop_timeout;
  const uint32_t uid = spec.uid_base;
  const std::string jid = jail_id(spec.id);
  const int vcpus = vm::vcpu_count(spec.limits);
  const fs::path log = spec.dir / "firecracker.log";

  // 1. The jail: the jailer makes <dir>/jails/firecracker/<id>/root and chroots there; what the
  //    VM needs is linked in before it runs (it leaves an existing directory as it is).
  fs::path jail_dir = jail_root() / jid;
  fs::path root = jail_dir / "root";
  std::error_code ec;
  fs::create_directories(jail_dir.parent_path(), ec);
  if (ec)
    return fail(Code::kInternal, ctx + ": creating " + jail_dir.string() + ": " + ec.message());
  if (::mkdir(jail_dir.c_str(), 0700) != 0 || ::mkdir(root.c_str(), 0700) != 0)
    return fail(Error::sys("mkdir", root.string()).wrap(ctx));
  Guard jail_guard([&] { remove_jail(jail_dir); });
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  UniqueFd root_dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd || !root_dir) return fail(Error::sys("open", root.string()).wrap(ctx));

  UniqueFd image_fd = TRY_CTX(vm::open_image_disk(spec.image), ctx);
  json machine = vm::describe_machine(image_fd.get(), spec.limits);
  if (how.mode == Launch::kLoad && !how.template_restore)
    TRY_VOID_CTX(vm::check_saved_machine(how.machine, machine, spec.image), ctx);
  TRY_VOID_CTX(ensure_world_readable(spec.image.vm_disk), ctx);
  TRY_VOID_CTX(link_or_copy(spec.image.vm_disk, root_dir.get(), kImageDisk), ctx);
  if (how.mode == Launch::kBoot) {
    for (auto* p : {&config_.kernel, &config_.initrd}) TRY_VOID_CTX(ensure_world_readable(*p), ctx);
    TRY_VOID_CTX(link_or_copy(config_.kernel, root_dir.get(), kKernel), ctx);
    TRY_VOID_CTX(link_or_copy(config_.initrd, root_dir.get(), kInitrd), ctx);
    TRY_VOID_CTX(vm::make_writable_disk(root / kDisk, spec.limits, spec.dir / "mke2fs.log"),
                 ctx + ": making the writable disk");
  } else {
    for (const fs::path* p : {&how.state, &how.memory}) {
      const char* name = p == &how.state ? kLoadState : kLoadMemory;
      if (how.template_restore) {
        // Shared by every sandbox of the template, root's and read-only: Firecracker maps the
        // memory file privately, so what a guest writes stays in its own pages.
        TRY_VOID_CTX(link_or_copy(*p, root_dir.get(), name), ctx);
      } else {
        TRY_VOID_CTX(move_into(*p, root_dir.get(), name), ctx);
        if (::fchownat(root_dir.get(), name, uid, uid, AT_SYMLINK_NOFOLLOW) != 0)
          return fail(Error::sys("chown", name).wrap(ctx));
      }
    }
    // The template's disk is copied (holes kept, a reflink where the filesystem can): each
    // sandbox writes its own.
    if (how.template_restore) {
      TRY_VOID_CTX(vm::copy_template_disk(how.disk, root_dir.get(), kDisk), ctx);
    } else {
      TRY_VOID_CTX(move_into(how.disk, root_dir.get(), kDisk), ctx);
    }
  }
  if (::fchownat(root_dir.get(), kDisk, uid, uid, AT_SYMLINK_NOFOLLOW) != 0 ||
      ::fchmodat(root_dir.get(), kDisk, 0600, 0) != 0)
    return fail(Error::sys("chown", kDisk).wrap(ctx));
  times.mark("jail");

  // 2. A fresh cgroup: the sandbox's CPU limit; its memory plus Firecracker's own; the jailer's,
  //    Firecracker's API, VMM and vCPU threads.
  std::unique_ptr<Cgroup> cgroup = TRY_CTX(
      vm::make_vmm_cgroup(*layout, config_.cgroup_name, spec, config_.overhead_bytes, 64), ctx);
  Guard cgroup_guard([&] { vm::remove_vmm_cgroup(*cgroup, stop); });
  times.mark("cgroup");

  // 3. The jailer, in new pid (it and Firecracker die with the namespace's init), network,
  //    ipc, uts and cgroup namespaces; it makes its own mount namespace and chroot.
  std::vector<std::string> argv = jailer_argv(config_, jid, uid, in_jail(kApiSock));
  ChildPlan plan;
  plan.exe = config_.jailer.string();
  for (auto& a : argv) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  vm::ChildStdio stdio = TRY_CTX(vm::open_child_stdio(log), ctx);
  plan.log_fd = stdio.log.get();
  plan.null_fd = stdio.null.get();
  vm::LaunchedVmm launched = TRY_CTX(
      vm::launch_vmm(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP,
                     *cgroup, child_main, &plan, kStepNames, std::size(kStepNames), "the jailer",
                     stop),
      ctx);
  const int pidfd = launched.pidfd.get();
  Guard child_guard([&] { (void)host::kill_and_reap(pidfd, true, stop); });
  times.mark("exec");

  // 4. The API: configure and boot, or load the snapshot; then the agent over vsock.
  auto deadline = Clock::now() + config_.boot_timeout;
  auto vm_failed = [&](Error e) {
    std::string msg = e.message();
    return Error(e.code(), ctx + ": " + msg +
                               "; Firecracker and the guest console said:" + vm::tail_of(log, 12));
  };
  auto api_fd = connect_jailed(root_fd.get(), kApiSock, uid, deadline, pidfd);
  if (!api_fd) return fail(vm_failed(std::move(api_fd.error())));
  ApiClient api(std::move(*api_fd));
  times.mark("api up");
  auto configure = [&]() -> Result<void> {
    if (how.mode == Launch::kBoot) {
      TRY_VOID(api.put_machine_config({.vcpu_count = vcpus,
                                       .mem_size_mib = spec.limits.memory_bytes >> 20,
                                       .smt = false,
                                       .track_dirty_pages = true}));
      TRY_VOID(api.put_boot_source({.kernel_image_path = in_jail(kKernel),
                                    .initrd_path = in_jail(kInitrd),
                                    .boot_args = boot_args(config_, spec.id, spec.limits.pids)}));
      TRY_VOID(api.put_drive({.drive_id = "image",
                              .path_on_host = in_jail(kImageDisk),
                              .is_root_device = false,
                              .is_read_only = true}));
      TRY_VOID(api.put_drive({.drive_id = "disk",
                              .path_on_host = in_jail(kDisk),
                              .is_root_device = false,
                              .is_read_only = false,
                              .rate_limiter = disk_limiter(spec.vm)}));
      TRY_VOID(api.put_vsock({.guest_cid = 3, .uds_path = in_jail(kVsockSock)}));
      TRY_VOID(api.put_entropy());
      if (spec.vm.balloon)
        TRY_VOID(api.put_balloon(
            {.amount_mib = 0, .deflate_on_oom = true, .stats_polling_interval_s = 5}));
      return api.instance_start();
    }
    TRY_VOID(api.load_snapshot({.snapshot_path = in_jail(kLoadState),
                                .mem_file_path = in_jail(kLoadMemory),
                                .uffd = false,
                                .track_dirty_pages = true,
                                .resume_vm = true},
                               config_.snapshot_timeout));
    // The template's drive has no limits of its own: this sandbox's profile sets them.
    if (auto rl = disk_limiter(spec.vm); rl && how.template_restore)
      TRY_VOID(api.patch_drive("disk", std::nullopt, rl));
    return {};
  };
  if (auto r = configure(); !r) return fail(vm_failed(std::move(r.error())));
  times.mark(how.mode == Launch::kBoot ? "boot" : "snapshot loaded");
  auto channel = vsock_connect(root_fd.get(), kVsockSock, config_.agent_port, uid, deadline, pidfd);
  if (!channel)
    return fail(vm_failed(std::move(channel.error()).wrap("reaching the agent over vsock")));
  times.mark("agent");
  if (how.mode == Launch::kLoad) {
    // The loaded files are no longer needed by name: Firecracker has them mapped or parsed.
    (void)::unlinkat(root_dir.get(), kLoadState, 0);
  }

  auto parts = std::make_unique<Parts>();
  vm::take_launched(*parts, spec.id, std::move(launched), std::move(*channel), std::move(cgroup),
                    std::move(machine), stop);
  parts->jail_id = jid;
  parts->uid = uid;
  parts->root_fd = std::move(root_dir);
  parts->jail_dir = jail_dir;
  parts->api.emplace(std::move(api));
  parts->from_template = how.template_restore;
  parts->snapshot_timeout = config_.snapshot_timeout;
  child_guard.dismiss();
  cgroup_guard.dismiss();
  jail_guard.dismiss();
  return std::unique_ptr<Instance>(new FirecrackerInstance(std::move(parts)));
}

// A template is one booted VM, snapshotted as soon as its agent listens, per everything that
// is baked into it: the kernel and initramfs, the image disk, RAM, vCPUs, the writable disk's
// size, the pids limit, egress ports, the balloon and the Firecracker release.
Result<FirecrackerRuntime::Template> FirecrackerRuntime::ensure_template(const SandboxSpec& spec) {
  auto ident = [](const fs::path& p) {
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    return fd ? vm::disk_identity(fd.get()) : json(nullptr);
  };
  json key = {{"kernel", ident(config_.kernel)},
              {"initrd", ident(config_.initrd)},
              {"image", spec.image.name},
              {"image_disk", ident(spec.image.vm_disk)},
              {"memory_bytes", spec.limits.memory_bytes},
              {"vcpus", vm::vcpu_count(spec.limits)},
              {"disk_bytes", spec.limits.disk_bytes},
              {"disk_inodes", spec.limits.disk_inodes},
              {"pids", spec.limits.pids},
              {"egress_ports", config_.egress_ports},
              {"agent_port", config_.agent_port},
              {"balloon", spec.vm.balloon},
              {"firecracker", version_}};
  char name[32];
  std::snprintf(name, sizeof name, "%016zx", std::hash<std::string>{}(key.dump()));
  fs::path dir = config_.dir / "templates" / name;
  std::shared_ptr<std::mutex> lock = template_locks_.get(name);
  std::lock_guard g(*lock);
  if (UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d) {
    auto m = vm::read_machine_file(d.get(), kSavedMachine);
    if (m && (*m)["key"] == key) return Template{dir};
    std::error_code e;
    fs::remove_all(dir, e);  // stale (an older build); a hash collision ends here too
  }

  // Boot the template VM: a sandbox of its own, with this sandbox's uid range (not in use yet).
  auto build = TRY(vm::TemplateBuild::begin(config_.dir / "templates", name, 0755));
  SandboxSpec ts = vm::template_spec(spec, name, build->dir());
  ts.vm.disk_bytes_per_s = ts.vm.disk_ops_per_s = 0;  // each sandbox's profile sets its own
  auto inst = start(ts, Launch{});
  if (!inst) return fail(std::move(inst.error()).wrap("booting the template VM"));
  auto* vmi = static_cast<FirecrackerInstance*>(inst->get());
  Guard vm_guard([&] { (void)vmi->destroy(); });
  // The agent accepted the connection: it is up. Letting it go before the snapshot leaves the
  // agent listening, as every restored copy needs it.
  vmi->close_channel();
  TRY_VOID_CTX(vmi->snapshot_into_jail(kSnapState, kSnapMemory), "snapshotting the template VM");
  UniqueFd root_fd(::fcntl(vmi->root_fd(), F_DUPFD_CLOEXEC, 3));
  if (!root_fd) return fail_sys("fcntl", "F_DUPFD_CLOEXEC");
  // The files are linked out while the VM is paused, then Firecracker is killed (destroy()
  // also removes its jail) before they become root's: it runs as the sandbox's uid and could
  // otherwise still write them.
  std::vector<std::pair<const char*, const char*>> files = {
      {kSnapState, kStateFile}, {kSnapMemory, kSavedMemory}, {kDisk, kDisk}};
  std::vector<UniqueFd> fds;
  for (auto [from, to] : files) {
    fds.push_back(TRY(open_jail_file(root_fd.get(), from)));
    if (::linkat(fds.back().get(), "", build->out_fd(), to, AT_EMPTY_PATH) != 0)
      return fail_sys("linkat", to);
  }
  TRY_VOID_CTX(vmi->destroy(), "stopping the template VM");
  // Root's and read-only from now on (the VM that wrote them is gone); each sandbox's
  // Firecracker reads them through links.
  for (size_t i = 0; i < files.size(); ++i)
    if (::fchown(fds[i].get(), 0, 0) != 0 || ::fchmod(fds[i].get(), 0444) != 0)
      return fail_sys("fchown", files[i].second);
  TRY_VOID(vm::write_machine_file(build->out_fd(), kSavedMachine, {{"key", key}}));
  return Template{TRY(build->commit())};
}

Result<std::unique_ptr<Instance>> FirecrackerRuntime::reattach(const SandboxSpec& spec,
                                                               const json& persisted) {
  std::string ctx = "reattaching VM " + spec.id;
  Persisted p = TRY_CTX(parse_persisted(persisted), ctx);
  if (p.jail_id != jail_id(spec.id))
    return fail(Code::kInvalidArgument, ctx + ": persisted jail is not this sandbox's");
  const CgroupLayout* layout = TRY_CTX(cgroup_layout(), ctx);
  UniqueFd pidfd = TRY_CTX(vm::find_vmm(p.base, p.jail_id, "Firecracker"), ctx);
  fs::path jail_dir = jail_root() / p.jail_id;
  UniqueFd root_fd(::open((jail_dir / "root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) return fail(Error::sys("open", (jail_dir / "root").string()).wrap(ctx));
  auto deadline = Clock::now() + std::chrono::seconds(5);
  ApiClient api(
      TRY_CTX(connect_jailed(root_fd.get(), kApiSock, p.uid, deadline, pidfd.get()), ctx));
  InstanceInfo info = TRY_CTX(api.describe(), ctx);
  UniqueFd channel = TRY_CTX(
      vsock_connect(root_fd.get(), kVsockSock, config_.agent_port, p.uid, deadline, pidfd.get()),
      ctx);
  auto parts = std::make_unique<Parts>();
  TRY_VOID_CTX(vm::adopt_vmm(*parts, spec.id, p.base, std::move(pidfd), std::move(channel), *layout,
                             config_.cgroup_name, config_.stop_timeout),
               ctx);
  parts->jail_id = p.jail_id;
  parts->uid = p.uid;
  parts->root_fd = std::move(root_fd);
  parts->jail_dir = jail_dir;
  parts->paused = info.state == "Paused";
  parts->api.emplace(std::move(api));
  parts->from_template = p.from_template;
  parts->has_base_memory = p.has_base_memory;
  parts->snapshot_timeout = config_.snapshot_timeout;
  return std::unique_ptr<Instance>(new FirecrackerInstance(std::move(parts)));
}

Result<void> FirecrackerRuntime::cleanup(const SandboxSpec& spec, const json& persisted) {
  std::string ctx = "cleaning up VM " + spec.id;
  // Whatever the state, this sandbox's jail goes (it is named after the sandbox).
  Guard jail_guard([&] { remove_jail(jail_root() / jail_id(spec.id)); });
  // Nothing persisted: a create interrupted before Firecracker was recorded; its cgroup says.
  auto p = parse_persisted(persisted);
  const CgroupLayout* layout = TRY_CTX(cgroup_layout(), ctx);
  TRY_VOID_CTX(vm::cleanup_vmm(p ? &p->base : nullptr, spec.id, p ? p->jail_id : jail_id(spec.id),
                               "Firecracker", *layout, config_.cgroup_name, config_.stop_timeout),
               ctx);
  return {};
}

fs::path FirecrackerRuntime::jail_root() const {
  // The jailer's layout: <chroot base>/<exec file's name>/<id>.
  return config_.dir / "jails" / config_.firecracker.filename();
}

}  // namespace space::runtime::firecracker
