// `space doctor` for the linux runtime: what this host supports, checked by trying it where a
// read of a file would not be conclusive (overlayfs inside a user namespace).
#include <fcntl.h>
#include <linux/landlock.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "host/caps.h"
#include "host/host_files.h"
#include "host/seccomp_policy.h"
#include "host/syscalls.h"
#include "runtime/linux/linux_runtime.h"
#include "runtime/linux/namespaces.h"
#include "runtime/linux/writable_layer.h"

namespace space::runtime::linux {

namespace fs = std::filesystem;

namespace {

// Child of the overlay probe: root of a new user namespace (mapped to host root, as the probe
// touches nothing but its own mount namespace), attaches a writable layer the parent made the
// way sandboxes get theirs (writable_layer.h) and mounts an overlay with userxattr over it.
// Exits with 0 or the errno of the step that failed. Raw syscalls only (see launcher.cc).
[[noreturn]] void overlay_probe_child(int release_fd, int layer_fd, const char* dir) {
  char go;
  if (::read(release_fd, &go, 1) != 1) ::_exit(ECANCELED);
  if (::syscall(SYS_setresgid, 0, 0, 0) != 0 || ::syscall(SYS_setresuid, 0, 0, 0) != 0) {
    ::_exit(errno);
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(errno);
  if (::syscall(SYS_move_mount, layer_fd, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    ::_exit(errno);
  }
  if (::chdir(dir) != 0) ::_exit(errno);
  for (const char* d : {"l", "m"}) {
    if (::mkdir(d, 0755) != 0) ::_exit(errno);
  }
  if (::mount("overlay", "m", "overlay", 0, "lowerdir=l,upperdir=upper,workdir=work,userxattr") !=
      0) {
    ::_exit(errno);
  }
  ::_exit(0);
}

nlohmann::json probe_overlay_in_userns() {
  auto layer = make_writable_layer(Limits{.disk_bytes = 1ull << 20}, 0);
  if (!layer) return {{"ok", false}, {"error", layer.error().message()}};
  char dir[] = "/tmp/space-doctor-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return {{"ok", false}, {"error", "mkdtemp failed"}};
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    ::rmdir(dir);
    return {{"ok", false}, {"error", "pipe2 failed"}};
  }
  UniqueFd release_r(pipefd[0]), release_w(pipefd[1]);
  int pidfd = -1;
  long pid = -1;
  int err = 0;
  run_on_scratch_thread([&] {
    clone_args args{};
    args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_PIDFD;
    args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
    args.exit_signal = SIGCHLD;
    pid = host::sys_clone3(&args);
    if (pid == 0) overlay_probe_child(release_r.get(), layer->get(), dir);
    err = errno;
  });
  nlohmann::json out;
  if (pid < 0) {
    out = {{"ok", false}, {"error", std::string("clone3: ") + std::strerror(err)}};
  } else {
    UniqueFd guard(pidfd);
    release_r.reset();
    // Map the probe's root to host root: it only ever touches its own mount namespace.
    const std::string proc = "/proc/" + std::to_string(pid);
    bool mapped = host::write_text(proc + "/uid_map", "0 0 1\n").has_value() &&
                  host::write_text(proc + "/gid_map", "0 0 1\n").has_value();
    if (mapped) (void)!::write(release_w.get(), "1", 1);
    release_w.reset();
    siginfo_t info{};
    ::waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED);
    if (!mapped) {
      out = {{"ok", false}, {"error", "writing the probe's id maps failed"}};
    } else if (info.si_code == CLD_EXITED && info.si_status == 0) {
      out = {{"ok", true}};
    } else if (info.si_code == CLD_EXITED) {
      out = {{"ok", false}, {"error", std::strerror(info.si_status)}};
    } else {
      out = {{"ok", false}, {"error", "probe killed by signal " + std::to_string(info.si_status)}};
    }
  }
  ::rmdir(dir);
  return out;
}

}  // namespace

nlohmann::json LinuxRuntime::doctor() const {
  nlohmann::json d;
  d["runtime"] = "linux";
  struct utsname u;
  if (::uname(&u) == 0) {
    d["kernel"] = u.release;
    d["arch"] = u.machine;
  }

  auto max_userns = host::read_u64("/proc/sys/user/max_user_namespaces");
  d["user_namespaces"] = {{"ok", max_userns.has_value() && *max_userns > 0},
                          {"max", max_userns.value_or(0)}};

  if (layout_) {
    nlohmann::json controllers = nlohmann::json::array();
    for (const auto& [c, path] : layout_->v1) controllers.push_back(c);
    if (layout_->mode == host::CgroupMode::kV2) {
      auto list = host::read_text(layout_->unified / "cgroup.controllers");
      if (list) {
        std::string s = *list;
        size_t pos = 0;
        while (pos < s.size()) {
          size_t end = s.find_first_of(" \n", pos);
          if (end == std::string::npos) end = s.size();
          if (end > pos) controllers.push_back(s.substr(pos, end - pos));
          pos = end + 1;
        }
      }
    }
    d["cgroups"] = {{"ok", true},
                    {"mode", host::cgroup_mode_name(layout_->mode)},
                    {"root", layout_->root.string()},
                    {"unified", layout_->unified.string()},
                    {"controllers", controllers},
                    {"parent", config_.cgroup_name}};
  } else {
    d["cgroups"] = {{"ok", false}, {"error", layout_.error().message()}};
  }

  d["overlay_in_userns"] = probe_overlay_in_userns();

  auto actions = host::read_text("/proc/sys/kernel/seccomp/actions_avail");
  d["seccomp"] = {{"ok", actions.has_value()},
                  {"user_notification",
                   actions.has_value() && actions->find("user_notif") != std::string::npos},
                  {"instructions", seccomp_.instructions.size()},
                  {"not_on_this_arch", seccomp_.unresolved},
                  {"policy", host::policy_table()}};

  UniqueFd self(host::sys_pidfd_open(::getpid()));
  d["pidfd"] = {{"ok", self.valid()}};

  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  d["landlock"] = {{"ok", abi > 0}, {"abi", abi > 0 ? abi : 0}};

  d["capabilities"] = host::capability_table();
  d["agent"] = {{"path", config_.agent_path.string()}, {"found", agent_.valid()}};
  if (agent_error_) d["agent"]["error"] = agent_error_->message();
  return d;
}

}  // namespace space::runtime::linux
