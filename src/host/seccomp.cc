// Compiles a role's table with libseccomp and exports the BPF into memory (see seccomp.h).
#include "host/seccomp.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "common/fd.h"
#include "host/syscalls.h"

namespace space::host {

namespace {

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

Error seccomp_error(std::string_view what, int rc) {
  return Error::sys("libseccomp " + std::string(what), "", -rc);
}

// Adds one libseccomp rule with at most one argument comparison.
int add(void* ctx, uint32_t action, int nr, const scmp_arg_cmp* cmp) {
  return cmp ? seccomp_rule_add_exact_array(ctx, action, nr, 1, cmp)
             : seccomp_rule_add_exact_array(ctx, action, nr, 0, nullptr);
}

uint32_t action_of(const PolicyRule& r) {
  return r.errno_value == kAllow ? SCMP_ACT_ALLOW
                                 : SCMP_ACT_ERRNO(static_cast<uint16_t>(r.errno_value));
}

// libseccomp (2.5) refuses two comparisons of the same argument in one rule, and rules are
// OR-ed, so "arg0 is none of V" (the personality allow list) is written as a union of
// single-comparison rules that together match exactly the 32-bit values outside V:
//  * every value with a bit outside M (the union of V's bits, all-ones excepted) set, expressed
//    per such bit b as "b set and the next such bit c clear" (a cycle over those bits, so only
//    values with all of them set escape), plus
//  * the values with all those bits set that are not in V, matched by equality;
//  * values with only bits of M set must then each be in V, which is checked below.
// The test seccomp_test.cc runs personality() under the compiled filter to confirm.
Result<void> add_not_in(void* ctx, uint32_t action, int nr, const PolicyRule& r) {
  const auto& v = r.match.values;
  auto in_v = [&](uint64_t x) {
    for (uint64_t y : v) {
      if (y == x) return true;
    }
    return false;
  };
  uint32_t m = 0;
  for (uint64_t x : v) {
    if (x != 0xffffffff) m |= static_cast<uint32_t>(x);
  }
  // Every subset of M must be allowed, or this encoding is wrong for the table.
  for (uint32_t s = m;; s = (s - 1) & m) {
    if (!in_v(s)) {
      return fail(Code::kInternal, "seccomp: unsupported allow list for " + std::string(r.syscall));
    }
    if (s == 0) break;
  }
  std::vector<int> outside;
  for (int b = 0; b < 32; ++b) {
    if (!(m & (1u << b))) outside.push_back(b);
  }
  for (size_t i = 0; i < outside.size(); ++i) {
    uint32_t b = 1u << outside[i], c = 1u << outside[(i + 1) % outside.size()];
    scmp_arg_cmp cmp = SCMP_CMP(r.match.arg, SCMP_CMP_MASKED_EQ, b | c, b);
    if (int rc = add(ctx, action, nr, &cmp); rc < 0) return fail(seccomp_error("rule_add", rc));
  }
  // Values with every outside bit set: all-ones with any subset of M cleared.
  uint32_t all_outside = ~m;
  for (uint32_t s = m;; s = (s - 1) & m) {
    uint32_t x = all_outside | s;
    if (!in_v(x)) {
      scmp_arg_cmp cmp = SCMP_CMP(r.match.arg, SCMP_CMP_MASKED_EQ, 0xffffffff, x);
      if (int rc = add(ctx, action, nr, &cmp); rc < 0) return fail(seccomp_error("rule_add", rc));
    }
    if (s == 0) break;
  }
  // 64-bit values with high bits set: the kernel truncates personality's int argument, but
  // nothing legitimate passes them.
  scmp_arg_cmp high = SCMP_CMP(r.match.arg, SCMP_CMP_GT, 0xffffffffULL);
  if (int rc = add(ctx, action, nr, &high); rc < 0) return fail(seccomp_error("rule_add", rc));
  return {};
}

Result<void> add_rule(void* ctx, const PolicyRule& r, int nr) {
  const uint32_t action = action_of(r);
  const auto& m = r.match;
  switch (m.kind) {
    case SyscallMatch::Kind::kAll:
      if (int rc = add(ctx, action, nr, nullptr); rc < 0)
        return fail(seccomp_error("rule_add", rc));
      return {};
    case SyscallMatch::Kind::kArgEquals:
      for (uint64_t v : m.values) {
        scmp_arg_cmp cmp = SCMP_CMP(m.arg, SCMP_CMP_MASKED_EQ, 0xffffffff, v);
        if (int rc = add(ctx, action, nr, &cmp); rc < 0) {
          return fail(seccomp_error("rule_add", rc));
        }
      }
      return {};
    case SyscallMatch::Kind::kArgAnyBit:
      for (uint64_t v : m.values) {
        for (int b = 0; b < 64; ++b) {
          const uint64_t bit = uint64_t{1} << b;
          if (!(v & bit)) continue;
          scmp_arg_cmp cmp = SCMP_CMP(m.arg, SCMP_CMP_MASKED_EQ, bit, bit);
          if (int rc = add(ctx, action, nr, &cmp); rc < 0) {
            return fail(seccomp_error("rule_add", rc));
          }
        }
      }
      return {};
    case SyscallMatch::Kind::kArgNotIn:
      return add_not_in(ctx, action, nr, r);
    case SyscallMatch::Kind::kArgNot: {
      if (m.values.size() != 1)
        return fail(Code::kInternal,
                    "seccomp: kArgNot takes one value (" + std::string(r.syscall) + ")");
      scmp_arg_cmp cmp = SCMP_CMP(m.arg, SCMP_CMP_NE, m.values[0]);
      if (int rc = add(ctx, action, nr, &cmp); rc < 0) return fail(seccomp_error("rule_add", rc));
      return {};
    }
    case SyscallMatch::Kind::kArgsAre: {
      std::vector<scmp_arg_cmp> cmps;
      for (size_t i = 0; i + 1 < m.values.size(); i += 2)
        cmps.push_back(SCMP_CMP(static_cast<unsigned>(m.values[i]), SCMP_CMP_EQ, m.values[i + 1]));
      if (cmps.empty() || m.values.size() % 2 != 0)
        return fail(Code::kInternal,
                    "seccomp: kArgsAre takes (arg, value) pairs (" + std::string(r.syscall) + ")");
      if (int rc = seccomp_rule_add_exact_array(ctx, action, nr, static_cast<unsigned>(cmps.size()),
                                                cmps.data());
          rc < 0)
        return fail(seccomp_error("rule_add", rc));
      return {};
    }
  }
  return fail(Code::kInternal, "seccomp: unknown match kind");
}

Result<SeccompProgram> compile(const std::vector<PolicyRule>& policy, uint32_t unmatched,
                               bool notify_execs) {
  Ctx ctx(seccomp_init(unmatched));
  if (!ctx) return fail(Code::kInternal, "seccomp_init failed");
  // Only the native architecture is in the filter; libseccomp makes everything else (i386,
  // and x32 syscall numbers with __X32_SYSCALL_BIT on x86_64) take this action.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
      rc < 0) {
    return fail(seccomp_error("attr_set BADARCH", rc));
  }
  const bool x86_64 = seccomp_arch_native() == SCMP_ARCH_X86_64;
  SeccompProgram out;
  for (const auto& r : policy) {
    const std::string name(r.syscall);
    int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR && x86_64 && r.x86_64_nr >= 0) nr = r.x86_64_nr;
    if (nr < 0) {  // not a syscall of this architecture (e.g. iopl on arm64)
      out.unresolved.push_back(name);
      continue;
    }
    TRY_VOID_CTX(add_rule(ctx.get(), r, nr), "seccomp rule for " + name);
  }
  if (notify_execs) {
    for (const char* name : {"execve", "execveat"}) {
      int nr = seccomp_syscall_resolve_name(name);
      if (nr < 0) return fail(Code::kInternal, std::string("seccomp: no syscall ") + name);
      if (int rc = add(ctx.get(), SCMP_ACT_NOTIFY, nr, nullptr); rc < 0)
        return fail(seccomp_error(std::string("rule_add notify ") + name, rc));
    }
    out.notify_execs = true;
  }

