// space-egress's confinement (confine.h).
#include "egressd/confine.h"

#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "runtime/linux/seccomp.h"
#include "runtime/linux/seccomp_policy.h"

namespace space::egressd {

namespace {

template <class T>
Result<T> number(std::string_view flag, const char* text) {
  T v{};
  std::string_view s(text);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    return fail(Code::kInvalidArgument, std::string(flag) + ": not a number: " + std::string(s));
  return v;
}

}  // namespace

Result<Args> parse_args(int argc, char** argv) {
  Args a;
  bool uid = false, gid = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (i + 1 >= argc)
      return fail(Code::kInvalidArgument, "space-egress: " + std::string(flag) + " needs a value");
    const char* v = argv[++i];
    if (flag == "--control-fd") {
      a.control_fd = TRY(number<int>(flag, v));
    } else if (flag == "--uid") {
      a.uid = TRY(number<uid_t>(flag, v));
      uid = true;
    } else if (flag == "--gid") {
      a.gid = TRY(number<gid_t>(flag, v));
      gid = true;
    } else if (flag == "--hide") {
      if (v[0] != '/') return fail(Code::kInvalidArgument, "--hide needs an absolute path");
      a.hide.emplace_back(v);
    } else {
      return fail(Code::kInvalidArgument,
                  "space-egress is started by spaced, not by hand (unknown flag " +
                      std::string(flag) + ")");
    }
  }
  if (a.control_fd < 0 || !uid || !gid)
    return fail(Code::kInvalidArgument,
                "space-egress is started by spaced: --control-fd, --uid and --gid are required");
  if (a.uid == 0 || a.gid == 0)
    return fail(Code::kInvalidArgument, "space-egress never runs as uid or gid 0");
  return a;
}

Result<void> confine(const Args& a) {
  // Compiled first: libseccomp allocates, and nothing below may fail half-way for want of it.
  auto program = TRY(runtime::linux::compile_policy(runtime::linux::egress_policy(::getpid())));

  // Connections need descriptors: as many as the hard limit allows (set while still root).
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }

  if (::unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0) return fail_sys("unshare", "NEWNS|NEWIPC");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return fail_sys("mount", "/ private");
  // Mounts spaced made under a hidden directory (a VM's disk, an image) are copies in this
  // namespace: detached first, so this process never pins what spaced later unmounts.
  {
    std::vector<std::string> under;
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);) {
      std::istringstream f(line);
      std::string id, parent, devno, root, point;
      if (!(f >> id >> parent >> devno >> root >> point)) continue;
      for (const auto& dir : a.hide)
        if (point == dir || (point.starts_with(dir) && point[dir.size()] == '/'))
          under.push_back(point);
    }
    std::sort(under.begin(), under.end(), [](auto& x, auto& y) { return x.size() > y.size(); });
    for (const auto& point : under) (void)::umount2(point.c_str(), MNT_DETACH);
  }
  for (const auto& dir : a.hide) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (::mount("space-egress", dir.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "size=4k,nr_inodes=1,mode=0500") != 0)
      return fail_sys("mount tmpfs over", dir);
  }

  if (::setgroups(0, nullptr) != 0) return fail_sys("setgroups");
  if (::setresgid(a.gid, a.gid, a.gid) != 0) return fail_sys("setresgid");
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      return fail_sys("prctl", "PR_CAPBSET_DROP");
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return fail_sys("prctl", "PR_CAP_AMBIENT_CLEAR_ALL");
  // Leaving uid 0 with keep-caps off clears the permitted and effective sets.
  if (::setresuid(a.uid, a.uid, a.uid) != 0) return fail_sys("setresuid");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &hdr, data) != 0) return fail_sys("capset");
  if (::syscall(SYS_capget, &hdr, data) != 0) return fail_sys("capget");
  for (auto& d : data)
    if (d.effective || d.permitted || d.inheritable)
      return fail(Code::kInternal, "capabilities remain after dropping them");
  if (::setresuid(0, 0, 0) == 0) return fail(Code::kInternal, "could become root again");

  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return fail_sys("prctl", "PR_SET_DUMPABLE");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return fail_sys("prctl", "PR_SET_NO_NEW_PRIVS");
  if (int err = runtime::linux::install_seccomp(program); err != 0)
    return fail_sys("seccomp", "egress role", err);
  if (::chdir("/") != 0) return fail_sys("chdir", "/");
  return {};
}

}  // namespace space::egressd
