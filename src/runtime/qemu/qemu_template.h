// Templates of the qemu runtime (docs/qemu-runtime.md, "Templates"): one booted machine per
// (image disk, kernel, initramfs, QEMU, accelerator, limits), stopped where its agent waits for
// the daemon, from which every sandbox is cloned.
//
// On disk, root's and read-only, in <template_dir>/<name>/:
//   state         QEMU's migration stream without the RAM (`x-ignore-shared`): device state
//   ram           the guest's RAM as the template left it (sparse)
//   disk.img      the writable disk as it was when the machine stopped
//   machine.json  {"key": what it was made from, "cmdline": the guest kernel's command line}
// In memory, the RAM is a memfd (all of it allocated) sealed against writes, growth and shrinking
// (F_SEAL_WRITE, F_SEAL_GROW, F_SEAL_SHRINK, F_SEAL_SEAL): each clone's QEMU maps it privately, so
// its writes land in its own copied pages, and no QEMU can change what the other clones see — not
// by write(), a shared mapping, fallocate or ftruncate.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "runtime/qemu/qemu_runtime.h"

namespace space::runtime::qemu {

struct QemuRuntime::Template {
  std::string name;           // the key's hash: the directory's name
  std::filesystem::path dir;  // <template_dir>/<name>
  UniqueFd ram;               // the sealed memfd
  std::string cmdline;        // the guest kernel's command line the template booted with
  uint64_t ram_bytes = 0;     // bytes of its RAM that are not zeros
};

// The files of a template directory.
inline constexpr const char* kTemplateState = "state";
inline constexpr const char* kTemplateRam = "ram";
inline constexpr const char* kTemplateDisk = "disk.img";
inline constexpr const char* kTemplateMachine = "machine.json";

// What a template is made from: the identities of the kernel, initramfs, QEMU and image disk
// (a rebuild is a new file), the accelerator, and every limit the guest booted with.
nlohmann::json template_key(const Config& config, const SandboxSpec& spec,
                            const std::string& accel);
// The key's name: 16 hex digits of its hash.
std::string template_name(const nlohmann::json& key);

// A memfd of `bytes` for a template's RAM, sealable, zeros, every page allocated (charged to
// spaced's memory cgroup).
Result<UniqueFd> new_template_ram(uint64_t bytes);
// Seals `ram` (nothing may map it writable shared any more: the template's QEMU is gone).
Result<void> seal_template_ram(int ram);

// Loads the template in `dir` if its machine.json holds `key`: its RAM into a sealed memfd.
// nullptr when there is none or it was made from something else.
Result<std::shared_ptr<QemuRuntime::Template>> load_template(const std::filesystem::path& dir,
                                                             const nlohmann::json& key);

// Removes the templates under `root` that no create can use any more: made from another
// kernel, initramfs or QEMU than `current`'s, from an image disk that is gone, or from an older
// disk of `current`'s image; then the least recently used (machine.json's mtime, which a
// load or build sets) beyond `keep`, the one for `current` never. Half-built ones (.build-*)
// are their builders' to remove.
void prune_templates(const std::filesystem::path& root, const nlohmann::json& current, size_t keep);

}  // namespace space::runtime::qemu
