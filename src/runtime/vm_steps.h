// The steps of starting a microVM that the qemu and firecracker runtimes both take, written
// once; each runtime's start() is a recipe of these and of its VMM's own steps (QEMU's jail and
// QMP, Firecracker's jailer and REST API):
//
//   (guest_file_missing: can it boot at all) -> check_vm_spec -> SavedMachine::receive (a
//   restore) -> the writable disk (make_writable_disk, copy_template_disk) -> open_image_disk
//   and describe_machine / check_saved_machine -> make_vmm_cgroup -> open_child_stdio and
//   launch_vmm (vmm.h) -> the VMM's control connection and the agent's channel ->
//   take_launched into the instance's VmmParts.
//
// A template VM is a sandbox of its own (template_spec) in a TemplateBuild, built once per key
// under a lock of that key (KeyedMutexes). What a running VM's instance shares (pause, resume,
// reading its disk, saving it, destroying it) is VmmInstance's (vmm.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "host/cgroup.h"
#include "runtime/runtime.h"
#include "runtime/vmm.h"

namespace space::runtime::vm {

// The smallest VM a sandbox may ask for.
inline constexpr uint64_t kMinMemory = 128ull << 20;
inline constexpr uint64_t kMinDisk = 16ull << 20;

// A saved machine's files (Instance::save_machine, SandboxSpec::restore_machine) that both
// runtimes write: the guest memory, the writable disk, and machine.json (describe_machine) with
// what the machine may resume on. Each VMM adds its own (Firecracker's VM state).
inline constexpr const char* kSavedMemory = "memory";
inline constexpr const char* kSavedDisk = "disk.img";
inline constexpr const char* kSavedMachine = "machine.json";

// Why the guest kernel (`kernel` true) or initramfs at `path` cannot boot a VM (not configured,
// not readable) and how to get one; "" when it is there.
std::string guest_file_missing(const std::filesystem::path& path, bool kernel);

// What every VM needs of its spec: no writable layer to fill (a VM restores whole machines),
// an image with a VM disk, at least kMinMemory and kMinDisk. `ctx` leads each error.
Result<void> check_vm_spec(const SandboxSpec& spec, const std::string& ctx);

// The VM's vCPUs: the sandbox's CPU limit rounded up, at least one.
int vcpu_count(const Limits& limits);

// The image's VM disk, read-only.
Result<UniqueFd> open_image_disk(const Image& image);

// machine.json of a sandbox's VM: the identity of the image disk it runs on (`image_fd`), its
// memory and vCPUs. A saved machine resumes only where this is the same.
nlohmann::json describe_machine(int image_fd, const Limits& limits);

// kConflict (vm_host.h's image_changed) unless the saved machine's description is this
// machine's; the memory's layout ("ram", qemu's) is not compared.
Result<void> check_saved_machine(nlohmann::json saved, nlohmann::json mine, const Image& image);

// A saved machine to restore from, received into <sandbox dir>/restore (removed with this
// object, once receive() made it).
class SavedMachine {
 public:
  explicit SavedMachine(const std::filesystem::path& sandbox_dir);
  ~SavedMachine();
  SavedMachine(const SavedMachine&) = delete;
  SavedMachine& operator=(const SavedMachine&) = delete;

  // Makes the directory (0700), has spec.restore_machine fill it and checks that it holds
  // `files` as regular files and a readable kSavedMachine: kProtocol ("it is not a <runtime>
  // snapshot") otherwise.
  Result<void> receive(const SandboxSpec& spec, std::initializer_list<const char*> files,
                       const char* runtime);

  const std::filesystem::path& path() const { return path_; }
  int dir_fd() const { return dir_.get(); }
  const nlohmann::json& machine() const { return machine_; }

 private:
  std::filesystem::path path_;
  UniqueFd dir_;
  nlohmann::json machine_;
  bool made_ = false;
};

// A template's writable disk, copied as the new file `name` (0600) in `dir_fd` (AT_FDCWD: a
// path): holes kept, a reflink where the filesystem can. Each sandbox writes its own.
Result<void> copy_template_disk(const std::filesystem::path& from, int dir_fd, const char* name);

// The sandbox's cgroup, fresh, for the VMM: the sandbox's CPU limit, its memory plus the VMM's
// own `overhead`, and `pids` tasks for the VMM's threads. remove_vmm_cgroup undoes it.
Result<std::unique_ptr<host::Cgroup>> make_vmm_cgroup(const host::CgroupLayout& layout,
                                                      const std::string& cgroup_name,
                                                      const SandboxSpec& spec, uint64_t overhead,
                                                      uint32_t pids);
// Kills everything in `cgroup`, waits until it is empty and removes it.
void remove_vmm_cgroup(host::Cgroup& cgroup, std::chrono::milliseconds stop);

// The VMM's stdin (/dev/null) and its stdout and stderr: `log`, appended to (0600).
struct ChildStdio {
  UniqueFd null, log;
};
Result<ChildStdio> open_child_stdio(const std::filesystem::path& log);

// Hands a started VM's shared parts to its instance: the launched VMM, the agent's channel, the
// cgroup and machine.json.
void take_launched(VmmParts& parts, const std::string& id, LaunchedVmm launched, UniqueFd channel,
                   std::unique_ptr<host::Cgroup> cgroup, nlohmann::json machine,
                   std::chrono::milliseconds stop_timeout);

// The spec of the template VM `name` built in `dir` for `spec`'s image and limits: a sandbox of
// its own ("tpl_<name>", with `spec`'s uid range, not in use yet) that boots.
SandboxSpec template_spec(const SandboxSpec& spec, const std::string& name,
                          const std::filesystem::path& dir);

// A template being built under `templates` (the runtime's template directory): a fresh
// .build-<name> (0700), the template VM's sandbox directory, removed with this object, and in it
// `template` (`mode`), which the runtime fills and commit() renames to <templates>/<name>.
class TemplateBuild {
 public:
  static Result<std::unique_ptr<TemplateBuild>> begin(const std::filesystem::path& templates,
                                                      const std::string& name, mode_t mode);
  ~TemplateBuild();
  TemplateBuild(const TemplateBuild&) = delete;
  TemplateBuild& operator=(const TemplateBuild&) = delete;

  const std::filesystem::path& dir() const { return build_; }  // the template VM's spec.dir
  int out_fd() const { return out_fd_.get(); }                 // `template`, to fill
  // Renames `template` to <templates>/<name>, which is returned.
  Result<std::filesystem::path> commit();

 private:
  TemplateBuild(std::filesystem::path templates, const std::string& name);
  std::filesystem::path final_, build_, out_;
  UniqueFd out_fd_;
};

// One mutex per key (a template's name), made on first use and kept: a template is built once,
// the other creates that need it wait for it.
class KeyedMutexes {
 public:
  std::shared_ptr<std::mutex> get(const std::string& key);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::mutex>> locks_;
};

}  // namespace space::runtime::vm
