// The sandbox's mount plan and its async-signal-safe executor (see mounts.h).
#include "runtime/linux/mounts.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace space::runtime::linux {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kShmMax = 64ull << 20;
constexpr unsigned long kBind = MS_BIND | MS_REC;

// Docker's masks: kernel interfaces that leak host state or act on the host.
constexpr const char* kMaskedProcFiles[] = {
    "kcore", "keys", "timer_list", "sched_debug", "sysrq-trigger", "latency_stats", "timer_stats"};
constexpr const char* kMaskedProcDirs[] = {"acpi", "scsi"};
constexpr const char* kReadOnlyProcDirs[] = {"sys", "irq", "bus", "fs"};
constexpr const char* kHostDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

struct Builder {
  FsPlan& plan;
  std::vector<FsOp>* ops;

  void add(FsOp op) { ops->push_back(op); }
  void mkdirs(const std::string& target, unsigned mode) {
    add({.kind = FsOp::Kind::kMkdirs,
         .target = plan.keep(target),
         .mode = mode,
         .what = plan.keep("create " + target)});
  }
  void mount(const char* fstype, const std::string& target, unsigned long flags,
             const std::string& data, const std::string& what) {
    add({.kind = FsOp::Kind::kMount,
         .source = plan.keep(fstype),
         .target = plan.keep(target),
         .fstype = plan.keep(fstype),
         .flags = flags,
         .data = plan.keep(data),
         .what = plan.keep(what)});
  }
  void bind(const std::string& source, const std::string& target, const std::string& what,
            bool optional = false) {
    add({.kind = FsOp::Kind::kMount,
         .optional = optional,
         .source = plan.keep(source),
         .target = plan.keep(target),
         .flags = kBind,
         .what = plan.keep(what)});
  }
  void read_only(const std::string& target, unsigned long extra, bool optional = false) {
    add({.kind = FsOp::Kind::kReadOnly,
         .optional = optional,
         .target = plan.keep(target),
         .flags = extra,
         .what = plan.keep("make " + target + " read-only")});
  }
};

std::string host(const std::string& path) { return std::string(kOldRoot) + path; }

}  // namespace

