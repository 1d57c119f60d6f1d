// space-vminit: PID 1 of the microVM guest, run from the initramfs that
// scripts/guest-kernel.sh builds (docs/vm-guest.md). A straight-line recipe: each step either
// works or says what failed (syscall, arguments, errno) on the console and powers the VM off,
// so a broken guest never hangs and the host sees why on the serial log. With space.probe=1
// (the host's boot probe of an accelerator) it stops after step 1: prints kProbeMarker, ends.
//
//   1. /dev (devtmpfs), /proc, /sys; the console as stdin/stdout/stderr
//   2. load the modules listed in /modules.order (finit_module, with their parameters from
//      the kernel command line, as modprobe would)
//   3. find the disks by ext4 label: space-image (read-only), space-rw (writable)
//   4. overlay of the two -> /newroot; free the initramfs; move /newroot to / and chroot
//   5. in the new root: /proc /sys /dev /dev/pts /dev/shm /tmp /run, cgroup2
//   6. hostname, lo up, the sandbox's pids cgroup (space.* kernel parameters); with egress,
//      /etc/resolv.conf pointing at the gateway's DNS stub (which the agent carries)
//   7. exec /.space/space-agent --channel /dev/vportNpM (or, with space.channel=vsock:PORT,
//      --channel-listen vsock:PORT) with an empty environment
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "proto/guest_boot.h"
#include "vminit/guest.h"

namespace space::vminit {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDeviceWait = std::chrono::seconds(5);

void log(const std::string& msg) {
  std::string line = "space-vminit: " + msg + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

// Whether the machine has ACPI (seen in early_mounts). Without it (QEMU's microvm with
// acpi=off, the qemu runtime's default) the kernel has no way to power off and
// reboot(RB_POWER_OFF) only halts the CPU, leaving QEMU running: there a reset is what ends
// the VM, since the runtime starts QEMU with -no-reboot (a reset makes QEMU exit).
bool g_have_acpi = true;

[[noreturn]] void power_off(const std::string& why) {
  log("fatal: " + why);
  log(g_have_acpi ? "powering off"
                  : "powering off (no ACPI: by a reset; QEMU runs with -no-reboot)");
  ::sync();
  ::reboot(g_have_acpi ? RB_POWER_OFF : RB_AUTOBOOT);
  // reboot() only returns on failure; PID 1 must not exit (the kernel would panic), so wait.
  for (;;) ::pause();
}

Result<void> mkdir_p(const std::string& path, mode_t mode = 0755) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) return fail_sys("mkdir", cur);
  }
  return {};
}

Result<void> do_mount(const char* src, const std::string& target, const char* type,
                      unsigned long flags, const std::string& data = "") {
  TRY_VOID(mkdir_p(target));
  if (::mount(src, target.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) != 0)
    return fail_sys("mount", std::string(type ? type : "") + " " + src + " on " + target +
                                 (data.empty() ? "" : " (" + data + ")"));
  return {};
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return fail_sys("open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<void> write_file(const std::string& path, const std::string& content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return fail_sys("open", path);
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    return fail_sys("write", path + " <- " + content);
  return {};
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

// 1. The early mounts and the console.
Result<void> early_mounts() {
  TRY_VOID(do_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755"));
  UniqueFd console(::open("/dev/console", O_RDWR | O_NOCTTY));
  if (console) {
    for (int fd = 0; fd < 3; ++fd) ::dup2(console.get(), fd);
  }
  TRY_VOID(do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC));
  TRY_VOID(do_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC));
  g_have_acpi = ::access("/sys/firmware/acpi/tables", F_OK) == 0;
  return {};
}

// 2. Modules, in the order the initramfs lists them (dependencies first), each with the
// parameters the kernel command line gives it (module_params).
Result<void> load_modules(const std::string& cmdline, const BootParams& boot) {
  auto order = read_file("/modules.order");
  if (!order) return {};  // a kernel with everything built in needs no list
  std::stringstream ss(*order);
  std::string name;
  int loaded = 0;
  while (std::getline(ss, name)) {
    if (name.empty()) continue;
    std::string module = name.substr(0, name.find('.'));
    if (!module_wanted(module, boot)) continue;
    std::string path = "/lib/modules/" + name;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return fail_sys("open", path);
    std::string params = module_params(cmdline, module);
    if (::syscall(SYS_finit_module, fd.get(), params.c_str(), 0) != 0 && errno != EEXIST)
      return fail_sys("finit_module", path + (params.empty() ? "" : " \"" + params + "\""));
    ++loaded;
  }
  log("loaded " + std::to_string(loaded) + " modules");
  return {};
}

// 3. The two disks, by label; virtio-blk probes asynchronously, so wait a little.
struct Disks {
  std::string image, rw;
};
Result<Disks> find_disks() {
  Disks d;
  auto deadline = Clock::now() + kDeviceWait;
  for (;;) {
    for (const auto& dev : list_dir("/sys/class/block")) {
      std::string path = "/dev/" + dev;
      auto label = read_ext4_label(path);
      if (!label || !*label) continue;
      if (**label == "space-image" && d.image.empty()) d.image = path;
      if (**label == "space-rw" && d.rw.empty()) d.rw = path;
    }
    if (!d.image.empty() && !d.rw.empty()) return d;
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string seen;
  for (const auto& dev : list_dir("/sys/class/block")) seen += " " + dev;
  return fail(Code::kNotFound,
              std::string("no ext4 disk labelled ") +
                  (d.image.empty() ? "space-image" : "space-rw") +
                  " after 5 s (block devices:" + (seen.empty() ? " none" : seen) +
                  "); the VM needs the image disk and the writable disk as virtio-blk devices");
}

// Deletes the initramfs's files (what switch_root does), staying on the root's device so it
// never descends into /newroot or any other mount.
void free_initramfs(int dirfd, dev_t root_dev) {
  DIR* d = ::fdopendir(dirfd);
  if (!d) {
    ::close(dirfd);
    return;
  }
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    struct stat st;
    if (::fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_dev != root_dev) continue;  // a mount point: leave it
    if (S_ISDIR(st.st_mode)) {
      int sub = ::openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) free_initramfs(sub, root_dev);
      ::unlinkat(dirfd, e->d_name, AT_REMOVEDIR);
    } else {
      ::unlinkat(dirfd, e->d_name, 0);
    }
  }
  ::closedir(d);
}

