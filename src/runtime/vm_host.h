// Host-side helpers shared by the microVM runtimes (qemu, firecracker): finding the VMM,
// running a fixed host tool, the writable disk every VM gets, the identity of an image disk, a
// saved machine's description, and the last lines of a VMM's log for error messages. The steps
// built on them are vm_steps.h's (starting a VM) and vmm.h's (a running VM).
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/runtime.h"

namespace space::runtime::vm {

// `prog` if it is an absolute executable path, else the first executable of that name in PATH
// (canonical).
Result<std::filesystem::path> find_in_path(const std::filesystem::path& prog);

// Runs a fixed host tool (mke2fs, QEMU's boot probe) and waits; its output goes to `log`
// (appended). With a `timeout`, a tool still running then is killed and kTimeout returned.
Result<void> run_tool(const std::vector<std::string>& argv, const std::filesystem::path& log,
                      std::chrono::milliseconds timeout = {});

// Creates `path` (which must not exist) as the sandbox's writable disk: a sparse file of
// limits.disk_bytes holding an empty ext4 with the linux runtime's inode count (layer_inodes),
// labelled space-rw, which vminit mounts as the overlay's upper layer. mke2fs says what went
// wrong in `log`.
Result<void> make_writable_disk(const std::filesystem::path& path, const Limits& limits,
                                const std::filesystem::path& log);

// The identity of an image disk: `space image build-vm` writes a new file when it rebuilds one.
nlohmann::json disk_identity(int fd);

// The machine.json of a saved machine: what a VM snapshot may resume on.
Result<nlohmann::json> read_machine_file(int dir_fd, const char* name);
// Writes `j` as the new file `name` (0600) in `dir_fd`: a saved machine's or template's
// machine.json.
Result<void> write_machine_file(int dir_fd, const char* name, const nlohmann::json& j);

// The message for a saved machine that cannot resume on the image disk as it is now.
std::string image_changed(const std::string& image);

// The last `n` lines of a (log) file, made printable, each at most 200 characters: what a guest
// or a VMM printed is untrusted.
std::string tail_of(const std::filesystem::path& p, size_t n);

}  // namespace space::runtime::vm
