// space-egress's confinement (confine.h): its own step, hiding spaced's directories, then the
// host's recipe (host/confine.h) with the egress seccomp role.
#include "egressd/confine.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "host/confine.h"
#include "host/seccomp_policy.h"

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

namespace {

// space-egress's own step: a private mount namespace (and IPC namespace) in which every `hide`
// directory is covered by an empty read-only tmpfs.
Result<void> hide(const std::vector<std::string>& dirs) {
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
      for (const auto& dir : dirs)
        if (point == dir || (point.starts_with(dir) && point[dir.size()] == '/'))
          under.push_back(point);
    }
    std::sort(under.begin(), under.end(), [](auto& x, auto& y) { return x.size() > y.size(); });
    for (const auto& point : under) (void)::umount2(point.c_str(), MNT_DETACH);
  }
  for (const auto& dir : dirs) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (::mount("space-egress", dir.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "size=4k,nr_inodes=1,mode=0500") != 0)
      return fail_sys("mount tmpfs over", dir);
  }
  return {};
}

}  // namespace

Result<void> confine(const Args& a) {
  // Compiled first: libseccomp allocates, and nothing below may fail half-way for want of it.
  auto program = TRY(host::compile_policy(host::egress_policy(::getpid())));
  auto no_caps = TRY(host::make_cap_plan(0));
  TRY_VOID(hide(a.hide));
  // Then the common recipe (host/confine.h): uid and gid with no groups and no capability,
  // not dumpable, no_new_privs, the egress role.
  host::ConfinePlan plan{.become = host::Identity{a.uid, a.gid},
                         .caps = no_caps,
                         .not_dumpable = true,
                         .seccomp = &program};
  // Connections need descriptors: as many as the hard limit allows (set while still root).
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    plan.nofile = nofile;
  }
  TRY_VOID(host::confine(plan));
  if (::chdir("/") != 0) return fail_sys("chdir", "/");
  return {};
}

}  // namespace space::egressd