// 4. The overlay root, and the switch to it.
Result<void> switch_root(const Disks& disks) {
  TRY_VOID(do_mount(disks.image.c_str(), "/mnt/image", "ext4", MS_RDONLY | MS_NODEV));
  TRY_VOID(do_mount(disks.rw.c_str(), "/mnt/rw", "ext4", MS_NODEV));
  TRY_VOID(mkdir_p("/mnt/rw/upper"));
  TRY_VOID(mkdir_p("/mnt/rw/work"));
  TRY_VOID(do_mount("overlay", "/newroot", "overlay", 0,
                    "lowerdir=/mnt/image,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work"));
  // overlayfs holds private clones of its layers: the mounts themselves can go.
  ::umount2("/mnt/image", MNT_DETACH);
  ::umount2("/mnt/rw", MNT_DETACH);
  for (const char* m : {"/dev", "/proc", "/sys"}) ::umount2(m, MNT_DETACH);
  // The console stays open on fds 0-2 across the detach.

  struct stat root_st;
  if (::stat("/", &root_st) != 0) return fail_sys("stat", "/");
  struct statfs sfs;
  if (::statfs("/", &sfs) != 0) return fail_sys("statfs", "/");
  // Only a ramfs/tmpfs initramfs is emptied: never delete files from a real disk.
  constexpr long kRamfsMagic = 0x858458f6, kTmpfsMagic = 0x01021994;
  if (sfs.f_type == kRamfsMagic || sfs.f_type == kTmpfsMagic) {
    int rootfd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd >= 0) free_initramfs(rootfd, root_st.st_dev);
  }
  if (::chdir("/newroot") != 0) return fail_sys("chdir", "/newroot");
  if (::mount(".", "/", nullptr, MS_MOVE, nullptr) != 0)
    return fail_sys("mount", "--move /newroot /");
  if (::chroot(".") != 0) return fail_sys("chroot", "/newroot");
  if (::chdir("/") != 0) return fail_sys("chdir", "/");
  return {};
}

