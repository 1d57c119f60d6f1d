// The writable layer the daemon makes (writable_layer.h) and SandboxSpec::populate_upper: the
// layer's caps and owners on their own, then real sandboxes whose upper layer the "daemon" (this
// test) filled before they started, checked from inside with the probe agent and from the host.
#include "runtime/linux/writable_layer.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_sandbox.h"

namespace space::runtime::linux::testing {
namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Children of every thread of this process (the sandbox's agent would be one).
std::string children() {
  std::string all;
  for (const auto& t : fs::directory_iterator("/proc/self/task"))
    all += slurp(t.path() / "children");
  return all;
}

std::string errno_str(int e) { return std::to_string(e); }

// What a populate callback does, as Result-returning steps on a directory fd.
Result<void> make_dir(int dir, const char* name, mode_t mode, uid_t owner) {
  if (::mkdirat(dir, name, mode) != 0) return fail_sys("mkdirat", name);
  if (::fchmodat(dir, name, mode, 0) != 0) return fail_sys("fchmodat", name);
  if (::fchownat(dir, name, owner, owner, AT_SYMLINK_NOFOLLOW) != 0) {
    return fail_sys("fchownat", name);
  }
  return {};
}

Result<void> make_file(int dir, const char* name, const std::string& data, mode_t mode,
                       uid_t owner) {
  UniqueFd fd(::openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return fail_sys("openat", name);
  if (::write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    return fail_sys("write", name);
  }
  if (::fchmod(fd.get(), mode) != 0) return fail_sys("fchmod", name);
  if (::fchown(fd.get(), owner, owner) != 0) return fail_sys("fchown", name);
  return {};
}

Result<void> make_whiteout(int dir, const char* name, uid_t owner) {
  if (::mknodat(dir, name, S_IFCHR | 0000, makedev(0, 0)) != 0) return fail_sys("mknodat", name);
  if (::fchownat(dir, name, owner, owner, AT_SYMLINK_NOFOLLOW) != 0) {
    return fail_sys("fchownat", name);
  }
  return {};
}

Result<void> make_opaque(int dir, const char* name) {
  UniqueFd fd(::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_sys("openat", name);
  if (::fsetxattr(fd.get(), "user.overlay.opaque", "y", 1, 0) != 0) {
    return fail_sys("fsetxattr", "user.overlay.opaque");
  }
  return {};
}

// Writes `bytes` of 'x' to `name` in 1 MiB chunks.
Result<void> write_bytes(int dir, const char* name, uint64_t bytes, uid_t owner) {
  UniqueFd fd(::openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) return fail_sys("openat", name);
  if (::fchown(fd.get(), owner, owner) != 0) return fail_sys("fchown", name);
  std::string chunk(1 << 20, 'x');
  for (uint64_t done = 0; done < bytes;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - done));
    ssize_t w = ::write(fd.get(), chunk.data(), n);
    if (w < 0) return fail_sys("write", name);
    done += static_cast<uint64_t>(w);
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// The layer on its own.

class PopulateLayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  }
};

TEST_F(PopulateLayerTest, OwnersModesAndDetached) {
  const std::string mounts_before = slurp("/proc/self/mountinfo");
  Limits limits;
  limits.disk_bytes = 2ull << 20;
  auto layer = make_writable_layer(limits, 1234567);
  ASSERT_TRUE(layer) << layer.error().message();
  struct statfs sfs;
  ASSERT_EQ(::fstatfs(layer->get(), &sfs), 0);
  EXPECT_EQ(sfs.f_type, TMPFS_MAGIC);
  EXPECT_TRUE(sfs.f_flags & ST_NOSUID);
  EXPECT_TRUE(sfs.f_flags & ST_NODEV);
  EXPECT_EQ(sfs.f_blocks * sfs.f_bsize, 2ull << 20);
  EXPECT_EQ(sfs.f_files, 4096u) << "at least 4096 inodes by default";
  struct stat st;
  ASSERT_EQ(::fstat(layer->get(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_uid, 1234567u);
  EXPECT_EQ(st.st_gid, 1234567u);
  for (auto [name, mode] : {std::pair{"upper", 0755u}, std::pair{"work", 0700u}}) {
    ASSERT_EQ(::fstatat(layer->get(), name, &st, AT_SYMLINK_NOFOLLOW), 0) << name;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << name;
    EXPECT_EQ(st.st_mode & 07777, mode) << name;
    EXPECT_EQ(st.st_uid, 1234567u) << name;
    EXPECT_EQ(st.st_gid, 1234567u) << name;
  }
  // Nothing was mounted on the host: the tmpfs is reachable only through the fd.
  EXPECT_EQ(slurp("/proc/self/mountinfo"), mounts_before);
}

TEST_F(PopulateLayerTest, SizeAndInodeCapsHoldForTheDaemon) {
  Limits limits;
  limits.disk_bytes = 2ull << 20;
  limits.disk_inodes = 64;
  auto layer = make_writable_layer(limits, 1234567);
  ASSERT_TRUE(layer) << layer.error().message();
  auto r = populate_writable_layer(layer->get(), [](int upper) -> Result<void> {
    return write_bytes(upper, "big", 8ull << 20, 0);
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().sys_errno(), ENOSPC) << r.error().message();
  EXPECT_EQ(r.error().message().rfind("populating the writable layer: write big: ", 0), 0u)
      << r.error().message();
  ASSERT_EQ(::unlinkat(layer->get(), "upper/big", 0), 0);

  int created = 0, err = 0;
  auto r2 = populate_writable_layer(layer->get(), [&](int upper) -> Result<void> {
    for (; created < 1000; ++created) {
      std::string name = "f" + std::to_string(created);
      UniqueFd fd(::openat(upper, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (!fd) {
        err = errno;
        return fail_sys("openat", name);
      }
    }
    return {};
  });
  ASSERT_FALSE(r2);
  EXPECT_EQ(err, ENOSPC);
  EXPECT_LT(created, 64) << "nr_inodes caps the daemon's writes too";
  EXPECT_GT(created, 32);

  Limits tiny;
  tiny.disk_bytes = 512 << 10;
  auto bad = make_writable_layer(tiny, 1234567);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Sandboxes started over a populated layer.

class PopulateUpperTest : public SandboxTest {
 protected:
  // Lower files the populated upper whiteouts, hides (opaque) or merges with.
  void make_lower() {
    fs::create_directories(rootfs_ / "opt" / "data" / "sub");
    std::ofstream(rootfs_ / "etc" / "hidden") << "lower hidden\n";
    std::ofstream(rootfs_ / "etc" / "kept") << "kept\n";
    std::ofstream(rootfs_ / "opt" / "data" / "old1") << "old1\n";
    std::ofstream(rootfs_ / "opt" / "data" / "old2") << "old2\n";
    std::ofstream(rootfs_ / "opt" / "data" / "sub" / "deep") << "deep\n";
    std::ofstream(rootfs_ / "opt" / "beside") << "beside\n";
  }

  // After a failed create: no cgroup, mount, process, fd or staging directory of it is left.
  void expect_nothing_left(const SandboxSpec& s, size_t fds_before,
                           const std::string& mounts_before) {
    EXPECT_EQ(count_fds(), fds_before);
    EXPECT_EQ(slurp("/proc/self/mountinfo"), mounts_before);
    EXPECT_EQ(children(), "") << "a sandbox process was started or not reaped";
    auto layout = host::detect_cgroups();
    ASSERT_TRUE(layout);
    std::vector<fs::path> mounts;
    for (const auto& entry : layout->v1) mounts.push_back(entry.second);
    if (!layout->unified.empty()) mounts.push_back(layout->unified);
    for (const fs::path& m : mounts) {
      EXPECT_FALSE(fs::exists(m / cgroup_name_ / s.id)) << "left behind: " << (m / cgroup_name_);
    }
    EXPECT_FALSE(fs::exists(s.dir / "mnt"));
  }
};

TEST_F(PopulateUpperTest, SandboxSeesWhatTheDaemonWrote) {
  make_lower();
  SandboxSpec s = spec();
  const uid_t root = s.uid_base, user = s.uid_base + 1000;
  int calls = 0;
  pid_t called_in = 0;
  std::string children_during;
  ino_t owned_ino = 0;
  s.populate_upper = [&](int upper) -> Result<void> {
    ++calls;
    called_in = ::getpid();
    children_during = children();
    // (a) a file of sandbox uid 1000, mode 0640, with a user xattr.
    TRY_VOID(make_file(upper, "owned.txt", "secret\n", 0640, user));
    UniqueFd owned(::openat(upper, "owned.txt", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!owned) return fail_sys("openat", "owned.txt");
    if (::fsetxattr(owned.get(), "user.test", "hello", 5, 0) != 0) {
      return fail_sys("fsetxattr", "user.test");
    }
    struct stat st;
    if (::fstat(owned.get(), &st) != 0) return fail_sys("fstat", "owned.txt");
    owned_ino = st.st_ino;
    // (b) a whiteout over a lower file, in a merged (not opaque) directory.
    TRY_VOID(make_dir(upper, "etc", 0755, root));
    TRY_VOID(make_whiteout(upper, "etc/hidden", root));
    // (c) an opaque directory over a lower one, inside a merged one.
    TRY_VOID(make_dir(upper, "opt", 0755, root));
    TRY_VOID(make_dir(upper, "opt/data", 0755, root));
    TRY_VOID(make_opaque(upper, "opt/data"));
    TRY_VOID(make_file(upper, "opt/data/new", "new\n", 0644, root));
    // (d) a symlink and a hard link.
    if (::symlinkat("owned.txt", upper, "link") != 0) return fail_sys("symlinkat", "link");
    if (::fchownat(upper, "link", root, root, AT_SYMLINK_NOFOLLOW) != 0) {
      return fail_sys("fchownat", "link");
    }
    TRY_VOID(make_file(upper, "hl-a", "linked\n", 0644, user));
    if (::linkat(upper, "hl-a", upper, "hl-b", 0) != 0) return fail_sys("linkat", "hl-b");
    return {};
  };
  auto inst = start(s);
  ASSERT_TRUE(inst);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(called_in, ::getpid()) << "the callback runs in the daemon's process";
  EXPECT_EQ(children_during, "") << "no process of the sandbox may run before it is filled";
  ProbeClient probe(inst->channel_fd());

  // (a) owners, mode, content and xattr as the sandbox sees them.
  auto r = probe.ask("stat /owned.txt");
  ASSERT_EQ(r["errno"], "0");
  EXPECT_EQ(r["type"], "reg");
  EXPECT_EQ(r["uid"], "1000");
  EXPECT_EQ(r["gid"], "1000");
  EXPECT_EQ(r["mode"], "640");
  EXPECT_EQ(probe.ask("cat /owned.txt")["data"], "secret|");
  r = probe.ask("getxattr /owned.txt user.test");
  EXPECT_EQ(r["errno"], "0");
  EXPECT_EQ(r["value"], "hello");

  // (b) the whiteout hides the lower file; its siblings stay.
  EXPECT_EQ(probe.ask("stat /etc/hidden")["errno"], errno_str(ENOENT));
  EXPECT_EQ(probe.ask("ls /etc")["entries"], "kept");
  EXPECT_EQ(probe.ask("cat /etc/kept")["data"], "kept|");

  // (c) the opaque directory shows only the new content; its parent is still merged.
  EXPECT_EQ(probe.ask("ls /opt/data")["entries"], "new");
  EXPECT_EQ(probe.ask("stat /opt/data/old1")["errno"], errno_str(ENOENT));
  EXPECT_EQ(probe.ask("stat /opt/data/sub/deep")["errno"], errno_str(ENOENT));
  EXPECT_EQ(probe.ask("cat /opt/data/new")["data"], "new|");
  EXPECT_EQ(probe.ask("ls /opt")["entries"], "beside,data");
  r = probe.ask("stat /opt/data");
  EXPECT_EQ(r["uid"], "0");
  EXPECT_EQ(r["mode"], "755");

  // (d) the symlink and the hard link.
  r = probe.ask("readlink /link");
  EXPECT_EQ(r["errno"], "0");
  EXPECT_EQ(r["target"], "owned.txt");
  EXPECT_EQ(probe.ask("stat /link")["uid"], "0");
  EXPECT_EQ(probe.ask("cat /link")["data"], "secret|");
  auto a = probe.ask("stat /hl-a"), b = probe.ask("stat /hl-b");
  ASSERT_EQ(a["errno"], "0");
  ASSERT_EQ(b["errno"], "0");
  EXPECT_EQ(a["ino"], b["ino"]);
  EXPECT_EQ(a["nlink"], "2");
  EXPECT_EQ(a["uid"], "1000");
  EXPECT_EQ(probe.ask("append /hl-a more")["errno"], "0");
  EXPECT_EQ(probe.ask("cat /hl-b")["data"], "linked|more");

  // Sandbox root owns what the daemon wrote: it writes, chowns and removes those files, and the
  // changes land in the very upper inodes (nothing to copy up).
  EXPECT_EQ(probe.ask("append /owned.txt root-was-here")["errno"], "0");
  EXPECT_EQ(probe.ask("chown /owned.txt 0 0")["errno"], "0");
  r = probe.ask("stat /owned.txt");
  EXPECT_EQ(r["uid"], "0");
  EXPECT_EQ(r["gid"], "0");
  EXPECT_EQ(probe.ask("unlink /opt/data/new")["errno"], "0");
  EXPECT_EQ(probe.ask("ls /opt/data")["entries"], "");
  EXPECT_EQ(probe.ask("unlink /etc/kept")["errno"], "0");

  auto layer = inst->writable_layer();
  ASSERT_TRUE(layer) << layer.error().message();
  struct stat st;
  ASSERT_EQ(::fstatat(layer->get(), "upper/owned.txt", &st, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_EQ(st.st_ino, owned_ino);
  EXPECT_EQ(st.st_uid, root);
  EXPECT_EQ(st.st_gid, root);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(std::strlen("secret\nroot-was-here")));
  EXPECT_TRUE(fs::exists(rootfs_ / "etc" / "kept")) << "the lower image is untouched";
  ASSERT_EQ(::fstatat(layer->get(), "upper/etc/kept", &st, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0))
      << "overlayfs whiteouts the sandbox's own deletes the same way";
  ASSERT_TRUE(inst->destroy());
}

TEST_F(PopulateUpperTest, PopulatedBytesCountAgainstTheDiskLimit) {
  SandboxSpec s = spec();
  s.limits.disk_bytes = 8ull << 20;
  s.populate_upper = [&](int upper) {
    return write_bytes(upper, "ballast", 6ull << 20, s.uid_base);
  };
  auto inst = start(s);
  ASSERT_TRUE(inst);
  ProbeClient probe(inst->channel_fd());
  auto r = probe.ask("stat /ballast");
  EXPECT_EQ(r["size"], std::to_string(6ull << 20));
  r = probe.ask("fill 32");
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r["errno"], errno_str(ENOSPC));
  EXPECT_LE(std::stoll(r["written"]), 2ll << 20) << "the sandbox gets only what the daemon left";
  ASSERT_TRUE(inst->destroy());
}

TEST_F(PopulateUpperTest, WritingPastTheDiskLimitFailsCreate) {
  SandboxSpec s = spec();
  s.limits.disk_bytes = 4ull << 20;
  s.populate_upper = [&](int upper) { return write_bytes(upper, "big", 16ull << 20, s.uid_base); };
  const size_t fds_before = count_fds();
  const std::string mounts_before = slurp("/proc/self/mountinfo");
  auto r = runtime_->create(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().sys_errno(), ENOSPC);
  EXPECT_EQ(r.error().message(), "starting sandbox " + s.id +
                                     ": populating the writable layer: write big: No space left "
                                     "on device (ENOSPC)");
  expect_nothing_left(s, fds_before, mounts_before);
}

TEST_F(PopulateUpperTest, FailingCallbackFailsCreateAndLeavesNothing) {
  SandboxSpec s = spec();
  int calls = 0;
  s.populate_upper = [&](int upper) -> Result<void> {
    ++calls;
    TRY_VOID(make_file(upper, "partial", "half a snapshot\n", 0644, s.uid_base));
    return fail(Code::kProtocol, "snapshot chunk 3 is corrupt");
  };
  const size_t fds_before = count_fds();
  const std::string mounts_before = slurp("/proc/self/mountinfo");
  auto r = runtime_->create(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_EQ(
      r.error().message(),
      "starting sandbox " + s.id + ": populating the writable layer: snapshot chunk 3 is corrupt");
  expect_nothing_left(s, fds_before, mounts_before);

  // The same id starts cleanly afterwards (what a retried rollback does).
  s.populate_upper = nullptr;
  auto inst = start(s);
  ASSERT_TRUE(inst);
  ProbeClient probe(inst->channel_fd());
  EXPECT_EQ(probe.ask("stat /partial")["errno"], errno_str(ENOENT));
  ASSERT_TRUE(inst->destroy());
}

}  // namespace
}  // namespace space::runtime::linux::testing
