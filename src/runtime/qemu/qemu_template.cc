// Templates of the qemu runtime: their keys, their sealed RAM, loading and pruning; see
// qemu_template.h. Booting and saving one is QemuRuntime::build_template (qemu_runtime.cc).
#include "runtime/qemu/qemu_template.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/sparse_file.h"
#include "runtime/vm_host.h"

namespace space::runtime::qemu {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json identity_of(const fs::path& p) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  return fd ? vm::disk_identity(fd.get()) : json(nullptr);
}

}  // namespace

json template_key(const Config& config, const SandboxSpec& spec, const std::string& accel) {
  return {{"kernel", identity_of(config.kernel)},
          {"initrd", identity_of(config.initrd)},
          {"qemu", identity_of(config.qemu)},
          {"accel", accel},
          {"image", spec.image.name},
          {"image_disk_path", spec.image.vm_disk.string()},
          {"image_disk", identity_of(spec.image.vm_disk)},
          {"memory_bytes", spec.limits.memory_bytes},
          {"vcpus", std::max(1, static_cast<int>(std::ceil(spec.limits.cpus)))},
          {"disk_bytes", spec.limits.disk_bytes},
          {"disk_inodes", spec.limits.disk_inodes},
          {"pids", spec.limits.pids},
          {"egress_ports", config.egress_ports}};
}

std::string template_name(const json& key) {
  char name[32];
  std::snprintf(name, sizeof name, "%016zx", std::hash<std::string>{}(key.dump()));
  return name;
}

Result<UniqueFd> new_template_ram(uint64_t bytes) {
  UniqueFd fd(::memfd_create("space-qemu-template", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return fail_sys("memfd_create", "a template's RAM");
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return fail_sys("ftruncate", "a template's RAM");
  // Every page allocated now, once: a clone's fault on a hole of a privately mapped memfd would
  // allocate the memfd's page (unswappable, charged to that clone's cgroup and kept after it)
  // besides its own copy, so a clone whose guest touches all of its RAM would be charged up to
  // twice its memory and OOM-killed.
  if (::fallocate(fd.get(), 0, 0, static_cast<off_t>(bytes)) != 0)
    return fail_sys("fallocate", "a template's RAM (" + std::to_string(bytes >> 20) + " MiB)");
  return fd;
}

Result<void> seal_template_ram(int ram) {
  // F_SEAL_WRITE fails with EBUSY while a shared writable mapping exists: the template's QEMU
  // must be gone.
  if (::fcntl(ram, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return fail_sys("fcntl", "F_ADD_SEALS on a template's RAM");
  return {};
}

Result<std::shared_ptr<QemuRuntime::Template>> load_template(const fs::path& dir, const json& key) {
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) return std::shared_ptr<QemuRuntime::Template>();
  auto m = vm::read_machine_file(d.get(), kTemplateMachine);
  if (!m || (*m)["key"] != key || !(*m)["cmdline"].is_string())
    return std::shared_ptr<QemuRuntime::Template>();
  struct stat st;
  for (const char* f : {kTemplateState, kTemplateDisk, kTemplateRam})
    if (::fstatat(d.get(), f, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      return std::shared_ptr<QemuRuntime::Template>();
  UniqueFd file(::openat(d.get(), kTemplateRam, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!file) return fail_sys("openat", (dir / kTemplateRam).string());
  if (::fstat(file.get(), &st) != 0) return fail_sys("fstat", (dir / kTemplateRam).string());
  if (static_cast<uint64_t>(st.st_size) != key.value("memory_bytes", uint64_t{0}))
    return std::shared_ptr<QemuRuntime::Template>();  // not this machine's RAM
  // A fresh memfd: holes stay holes (zero pages cost nothing until a clone reads them).
  UniqueFd ram = TRY(new_template_ram(static_cast<uint64_t>(st.st_size)));
  TRY_VOID_CTX(vm::copy_sparse(file.get(), ram.get()), "loading the template's RAM");
  TRY_VOID(seal_template_ram(ram.get()));
  auto t = std::make_shared<QemuRuntime::Template>();
  t->dir = dir;
  t->name = dir.filename().string();
  t->ram = std::move(ram);
  t->cmdline = (*m)["cmdline"].get<std::string>();
  t->ram_bytes = static_cast<uint64_t>(st.st_blocks) * 512;  // what the guest had written
  (void)::utimensat(d.get(), kTemplateMachine, nullptr, 0);  // used now (prune_templates)
  return t;
}

void prune_templates(const fs::path& root, const json& current, size_t keep) {
  std::error_code ec;
  auto remove = [](const fs::path& dir, const char* why) {
    std::error_code e;
    fs::remove_all(dir, e);
    if (e)
      spdlog::warn("removing the VM template {} ({}): {}", dir.string(), why, e.message());
    else
      spdlog::info("removed the VM template {} ({})", dir.string(), why);
  };
  std::vector<std::pair<fs::file_time_type, fs::path>> kept;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(".")) continue;  // a build in progress: its builder's
    UniqueFd d(::open(e.path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    json key = nullptr;
    if (d)
      if (auto m = vm::read_machine_file(d.get(), kTemplateMachine); m) key = (*m)["key"];
    bool stale = !key.is_object();
    if (!stale) {
      for (const char* k : {"kernel", "initrd", "qemu"})
        if (key[k] != current[k]) stale = true;
      std::string disk = key.value("image_disk_path", "");
      if (disk.empty() || ::access(disk.c_str(), F_OK) != 0) stale = true;
      if (key["image_disk_path"] == current["image_disk_path"] &&
          key["image_disk"] != current["image_disk"])
        stale = true;
    }
    if (stale) {
      remove(e.path(), "stale");
    } else if (name != template_name(current)) {
      std::error_code e2;
      kept.emplace_back(fs::last_write_time(e.path() / kTemplateMachine, e2), e.path());
    }
  }
  // Newest first; the current key's is not in `kept` and counts as one of `keep`.
  std::sort(kept.begin(), kept.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = keep > 0 ? keep - 1 : 0; i < kept.size(); ++i)
    remove(kept[i].second, "least recently used");
}

}  // namespace space::runtime::qemu
