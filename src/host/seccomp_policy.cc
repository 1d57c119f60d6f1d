// The seccomp roles' tables (see seccomp_policy.h). Reviewed like code: removing a row or
// narrowing its match in a denylist, or adding or widening one in the reader's allowlist, gives
// untrusted code more of the kernel.
#include "host/seccomp_policy.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace space::host {

namespace {

using K = SyscallMatch::Kind;

const SyscallMatch kAll{};

// Namespace-creating clone(2) flags. CLONE_NEWTIME (0x80) is left out on purpose: for
// clone(2) that bit is part of the exit signal and the kernel rejects NEWTIME there anyway.
const std::vector<uint64_t> kNamespaceFlags = {CLONE_NEWNS,  CLONE_NEWCGROUP, CLONE_NEWUTS,
                                               CLONE_NEWIPC, CLONE_NEWUSER,   CLONE_NEWPID,
                                               CLONE_NEWNET};

constexpr const char* kMounts =
    "the sandbox's mounts are fixed at creation; new mounts could hide masks or expose paths";
constexpr const char* kHostWide = "acts on the whole host, never needed in a sandbox";
constexpr const char* kAttackSurface =
    "large kernel attack surface with a history of privilege escalations; not needed by tools";
constexpr const char* kNamespaces =
    "new namespaces give a fresh full capability set over them: a classic escape springboard";
constexpr const char* kClock = "the clock is shared with the host";
constexpr const char* kNuma = "NUMA placement of host memory; not a sandbox's business";

std::vector<PolicyRule> build() {
  std::vector<PolicyRule> p = {
      // Mounts and file-system views.
      {"mount", -1, kAll, EPERM, kMounts},
      {"umount2", -1, kAll, EPERM, kMounts},
      {"pivot_root", -1, kAll, EPERM, kMounts},
      {"chroot", -1, kAll, EPERM, kMounts},
      {"fsopen", 430, kAll, EPERM, kMounts},
      {"fsconfig", 431, kAll, EPERM, kMounts},
      {"fsmount", 432, kAll, EPERM, kMounts},
      {"fspick", 433, kAll, EPERM, kMounts},
      {"move_mount", 429, kAll, EPERM, kMounts},
      {"open_tree", 428, kAll, EPERM, kMounts},
      {"open_tree_attr", 467, kAll, EPERM, kMounts},
      {"mount_setattr", 442, kAll, EPERM, kMounts},
      {"open_by_handle_at", -1, kAll, EPERM,
       "opens files by handle, bypassing path checks (the 'shocker' escape)"},
      {"name_to_handle_at", -1, kAll, EPERM, "the other half of open_by_handle_at"},
      {"quotactl", -1, kAll, EPERM, "disk quotas of host file systems"},
      {"quotactl_fd", 443, kAll, EPERM, "disk quotas of host file systems"},
      {"swapon", -1, kAll, EPERM, kHostWide},
      {"swapoff", -1, kAll, EPERM, kHostWide},
      {"acct", -1, kAll, EPERM, "process accounting is host-wide"},
      {"lookup_dcookie", -1, kAll, EPERM, "kernel profiling interface"},
      {"nfsservctl", -1, kAll, EPERM, "removed kernel NFS server interface"},
      {"uselib", -1, kAll, EPERM, "obsolete loader with past exploits"},
      // The machine and the kernel itself.
      {"reboot", -1, kAll, EPERM, kHostWide},
      {"kexec_load", -1, kAll, EPERM, kHostWide},
      {"kexec_file_load", -1, kAll, EPERM, kHostWide},
      {"init_module", -1, kAll, EPERM, "loads code into the host kernel"},
      {"finit_module", -1, kAll, EPERM, "loads code into the host kernel"},
      {"delete_module", -1, kAll, EPERM, "unloads host kernel modules"},
      {"syslog", -1, kAll, EPERM, "the kernel log leaks host addresses and activity"},
      {"iopl", -1, kAll, EPERM, "raw port I/O"},
      {"ioperm", -1, kAll, EPERM, "raw port I/O"},
      {"vhangup", -1, kAll, EPERM, "hangs up the controlling terminal of others"},
      // Kernel subsystems that are attack surface more than features for agent code.
      {"bpf", -1, kAll, EPERM, kAttackSurface},
      {"perf_event_open", -1, kAll, EPERM, "side channels and kernel attack surface"},
      {"userfaultfd", -1, kAll, EPERM, "stalls kernel accesses at will: race exploit primitive"},
      {"io_uring_setup", 425, kAll, EPERM, kAttackSurface},
      {"io_uring_enter", 426, kAll, EPERM, kAttackSurface},
      {"io_uring_register", 427, kAll, EPERM, kAttackSurface},
      {"keyctl", -1, kAll, EPERM, "the kernel keyring is not namespaced"},
      {"add_key", -1, kAll, EPERM, "the kernel keyring is not namespaced"},
      {"request_key", -1, kAll, EPERM, "the kernel keyring is not namespaced"},
      // Namespaces.
      {"unshare", -1, kAll, EPERM, kNamespaces},
      {"setns", -1, kAll, EPERM, "joining other namespaces (those fds must never reach inside)"},
      {"clone", -1, {K::kArgAnyBit, 0, kNamespaceFlags}, EPERM, kNamespaces},
      {"clone3", 435, kAll, ENOSYS,
       "its flags live in memory seccomp cannot read; ENOSYS makes libc fall back to clone"},
      // Time.
      {"settimeofday", -1, kAll, EPERM, kClock},
      {"clock_settime", -1, kAll, EPERM, kClock},
      {"clock_adjtime", -1, kAll, EPERM, kClock},
      {"adjtimex", -1, kAll, EPERM, kClock},
      // Memory placement.
      {"mbind", -1, kAll, EPERM, kNuma},
      {"migrate_pages", -1, kAll, EPERM, kNuma},
      {"move_pages", -1, kAll, EPERM, kNuma},
      {"set_mempolicy_home_node", 450, kAll, EPERM, kNuma},
      // Arguments.
      {"personality",
       -1,
       {K::kArgNotIn, 0, {0x0, 0x8, 0x20000, 0x20008, 0xffffffff}},
       EPERM,
       "only PER_LINUX, PER_LINUX32, UNAME26 variants and the query; others disable ASLR or "
       "make data executable"},
      {"ioctl",
       -1,
       {K::kArgEquals, 1, {TIOCSTI}},
       EPERM,
       "TIOCSTI pushes input into a terminal another process reads"},
      {"ioctl",
       -1,
       {K::kArgEquals, 1, {TIOCLINUX}},
       EPERM,
       "TIOCLINUX can inject console input too"},
      {"socket",
       -1,
       {K::kArgEquals, 0, {AF_VSOCK}},
       EAFNOSUPPORT,
       "vsock reaches the hypervisor/host; as if not built in, so programs fall back"},
      {"socket",
       -1,
       {K::kArgEquals, 0, {AF_ALG}},
       EAFNOSUPPORT,
       "kernel crypto sockets: frequent CVEs, user-space crypto works; libraries fall back"},
  };
  return p;
}

std::string describe(const SyscallMatch& m) {
  auto list = [&](std::string_view sep) {
    std::string s;
    for (size_t i = 0; i < m.values.size(); ++i) {
      if (i) s += sep;
      s += fmt::format("{:#x}", m.values[i]);
    }
    return s;
  };
  switch (m.kind) {
    case K::kAll:
      return "always";
    case K::kArgEquals:
      return fmt::format("arg{} == {}", m.arg, list(" or "));
    case K::kArgAnyBit:
      return fmt::format("arg{} has any of {}", m.arg, list("|"));
    case K::kArgNotIn:
      return fmt::format("arg{} not in {{{}}}", m.arg, list(", "));
    case K::kArgNot:
      return fmt::format("arg{} != {}", m.arg, list(""));
    case K::kArgsAre: {
      std::string s;
      for (size_t i = 0; i + 1 < m.values.size(); i += 2)
        s += fmt::format("{}arg{} == {:#x}", i ? " and " : "", m.values[i], m.values[i + 1]);
      return s;
    }
  }
  return "?";
}

}  // namespace

