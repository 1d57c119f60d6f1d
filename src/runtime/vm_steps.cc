// The microVM runtimes' shared start steps; see vm_steps.h.
#include "runtime/vm_steps.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "runtime/sparse_file.h"
#include "runtime/vm_host.h"

namespace space::runtime::vm {
namespace fs = std::filesystem;
using nlohmann::json;

std::string guest_file_missing(const fs::path& path, bool kernel) {
  if (!path.empty() && ::access(path.c_str(), R_OK) == 0) return {};
  return std::string("guest ") + (kernel ? "kernel" : "initramfs") + " " +
         (path.empty() ? std::string("not configured") : path.string() + " not found") +
         ": build it with `make` (scripts/guest-kernel.sh) or set vm.kernel and vm.initrd in "
         "spaced's config (docs/vm-guest.md)";
}

Result<void> check_vm_spec(const SandboxSpec& spec, const std::string& ctx) {
  if (spec.populate_upper)
    return fail(Code::kUnimplemented,
                ctx +
                    ": a VM's files are on its own disk: it restores whole machines "
                    "(restore_machine), not writable layers");
  if (spec.image.vm_disk.empty())
    return fail(Code::kConflict, ctx + ": image \"" + spec.image.name +
                                     "\" has no VM disk yet: run `space image "
                                     "build-vm " +
                                     spec.image.name + "` first (docs/vm-guest.md)");
  if (spec.limits.memory_bytes < kMinMemory)
    return fail(Code::kInvalidArgument, ctx + ": --memory must be at least 128M for a VM");
  if (spec.limits.disk_bytes < kMinDisk)
    return fail(Code::kInvalidArgument, ctx + ": --disk must be at least 16M for a VM");
  return {};
}

int vcpu_count(const Limits& limits) {
  return std::max(1, static_cast<int>(std::ceil(limits.cpus)));
}

Result<UniqueFd> open_image_disk(const Image& image) {
  UniqueFd fd(::open(image.vm_disk.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_sys("open", image.vm_disk.string());
  return fd;
}

json describe_machine(int image_fd, const Limits& limits) {
  return {{"image_disk", disk_identity(image_fd)},
          {"memory_bytes", limits.memory_bytes},
          {"vcpus", vcpu_count(limits)}};
}

Result<void> check_saved_machine(json saved, json mine, const Image& image) {
  if (saved.is_object()) saved.erase("ram");
  if (mine.is_object()) mine.erase("ram");
  if (saved != mine) return fail(Code::kConflict, image_changed(image.name));
  return {};
}

SavedMachine::SavedMachine(const fs::path& sandbox_dir) : path_(sandbox_dir / "restore") {}

SavedMachine::~SavedMachine() {
  dir_.reset();
  std::error_code e;
  if (made_) fs::remove_all(path_, e);
}

Result<void> SavedMachine::receive(const SandboxSpec& spec,
                                   std::initializer_list<const char*> files, const char* runtime) {
  if (::mkdir(path_.c_str(), 0700) != 0) return fail_sys("mkdir", path_.string());
  made_ = true;
  dir_.reset(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_) return fail_sys("open", path_.string());
  TRY_VOID_CTX(spec.restore_machine(dir_.get()), "restoring the saved machine");
  const std::string not_ours = std::string(": it is not a ") + runtime + " snapshot";
  struct stat st;
  for (const char* f : files)
    if (::fstatat(dir_.get(), f, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      return fail(Code::kProtocol, std::string("the saved machine has no ") + f + not_ours);
  auto m = read_machine_file(dir_.get(), kSavedMachine);
  if (!m)
    return fail(Code::kProtocol,
                std::string("the saved machine has no readable ") + kSavedMachine + not_ours);
  machine_ = std::move(*m);
  return {};
}

Result<void> copy_template_disk(const fs::path& from, int dir_fd, const char* name) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return fail_sys("open", from.string());
  UniqueFd out(::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return fail_sys("open", name);
  TRY_VOID_CTX(copy_sparse(in.get(), out.get()), "copying the template's disk");
  return {};
}

Result<std::unique_ptr<host::Cgroup>> make_vmm_cgroup(const host::CgroupLayout& layout,
                                                      const std::string& cgroup_name,
                                                      const SandboxSpec& spec, uint64_t overhead,
                                                      uint32_t pids) {
  Limits limits = spec.limits;
  limits.memory_bytes += overhead;
  limits.pids = pids;
  return host::Cgroup::create(layout, cgroup_name, spec.id, limits);
}

void remove_vmm_cgroup(host::Cgroup& cgroup, std::chrono::milliseconds stop) {
  cgroup.kill_all();
  (void)cgroup.wait_empty(stop);
  (void)cgroup.remove();
}

Result<ChildStdio> open_child_stdio(const fs::path& log) {
  ChildStdio s;
  s.null.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!s.null) return fail_sys("open", "/dev/null");
  s.log.reset(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!s.log) return fail_sys("open", log.string());
  return s;
}

void take_launched(VmmParts& parts, const std::string& id, LaunchedVmm launched, UniqueFd channel,
                   std::unique_ptr<host::Cgroup> cgroup, json machine,
                   std::chrono::milliseconds stop_timeout) {
  parts.id = id;
  parts.pid = launched.pid;
  parts.start_time = launched.start_time;
  parts.pidfd = std::move(launched.pidfd);
  parts.netns = std::move(launched.netns);
  parts.channel = std::move(channel);
  parts.cgroup = std::move(cgroup);
  parts.machine = std::move(machine);
  parts.stop_timeout = stop_timeout;
}

SandboxSpec template_spec(const SandboxSpec& spec, const std::string& name, const fs::path& dir) {
  SandboxSpec ts = spec;
  ts.id = "tpl_" + name;
  ts.dir = dir;
  ts.times = nullptr;
  ts.restore_machine = nullptr;
  return ts;
}

TemplateBuild::TemplateBuild(fs::path templates, const std::string& name)
    : final_(templates / name), build_(templates / (".build-" + name)), out_(build_ / "template") {}

Result<std::unique_ptr<TemplateBuild>> TemplateBuild::begin(const fs::path& templates,
                                                            const std::string& name, mode_t mode) {
  std::unique_ptr<TemplateBuild> b(new TemplateBuild(templates, name));
  std::error_code ec;
  fs::remove_all(b->build_, ec);  // a build that an earlier spaced did not finish
  fs::create_directories(templates, ec);
  if (ec) return fail(Code::kInternal, "creating " + templates.string() + ": " + ec.message());
  if (::mkdir(b->build_.c_str(), 0700) != 0) return fail_sys("mkdir", b->build_.string());
  if (::mkdir(b->out_.c_str(), mode) != 0 || ::chmod(b->out_.c_str(), mode) != 0)
    return fail_sys("mkdir", b->out_.string());
  b->out_fd_.reset(::open(b->out_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!b->out_fd_) return fail_sys("open", b->out_.string());
  return b;
}

TemplateBuild::~TemplateBuild() {
  out_fd_.reset();
  std::error_code e;
  fs::remove_all(build_, e);
}

Result<fs::path> TemplateBuild::commit() {
  if (::rename(out_.c_str(), final_.c_str()) != 0) return fail_sys("rename", final_.string());
  return final_;
}

std::shared_ptr<std::mutex> KeyedMutexes::get(const std::string& key) {
  std::lock_guard g(mu_);
  auto& l = locks_[key];
  if (!l) l = std::make_shared<std::mutex>();
  return l;
}

}  // namespace space::runtime::vm