Result<FsPlan> make_fs_plan(const SandboxSpec& spec, int lower_fd) {
  FsPlan plan;
  const Limits& lim = spec.limits;

  Builder b{plan, &plan.before_pivot};
  // `layer` already holds the writable layer (writable_layer.h), attached by the launcher: a
  // size-capped tmpfs, so a full disk is ENOSPC inside the sandbox.
  // userxattr: overlay in a user namespace keeps its metadata in user.overlay.* xattrs.
  b.mount("overlay", "root", MS_NOSUID | MS_NODEV,
          "lowerdir=/proc/self/fd/" + std::to_string(lower_fd) +
              ",upperdir=layer/upper,workdir=layer/work,userxattr",
          "mount overlay");

  b.ops = &plan.after_pivot;
  // Read-only host directories (the host image's /usr, /etc/ssl, ...).
  for (const fs::path& p : spec.image.ro_binds) {
    if (!p.is_absolute() || p.lexically_normal() != p || p == "/") {
      return fail(Code::kInvalidArgument, "bad read-only bind \"" + p.string() + "\"");
    }
    std::error_code ec;
    // Resolved here, on the host: after pivot_root an absolute symlink in the host path would
    // resolve inside the sandbox instead.
    fs::path source = fs::canonical(p, ec);
    if (ec) return fail(Code::kNotFound, "read-only bind \"" + p.string() + "\": " + ec.message());
    const bool dir = fs::is_directory(source, ec);
    if (dir) {
      b.mkdirs(p.string(), 0755);
    } else {
      b.mkdirs(p.parent_path().string(), 0755);
      b.add({.kind = FsOp::Kind::kTouch,
             .target = plan.keep(p.string()),
             .mode = 0644,
             .what = plan.keep("create " + p.string())});
    }
    b.bind(host(source.string()), p.string(), "bind " + p.string());
    b.read_only(p.string(), 0);
  }

  // /proc: a fresh instance for the sandbox's pid namespace, with Docker-like masks.
  b.mkdirs("/proc", 0555);
  b.mount("proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "", "mount /proc");
  for (const char* f : kMaskedProcFiles) {
    b.bind(host("/dev/null"), std::string("/proc/") + f, std::string("mask /proc/") + f, true);
  }
  for (const char* d : kMaskedProcDirs) {
    b.add({.kind = FsOp::Kind::kMount,
           .optional = true,
           .source = "tmpfs",
           .target = plan.keep(std::string("/proc/") + d),
           .fstype = "tmpfs",
           .flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
           .data = "size=4k,mode=0555",
           .what = plan.keep(std::string("mask /proc/") + d)});
  }
  for (const char* d : kReadOnlyProcDirs) {
    const std::string p = std::string("/proc/") + d;
    b.bind(p, p, "bind " + p, true);
    b.read_only(p, MS_NOEXEC, true);
  }

  // /dev: a small tmpfs with the harmless host devices, a private devpts and a capped /dev/shm.
  b.mkdirs("/dev", 0755);
  b.mount("tmpfs", "/dev", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k", "mount /dev");
  for (const char* d : kHostDevices) {
    const std::string p = std::string("/dev/") + d;
    b.add({.kind = FsOp::Kind::kTouch,
           .target = plan.keep(p),
           .mode = 0666,
           .what = plan.keep("create " + p)});
    b.bind(host(p), p, "bind " + p);
  }
  const std::pair<const char*, const char*> links[] = {{"/proc/self/fd", "/dev/fd"},
                                                       {"/proc/self/fd/0", "/dev/stdin"},
                                                       {"/proc/self/fd/1", "/dev/stdout"},
                                                       {"/proc/self/fd/2", "/dev/stderr"},
                                                       {"pts/ptmx", "/dev/ptmx"}};
  for (const auto& [to, at] : links) {
    b.add({.kind = FsOp::Kind::kSymlink,
           .source = to,
           .target = at,
           .what = plan.keep(std::string("symlink ") + at)});
  }
  b.mkdirs("/dev/pts", 0755);
  b.mount("devpts", "/dev/pts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620,gid=5",
          "mount /dev/pts");
  b.mkdirs("/dev/shm", 01777);
  b.mount("tmpfs", "/dev/shm", MS_NOSUID | MS_NODEV | MS_NOEXEC,
          "mode=1777,size=" + std::to_string(std::min(kShmMax, lim.memory_bytes)),
          "mount /dev/shm");

  // /sys: empty and read-only. A real sysfs cannot be mounted here: sysfs requires
  // CAP_SYS_ADMIN over the network namespace's owner, and the sandbox's network namespace is
  // deliberately owned by the host user namespace.
  b.mkdirs("/sys", 0555);
  b.mount("tmpfs", "/sys", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555",
          "mount /sys");

  // /tmp lives in the overlay (so it counts against the disk limit and shows in diffs).
  b.mkdirs("/tmp", 01777);
  b.add({.kind = FsOp::Kind::kChmod, .target = "/tmp", .mode = 01777, .what = "chmod /tmp"});
  return plan;
}

// ---------------------------------------------------------------------------------------------
// Child side. Only syscalls and stack buffers from here on.

namespace {

int mkdirs(const char* path, unsigned mode) {
  char buf[PATH_MAX];
  size_t n = 0;
  while (path[n] != '\0') {
    if (n + 1 >= sizeof buf) return ENAMETOOLONG;
    buf[n] = path[n];
    ++n;
  }
  buf[n] = '\0';
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (::mkdir(buf, mode) != 0 && errno != EEXIST) return errno;
    buf[i] = saved;
  }
  return 0;
}

int make_read_only(const char* target, unsigned long extra) {
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (extra & MS_NOEXEC) attr.attr_set |= MOUNT_ATTR_NOEXEC;
  if (::mount_setattr(AT_FDCWD, target, AT_RECURSIVE, &attr, sizeof attr) == 0) return 0;
  if (errno != ENOSYS) return errno;
  // Before Linux 5.12: remount the top mount only, keeping the flags the kernel locks for
  // mounts inherited from a more privileged namespace (atime, noexec).
  struct statfs st;
  if (::statfs(target, &st) != 0) return errno;
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | extra;
  if (st.f_flags & ST_NOEXEC) flags |= MS_NOEXEC;
  if (st.f_flags & ST_NOATIME) flags |= MS_NOATIME;
  if (st.f_flags & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (st.f_flags & ST_RELATIME) flags |= MS_RELATIME;
  if (::mount(nullptr, target, nullptr, flags, nullptr) != 0) return errno;
  return 0;
}

int run_op(const FsOp& op) {
  switch (op.kind) {
    case FsOp::Kind::kMount:
      if (::mount(op.source, op.target, op.fstype, op.flags, op.data) != 0) return errno;
      return 0;
    case FsOp::Kind::kReadOnly:
      return make_read_only(op.target, op.flags);
    case FsOp::Kind::kMkdirs:
      return mkdirs(op.target, op.mode);
    case FsOp::Kind::kTouch: {
      int fd = ::open(op.target, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, op.mode);
      if (fd < 0) return errno;
      ::close(fd);
      return 0;
    }
    case FsOp::Kind::kSymlink:
      if (::symlink(op.source, op.target) != 0) return errno;
      return 0;
    case FsOp::Kind::kChmod:
      if (::chmod(op.target, op.mode) != 0) return errno;
      return 0;
  }
  return EINVAL;
}

}  // namespace

int run_fs_ops(const std::vector<FsOp>& ops, size_t* failed) {
  for (size_t i = 0; i < ops.size(); ++i) {
    int err = run_op(ops[i]);
    if (err == ENOENT && ops[i].optional) continue;
    if (err != 0) {
      *failed = i;
      return err;
    }
  }
  return 0;
}

}  // namespace space::runtime::linux