SyscallMatch args_are(std::initializer_list<std::pair<unsigned, uint64_t>> pairs) {
  SyscallMatch m{K::kArgsAre, 0, {}};
  for (const auto& [arg, value] : pairs) {
    m.values.push_back(arg);
    m.values.push_back(value);
  }
  return m;
}

const std::vector<PolicyRule>& sandbox_policy() {
  static const std::vector<PolicyRule> policy = build();
  return policy;
}

std::vector<PolicyRule> egress_policy(pid_t self) {
  constexpr const char* kNoPrograms =
      "the gateway runs no program: a parser bug exploited inside it gets no shell";
  constexpr const char* kOthers = "reads or writes another process's memory";
  constexpr const char* kFamilies =
      "the gateway speaks IP, Unix and netlink (the resolver) only; the rest is attack surface";
  constexpr const char* kSignals =
      "signals reach only the process itself (its threads): the gateway processes share a uid, "
      "and one taken over must not end the others";
  const SyscallMatch not_self{K::kArgNot, 0, {static_cast<uint64_t>(self)}};
  std::vector<PolicyRule> p = build();
  std::vector<PolicyRule> extra = {
      {"execve", -1, kAll, EPERM, kNoPrograms},
      {"execveat", -1, kAll, EPERM, kNoPrograms},
      {"ptrace", -1, kAll, EPERM, kOthers},
      {"process_vm_readv", -1, kAll, EPERM, kOthers},
      {"process_vm_writev", -1, kAll, EPERM, kOthers},
      {"pidfd_getfd", 438, kAll, EPERM, "takes file descriptors out of another process"},
      {"kcmp", -1, kAll, EPERM, "compares other processes' kernel objects"},
      {"kill", -1, kAll, EPERM, kSignals},
      {"tkill", -1, kAll, EPERM, kSignals},
      {"tgkill", -1, not_self, EPERM, kSignals},
      {"rt_sigqueueinfo", -1, kAll, EPERM, kSignals},
      {"rt_tgsigqueueinfo", -1, not_self, EPERM, kSignals},
      {"pidfd_open", 434, kAll, EPERM, kSignals},
      {"pidfd_send_signal", 424, kAll, EPERM, kSignals},
      {"socket",
       -1,
       {K::kArgEquals,
        0,
        {AF_PACKET,     AF_KEY,    AF_XDP,    AF_RDS,       AF_TIPC,    AF_BLUETOOTH, AF_CAN,
         AF_LLC,        AF_X25,    AF_AX25,   AF_APPLETALK, AF_IPX,     AF_DECnet,    AF_NETROM,
         AF_ROSE,       AF_ATMPVC, AF_ATMSVC, AF_PPPOX,     AF_IRDA,    AF_ISDN,      AF_PHONET,
         AF_IEEE802154, AF_CAIF,   AF_NFC,    AF_KCM,       AF_QIPCRTR, AF_SMC,       AF_MCTP}},
       EAFNOSUPPORT,
       kFamilies},
  };
  p.insert(p.end(), extra.begin(), extra.end());
  return p;
}