  // Through a pipe that holds a program of BPF_MAXINSNS and more (64 KiB by default; raised
  // where the kernel allows), read back once libseccomp has written all of it.
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return fail_sys("pipe2", "seccomp program");
  UniqueFd rd(ends[0]), wr(ends[1]);
  constexpr size_t kMax = BPF_MAXINSNS * sizeof(sock_filter);
  (void)::fcntl(wr.get(), F_SETPIPE_SZ, static_cast<int>(2 * kMax));
  (void)::fcntl(wr.get(), F_SETFL, O_NONBLOCK);  // a program that does not fit fails, not hangs
  if (int rc = seccomp_export_bpf(ctx.get(), wr.get()); rc < 0) {
    return fail(seccomp_error("export_bpf", rc));
  }
  wr.reset();
  std::vector<char> bytes(kMax + 1);
  size_t size = 0;
  for (;;) {
    ssize_t n = ::read(rd.get(), bytes.data() + size, bytes.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("read", "seccomp program");
    if (n == 0 || (size += static_cast<size_t>(n)) == bytes.size()) break;
  }
  if (size == 0 || size % sizeof(sock_filter) != 0 || size > kMax) {
    return fail(Code::kInternal, "seccomp: bad exported program size");
  }
  out.instructions.resize(size / sizeof(sock_filter));
  std::memcpy(out.instructions.data(), bytes.data(), size);
  return out;
}

}  // namespace

Result<SeccompProgram> compile_policy(const std::vector<PolicyRule>& policy, bool notify_execs) {
  return compile(policy, SCMP_ACT_ALLOW, notify_execs);
}

Result<SeccompProgram> compile_policy(const SeccompRole& role) {
  return compile(role.rules,
                 role.unmatched == Unmatched::kAllow ? SCMP_ACT_ALLOW : SCMP_ACT_KILL_PROCESS,
                 false);
}

int install_seccomp(const SeccompProgram& program) {
  sock_fprog prog;
  prog.len = static_cast<unsigned short>(program.instructions.size());
  prog.filter = const_cast<sock_filter*>(program.instructions.data());
  if (sys_seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return errno;
  return 0;
}

int install_seccomp_listener(const SeccompProgram& program, int* listener) {
  sock_fprog prog;
  prog.len = static_cast<unsigned short>(program.instructions.size());
  prog.filter = const_cast<sock_filter*>(program.instructions.data());
  int fd = sys_seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
  if (fd < 0) return errno;
  *listener = fd;
  return 0;
}

}  // namespace space::host