// 5. The sandbox's own mounts.
Result<void> sandbox_mounts() {
  constexpr unsigned long kSafe = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  TRY_VOID(do_mount("proc", "/proc", "proc", kSafe));
  TRY_VOID(do_mount("sysfs", "/sys", "sysfs", kSafe));
  TRY_VOID(do_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755"));
  TRY_VOID(do_mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                    "newinstance,ptmxmode=0666,mode=0620,gid=5"));
  ::unlink("/dev/ptmx");
  if (::symlink("pts/ptmx", "/dev/ptmx") != 0) return fail_sys("symlink", "pts/ptmx /dev/ptmx");
  TRY_VOID(do_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  TRY_VOID(do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  TRY_VOID(do_mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"));
  TRY_VOID(do_mount("cgroup2", "/sys/fs/cgroup", "cgroup2", kSafe));
  return {};
}

// 6. Hostname, loopback, the pids cgroup.
Result<void> apply_params(const BootParams& p) {
  if (!p.hostname.empty() && ::sethostname(p.hostname.data(), p.hostname.size()) != 0)
    return fail_sys("sethostname", p.hostname);
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return fail_sys("socket", "AF_INET");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return fail_sys("ioctl", "SIOCGIFFLAGS lo");
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return fail_sys("ioctl", "SIOCSIFFLAGS lo up");
  if (p.pids) {
    TRY_VOID(write_file("/sys/fs/cgroup/cgroup.subtree_control", "+pids"));
    TRY_VOID(mkdir_p("/sys/fs/cgroup/sandbox"));
    TRY_VOID(write_file("/sys/fs/cgroup/sandbox/pids.max", std::to_string(*p.pids)));
    // Moving PID 1 there before exec puts the agent and everything it starts under the limit.
    TRY_VOID(write_file("/sys/fs/cgroup/sandbox/cgroup.procs", "0"));
  }
  return {};
}

// 6b. /etc/resolv.conf names the gateway's DNS stub (resolv_conf), on the overlay's writable
// layer. Written to a temporary file and renamed over the old one, so a symlink there (to
// /run/systemd/resolve/..., say) is replaced, not followed; left alone if it already says so.
Result<void> write_resolv_conf(const BootParams& p) {
  const std::string want = resolv_conf(p);
  if (want.empty()) return {};
  if (auto have = read_file("/etc/resolv.conf"); have && *have == want) {
    struct stat st;
    if (::lstat("/etc/resolv.conf", &st) == 0 && S_ISREG(st.st_mode)) return {};
  }
  TRY_VOID(mkdir_p("/etc"));
  const char* tmp = "/etc/.resolv.conf.space-vminit";
  ::unlink(tmp);
  UniqueFd fd(::open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) return fail_sys("open", tmp);
  if (::write(fd.get(), want.data(), want.size()) != static_cast<ssize_t>(want.size()))
    return fail_sys("write", tmp);
  fd.reset();
  if (::rename(tmp, "/etc/resolv.conf") != 0) {
    ::unlink(tmp);
    return fail_sys("rename", std::string(tmp) + " /etc/resolv.conf");
  }
  return {};
}

// 7. The agent's channel: the virtio-serial port named space.agent.
Result<std::string> find_agent_port() {
  auto deadline = Clock::now() + kDeviceWait;
  for (;;) {
    for (const auto& port : list_dir("/sys/class/virtio-ports")) {
      auto name = read_file("/sys/class/virtio-ports/" + port + "/name");
      if (name && (*name == "space.agent\n" || *name == "space.agent")) return "/dev/" + port;
    }
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return fail(Code::kNotFound,
              "no virtio-serial port named space.agent after 5 s; the VM needs "
              "-device virtio-serial-device -device virtserialport,name=space.agent,...");
}

}  // namespace

[[noreturn]] void run() {
  if (::getpid() != 1) {
    log("must run as PID 1 (the init of the microVM's initramfs); refusing");
    ::_exit(2);
  }
  auto t0 = Clock::now();
  auto step = [](const char* what, Result<void> r) {
    if (!r) power_off(std::string(what) + ": " + r.error().message());
  };
  step("early mounts", early_mounts());
  std::string cmdline = read_file("/proc/cmdline").value_or("");
  auto params = parse_cmdline(cmdline);
  if (!params) power_off("kernel command line: " + params.error().message());
  if (params->probe) {
    // The host only asks whether a guest runs this far under its accelerator: say so, end.
    (void)!::write(STDOUT_FILENO, proto::kProbeMarker.data(), proto::kProbeMarker.size());
    (void)!::write(STDOUT_FILENO, "\n", 1);
    ::sync();
    ::reboot(g_have_acpi ? RB_POWER_OFF : RB_AUTOBOOT);
    for (;;) ::pause();
  }
  step("loading modules", load_modules(cmdline, *params));
  auto disks = find_disks();
  if (!disks) power_off("finding disks: " + disks.error().message());
  log("image " + disks->image + ", writable layer " + disks->rw);
  step("switching to the overlay root", switch_root(*disks));
  step("mounting the sandbox's filesystems", sandbox_mounts());
  step("applying kernel parameters", apply_params(*params));
  // Not fatal: a guest whose image keeps /etc from being written still runs, only names do not
  // resolve in it (clients that use the proxy variables are unaffected).
  if (auto r = write_resolv_conf(*params); !r)
    log("warning: pointing /etc/resolv.conf at the DNS stub: " + r.error().message());
  // The channel: the virtio-serial port, unless the agent is to listen on vsock (firecracker).
  std::string channel;
  if (params->channel_vsock_port) {
    channel = "vsock port " + std::to_string(*params->channel_vsock_port);
  } else {
    auto port = find_agent_port();
    if (!port) power_off(port.error().message());
    channel = *port;
  }
  auto argv = agent_argv(params->channel_vsock_port ? "" : channel, *params);
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  char* envp[] = {nullptr};
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  log("starting the agent on " + channel + " (init took " + std::to_string(ms) + " ms)");
  ::execve(cargv[0], cargv.data(), envp);
  power_off(Error::sys("execve", cargv[0]).message() +
            " (the image disk must hold the agent at /.space/space-agent; `space image "
            "build-vm` puts it there)");
}

}  // namespace space::vminit

int main() { space::vminit::run(); }