SeccompRole upper_reader_role(int disk_fd) {
  constexpr const char* kDisk =
      "the disk: libext2fs's unix I/O reads it with pread64 (read after lseek as a fallback), "
      "fstat's it and asks fcntl for its flags (unixfd_io_manager)";
  constexpr const char* kGetenv =
      "ext2fs_safe_getenv (E2FSPROGS_* variables; the environment is empty) first checks that "
      "the process is not set-id and dumpable";
  constexpr const char* kSync =
      "unix I/O syncs the disk when it closes it: nothing was written, so it is answered as done "
      "without being done";
  constexpr const char* kOutput = "the listing on stdout; stderr for the C library's last words";
  constexpr const char* kMemory = "memory (malloc), bounded by RLIMIT_AS";
  constexpr const char* kLibc = "the C library: locks, the clock, signal returns, the end";
  const auto fd = static_cast<uint64_t>(disk_fd);
  const SyscallMatch on_disk = args_are({{0, fd}});
  return {{
              {"pread64", -1, on_disk, kAllow, kDisk},
              {"read", -1, on_disk, kAllow, kDisk},
              {"lseek", -1, on_disk, kAllow, kDisk},
              {"fstat", -1, on_disk, kAllow, kDisk},
              {"newfstatat", -1, args_are({{0, fd}, {3, AT_EMPTY_PATH}}), kAllow,
               "glibc's fstat: fstatat(fd, \"\", AT_EMPTY_PATH). With AT_EMPTY_PATH an absolute "
               "path would still be looked up; only metadata, and the reader has no path it could "
               "use"},
              {"fcntl", -1, args_are({{0, fd}, {1, F_GETFD}}), kAllow, kDisk},
              {"fcntl", -1, args_are({{0, fd}, {1, F_GETFL}}), kAllow, kDisk},
              {"ioctl", -1, kAll, ENOTTY,
               "unix I/O asks a block device's properties (BLKDISCARDZEROES); a file has none"},
              {"getuid", -1, kAll, kAllow, kGetenv},
              {"geteuid", -1, kAll, kAllow, kGetenv},
              {"getgid", -1, kAll, kAllow, kGetenv},
              {"getegid", -1, kAll, kAllow, kGetenv},
              {"prctl", -1, args_are({{0, PR_GET_DUMPABLE}}), kAllow, kGetenv},
              {"fsync", -1, on_disk, 0, kSync},
              {"fdatasync", -1, on_disk, 0, kSync},
              {"close", -1, kAll, kAllow, "ext2fs_close_free closes the disk"},
              {"write", -1, args_are({{0, 1}}), kAllow, kOutput},
              {"write", -1, args_are({{0, 2}}), kAllow, kOutput},
              {"writev", -1, args_are({{0, 2}}), kAllow, kOutput},
              {"brk", -1, kAll, kAllow, kMemory},
              {"mmap", -1, kAll, kAllow, kMemory},
              {"munmap", -1, kAll, kAllow, kMemory},
              {"mremap", -1, kAll, kAllow, kMemory},
              {"madvise", -1, kAll, kAllow, kMemory},
              {"mprotect", -1, kAll, kAllow, kMemory},
              {"futex", -1, kAll, kAllow, kLibc},
              {"clock_gettime", -1, kAll, kAllow, kLibc},
              {"rt_sigreturn", -1, kAll, kAllow, kLibc},
              {"exit", -1, kAll, kAllow, kLibc},
              {"exit_group", -1, kAll, kAllow, kLibc},
          },
          Unmatched::kKillProcess};
}

nlohmann::json policy_table() {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : sandbox_policy()) {
    rows.push_back({{"syscall", r.syscall},
                    {"match", describe(r.match)},
                    {"action", std::string("errno ") + strerrorname_np(r.errno_value)},
                    {"reason", r.reason}});
  }
  rows.push_back({{"syscall", "*"},
                  {"match", "non-native architecture (i386, x32)"},
                  {"action", "kill process"},
                  {"reason", "a second syscall table would bypass every rule above"}});
  return rows;
}

}  // namespace space::host
