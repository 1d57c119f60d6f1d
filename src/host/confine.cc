// The confinement recipe (see confine.h).
#include "host/confine.h"

#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace space::host {

std::string_view confine_step_name(ConfineStep step) {
  switch (step) {
    case ConfineStep::kNofile:
      return "RLIMIT_NOFILE";
    case ConfineStep::kCore:
      return "RLIMIT_CORE";
    case ConfineStep::kGroups:
      return "setgroups";
    case ConfineStep::kGid:
      return "setresgid";
    case ConfineStep::kCapBounding:
      return "drop bounding capabilities";
    case ConfineStep::kCapAmbient:
      return "clear ambient capabilities";
    case ConfineStep::kUid:
      return "setresuid";
    case ConfineStep::kCapset:
      return "capset";
    case ConfineStep::kCheckCaps:
      return "check that no capability beyond the plan remains";
    case ConfineStep::kCheckRoot:
      return "check that root cannot come back";
    case ConfineStep::kNotDumpable:
      return "PR_SET_DUMPABLE 0";
    case ConfineStep::kNoNewPrivs:
      return "no_new_privs";
    case ConfineStep::kSeccomp:
      return "install seccomp filter";
  }
  return "?";
}

ConfineFailure confine_steps(const ConfinePlan& p) {
  using S = ConfineStep;
  if (p.nofile && ::setrlimit(RLIMIT_NOFILE, &*p.nofile) != 0) return {S::kNofile, errno};
  if (p.core && ::setrlimit(RLIMIT_CORE, &*p.core) != 0) return {S::kCore, errno};
  if (p.become) {
    if (::setgroups(0, nullptr) != 0) return {S::kGroups, errno};
    const gid_t g = p.become->gid;
    if (::setresgid(g, g, g) != 0) return {S::kGid, errno};
  }
  if (p.caps) {
    if (int err = drop_bounding_set(*p.caps)) return {S::kCapBounding, err};
    if (int err = clear_ambient()) return {S::kCapAmbient, err};
  }
  if (p.become) {
    const uid_t u = p.become->uid;
    if (::setresuid(u, u, u) != 0) return {S::kUid, errno};
  }
  if (p.caps) {
    if (int err = set_capabilities(*p.caps)) return {S::kCapset, err};
  }
  if (p.become) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &hdr, data) != 0) return {S::kCheckCaps, errno};
    const uint64_t keep = p.caps ? p.caps->keep : 0;
    for (int i = 0; i < 2; ++i) {
      const auto allowed = static_cast<uint32_t>(keep >> (32 * i));
      if ((data[i].effective & ~allowed) || (data[i].permitted & ~allowed) || data[i].inheritable)
        return {S::kCheckCaps, EPERM};
    }
    if (::setresuid(0, 0, 0) == 0) return {S::kCheckRoot, EPERM};
  }
  if (p.not_dumpable && ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return {S::kNotDumpable, errno};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return {S::kNoNewPrivs, errno};
  if (!p.seccomp) return {S::kSeccomp, EINVAL};
  if (int err = p.listener ? install_seccomp_listener(*p.seccomp, p.listener)
                           : install_seccomp(*p.seccomp))
    return {S::kSeccomp, err};
  return {};
}

Result<void> confine(const ConfinePlan& plan) {
  if (!plan.seccomp) return fail(Code::kInternal, "confine: no seccomp program");
  if (plan.become && (plan.become->uid == 0 || plan.become->gid == 0))
    return fail(Code::kInternal, "confine: a confined process never becomes uid or gid 0");
  if (plan.become && !plan.caps)
    return fail(Code::kInternal, "confine: a new identity needs a capability plan");
  ConfineFailure f = confine_steps(plan);
  if (f.err == 0) return {};
  if (f.step == ConfineStep::kCheckRoot)
    return fail(Code::kInternal, "confine: could become root again");
  if (f.step == ConfineStep::kCheckCaps && f.err == EPERM)
    return fail(Code::kInternal, "confine: capabilities remain after dropping them");
  return fail_sys("confine", confine_step_name(f.step), f.err);
}

}  // namespace space::host
