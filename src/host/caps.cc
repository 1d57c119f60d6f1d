// The capability table and the code that drops a process to a plan (see caps.h).
#include "host/caps.h"

#include <linux/capability.h>
#include <sys/prctl.h>

#include <cerrno>
#include <charconv>

#include "host/host_files.h"
#include "host/syscalls.h"

namespace space::host {

namespace {

// Reviewed like code: adding a row widens what root inside every sandbox can do.
constexpr CapabilityRow kDefaultCaps[] = {
    {CAP_CHOWN, "CAP_CHOWN", "package managers and tar chown files to the sandbox's own users"},
    {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE",
     "root inside reads/writes its own files regardless of mode, as scripts expect of root"},
    {CAP_FOWNER, "CAP_FOWNER", "chmod/utime on files of other sandbox users (tar, cp -a)"},
    {CAP_FSETID, "CAP_FSETID", "keep setgid bits when root edits files; harmless under NNP"},
    {CAP_KILL, "CAP_KILL", "root signals any process of the sandbox (its pid namespace only)"},
    {CAP_SETGID, "CAP_SETGID", "su/sudo-style drops to other sandbox gids (mapped range only)"},
    {CAP_SETUID, "CAP_SETUID", "drop to unprivileged sandbox users (mapped range only)"},
    {CAP_SETPCAP, "CAP_SETPCAP", "lets a process drop capabilities from its bounding set"},
    {CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE",
     "servers bind ports < 1024 inside the sandbox's own loopback-only network"},
    {CAP_SYS_CHROOT, "CAP_SYS_CHROOT",
     "Docker parity; chroot(2) itself is still refused by the seccomp policy"},
    {CAP_SETFCAP, "CAP_SETFCAP", "package installs set file capabilities (only valid inside)"},
    {CAP_AUDIT_WRITE, "CAP_AUDIT_WRITE",
     "login-style tools write audit records; EPERM breaks them"},
};
// Deliberately absent, among others: NET_RAW (raw/packet sockets, spoofing on loopback),
// MKNOD (device nodes), SYS_ADMIN (mounts, namespaces, most of the kernel attack surface),
// SYS_PTRACE (would let sandbox root ptrace the agent and take its channel), NET_ADMIN,
// SYS_MODULE, SYS_RAWIO, SYS_TIME, SYS_BOOT, DAC_READ_SEARCH (open_by_handle_at),
// SYSLOG, BPF, PERFMON, CHECKPOINT_RESTORE, SYS_RESOURCE, IPC_LOCK, LINUX_IMMUTABLE.

}  // namespace

std::span<const CapabilityRow> default_capabilities() { return kDefaultCaps; }

uint64_t default_capability_mask() {
  uint64_t mask = 0;
  for (const auto& row : kDefaultCaps) mask |= uint64_t{1} << row.cap;
  return mask;
}

nlohmann::json capability_table() {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : kDefaultCaps) {
    rows.push_back({{"capability", row.name}, {"reason", row.reason}});
  }
  return rows;
}

Result<CapPlan> make_cap_plan(uint64_t keep) {
  CapPlan plan;
  plan.keep = keep;
  auto last = read_u64("/proc/sys/kernel/cap_last_cap");
  if (!last) return fail(std::move(last.error()).wrap("reading the highest capability number"));
  if (*last > 63) return fail(Code::kInternal, "cap_last_cap > 63 is not supported");
  plan.last_cap = static_cast<int>(*last);
  return plan;
}

int drop_bounding_set(const CapPlan& plan) {
  for (int cap = 0; cap <= plan.last_cap; ++cap) {
    if (plan.keep & (uint64_t{1} << cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return errno;
  }
  return 0;
}

int clear_ambient() {
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  return 0;
}

int set_capabilities(const CapPlan& plan) {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[0].effective = data[0].permitted = static_cast<uint32_t>(plan.keep);
  data[1].effective = data[1].permitted = static_cast<uint32_t>(plan.keep >> 32);
  if (sys_capset(&header, data) != 0) return errno;
  return 0;
}

}  // namespace space::host
