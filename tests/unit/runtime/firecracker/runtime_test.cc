// The firecracker runtime without KVM: what can be checked on any host. The jailer's command
// line and the guest's boot arguments, the version check, what `space doctor` reports as
// missing, that a create on a host without KVM fails with that reason and leaves nothing
// behind, the host side of Firecracker's vsock handshake against a peer that speaks it, and
// the sparse file helpers behind diff snapshots and template disks. The whole lifecycle on
// KVM is tests/kvm (make test-kvm).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "runtime/firecracker/firecracker_runtime.h"
#include "runtime/firecracker/vsock.h"
#include "runtime/sparse_file.h"

namespace space::runtime::firecracker {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

fs::path temp_dir() {
  char tmpl[] = "/tmp/space-fc-test-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

TEST(FirecrackerJail, IdAndJailerArgv) {
  EXPECT_EQ(jail_id("sb_0a1b2c"), "sb-0a1b2c");
  Config c;
  c.jailer = "/usr/local/bin/jailer";
  c.firecracker = "/usr/local/bin/firecracker";
  c.dir = "/var/lib/space/firecracker";
  auto argv = jailer_argv(c, "sb-0a1b2c", 300000, "/api.sock");
  std::vector<std::string> want = {"/usr/local/bin/jailer",
                                   "--id",
                                   "sb-0a1b2c",
                                   "--exec-file",
                                   "/usr/local/bin/firecracker",
                                   "--uid",
                                   "300000",
                                   "--gid",
                                   "300000",
                                   "--chroot-base-dir",
                                   "/var/lib/space/firecracker/jails",
                                   "--resource-limit",
                                   "no-file=1024",
                                   "--",
                                   "--api-sock",
                                   "/api.sock",
                                   "--level",
                                   "Warning"};
  EXPECT_EQ(argv, want);
}

TEST(FirecrackerJail, BootArgsCarryTheGuestParameters) {
  Config c;
  c.egress_ports = {3128, 443, 80};
  c.agent_port = 1024;
  std::string a = boot_args(c, "sb_0a1b2c", 256);
  for (const char* want :
       {"console=ttyS0", "pci=off", "rdinit=/init", "space.hostname=sb_0a1b2c", "space.pids=256",
        "space.egress=3128,443,80", "space.channel=vsock:1024"})
    EXPECT_NE(a.find(want), std::string::npos) << want << " not in " << a;
}

TEST(FirecrackerJail, ParsesVersions) {
  EXPECT_EQ(parse_version("Firecracker v1.16.0"), (std::pair{1, 16}));
  EXPECT_EQ(parse_version("Firecracker v1.10.1\n"), (std::pair{1, 10}));
  EXPECT_EQ(parse_version("jailer 1.7"), (std::pair{1, 7}));
  EXPECT_FALSE(parse_version("firecracker: command not found"));
  EXPECT_FALSE(parse_version(""));
}

// This test host has neither /dev/kvm nor Firecracker: the runtime says so, precisely, and a
// create fails with that reason without leaving a jail, cgroup or file.
TEST(FirecrackerRuntime, SaysWhatIsMissingAndCreatesNothing) {
  fs::path dir = temp_dir();
  Config c;
  c.kvm_device = dir / "kvm";  // absent on every host: the KVM check is the first reason
  c.firecracker = "space-no-such-firecracker";
  c.jailer = "space-no-such-jailer";
  c.kernel = dir / "no-vmlinux";
  c.dir = dir / "fc";
  auto rt = FirecrackerRuntime::create(c);
  auto missing = rt->missing();
  auto has = [&](const std::string& what) {
    for (auto& m : missing)
      if (m.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("no " + (dir / "kvm").string()));
  EXPECT_TRUE(has("space-no-such-firecracker not found in PATH"));
  EXPECT_TRUE(has("jailer"));
  EXPECT_TRUE(has("guest kernel"));
  auto doc = rt->doctor();
  EXPECT_FALSE(doc["available"].get<bool>());
  EXPECT_EQ(doc["missing"].size(), missing.size());
  EXPECT_EQ(doc["supported_versions"], "1.10 to 1.16");

  SandboxSpec spec;
  spec.id = "sb_fc0001";
  spec.dir = dir / "sb";
  fs::create_directories(spec.dir);
  spec.image.name = "img";
  spec.image.vm_disk = dir / "disk.ext4";
  spec.uid_base = 400000;
  auto inst = rt->create(spec);
  ASSERT_FALSE(inst);
  EXPECT_EQ(inst.error().code(), Code::kUnavailable);
  EXPECT_NE(inst.error().message().find("no " + (dir / "kvm").string()), std::string::npos)
      << inst.error().message();
  EXPECT_FALSE(fs::exists(c.dir / "jails"));
  EXPECT_TRUE(fs::is_empty(spec.dir));
  EXPECT_FALSE(fs::exists("/sys/fs/cgroup/memory/space/sb_fc0001"));
  fs::remove_all(dir);
}

TEST(FirecrackerRuntime, ChecksTheKernelFormat) {
  fs::path dir = temp_dir();
  Config c;
  c.kernel = dir / "bzImage";
  { std::ofstream(c.kernel) << "MZ not an ELF"; }
  c.dir = dir;
  auto rt = FirecrackerRuntime::create(c);
  bool found = false;
  for (auto& m : rt->missing())
    found |= m.find("not an uncompressed ELF vmlinux") != std::string::npos;
  EXPECT_TRUE(found);
  fs::remove_all(dir);
}

// --- vsock: a peer that speaks Firecracker's host-side protocol on a Unix socket.
class VsockPeer {
 public:
  // `refusals`: connections hung up on before answering (the guest does not listen yet).
  VsockPeer(const fs::path& dir, int refusals, std::string answer)
      : refusals_(refusals), answer_(std::move(answer)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::string p = (dir / "v.sock").string();
    std::memcpy(a.sun_path, p.c_str(), p.size());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~VsockPeer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string request;  // the last CONNECT line

 private:
  void serve() {
    for (;;) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      char buf[64];
      ssize_t n = ::read(c, buf, sizeof buf);
      if (n > 0) request.assign(buf, static_cast<size_t>(n));
      if (refusals_-- > 0) {
        ::close(c);
        continue;
      }
      // The answer and the guest's first bytes in one write: the client must not eat them.
      std::string out = answer_ + "hello from the guest";
      (void)!::write(c, out.data(), out.size());
      ::shutdown(c, SHUT_WR);
      char sink[16];
      while (::read(c, sink, sizeof sink) > 0) {
      }
      ::close(c);
    }
  }
  int fd_;
  int refusals_;
  std::string answer_;
  std::thread thread_;
};

TEST(FirecrackerVsock, HandshakeRetriesUntilTheGuestListens) {
  fs::path dir = temp_dir();
  VsockPeer peer(dir, 3, "OK 1073741824\n");
  UniqueFd d(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto fd =
      vsock_connect(d.get(), "v.sock", 1024, ::geteuid(), Clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(fd) << fd.error().message();
  EXPECT_EQ(peer.request, "CONNECT 1024\n");
  std::string got;
  char buf[64];
  ssize_t n;
  while ((n = ::read(fd->get(), buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(got, "hello from the guest");
  fs::remove_all(dir);
}

TEST(FirecrackerVsock, RefusesAWrongAnswerAndAWrongPeer) {
  fs::path dir = temp_dir();
  UniqueFd d(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  {
    VsockPeer peer(dir, 0, "NO\n");
    auto fd =
        vsock_connect(d.get(), "v.sock", 1024, ::geteuid(), Clock::now() + std::chrono::seconds(2));
    ASSERT_FALSE(fd);
    EXPECT_EQ(fd.error().code(), Code::kProtocol);
  }
  fs::remove(dir / "v.sock");
  {
    // The socket is served by us, not by the jail's uid: a swapped socket is refused.
    VsockPeer peer(dir, 0, "OK 1\n");
    auto fd =
        vsock_connect(d.get(), "v.sock", 1024, 123457, Clock::now() + std::chrono::seconds(2));
    ASSERT_FALSE(fd);
    EXPECT_EQ(fd.error().code(), Code::kPermissionDenied);
  }
  EXPECT_FALSE(connect_jailed(d.get(), "../x", 0, Clock::now()));
  fs::remove_all(dir);
}

TEST(FirecrackerVsock, GivesUpAtTheDeadline) {
  fs::path dir = temp_dir();
  UniqueFd d(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto t0 = Clock::now();
  auto fd = vsock_connect(d.get(), "v.sock", 1024, 0, t0 + std::chrono::milliseconds(200));
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().code(), Code::kTimeout);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  {
    VsockPeer peer(dir, 1000000, "");  // never listens
    auto fd2 = vsock_connect(d.get(), "v.sock", 1024, ::geteuid(),
                             Clock::now() + std::chrono::milliseconds(200));
    ASSERT_FALSE(fd2);
    EXPECT_EQ(fd2.error().code(), Code::kUnavailable);
  }
  fs::remove_all(dir);
}

// --- memory files.
UniqueFd make_file(const fs::path& p, off_t size) {
  UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  EXPECT_TRUE(fd);
  EXPECT_EQ(::ftruncate(fd.get(), size), 0);
  return fd;
}

std::string read_all(int fd) {
  struct stat st;
  ::fstat(fd, &st);
  std::string s(static_cast<size_t>(st.st_size), '\0');
  EXPECT_EQ(::pread(fd, s.data(), s.size(), 0), st.st_size);
  return s;
}

TEST(FirecrackerMemory, ApplyDiffWritesOnlyTheDirtyPages) {
  fs::path dir = temp_dir();
  const off_t size = 64 << 20;  // 64 MiB of guest RAM
  UniqueFd base = make_file(dir / "base", size);
  std::string full(4096, 'b');
  for (off_t off = 0; off < size; off += 1 << 20)
    ASSERT_EQ(::pwrite(base.get(), full.data(), full.size(), off), 4096);
  UniqueFd diff = make_file(dir / "diff", size);
  std::string page(4096, 'd');
  for (off_t off : {off_t{0}, off_t{8192}, off_t{33} << 20, size - 4096})
    ASSERT_EQ(::pwrite(diff.get(), page.data(), page.size(), off), 4096);
  std::string want = read_all(base.get());
  for (off_t off : {off_t{0}, off_t{8192}, off_t{33} << 20, size - 4096})
    want.replace(static_cast<size_t>(off), 4096, page);
  auto n = vm::apply_diff(base.get(), diff.get());
  ASSERT_TRUE(n) << n.error().message();
  // Extents are at least a filesystem block; the diff's four pages are far apart.
  EXPECT_GE(*n, 4u * 4096);
  EXPECT_LT(*n, 4u << 20);
  EXPECT_TRUE(read_all(base.get()) == want);

  UniqueFd big = make_file(dir / "big", size + 4096);
  auto r = vm::apply_diff(base.get(), big.get());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  fs::remove_all(dir);
}

TEST(FirecrackerMemory, CopySparseKeepsHolesAndBytes) {
  fs::path dir = temp_dir();
  const off_t size = 256 << 20;
  UniqueFd src = make_file(dir / "src", size);
  std::string data(1 << 16, 'x');
  ASSERT_EQ(::pwrite(src.get(), data.data(), data.size(), 100 << 20), 1 << 16);
  UniqueFd dst(::open((dir / "dst").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  ASSERT_TRUE(vm::copy_sparse(src.get(), dst.get()));
  struct stat st;
  ASSERT_EQ(::fstat(dst.get(), &st), 0);
  EXPECT_EQ(st.st_size, size);
  EXPECT_LT(st.st_blocks * 512, 8 << 20) << "the holes were filled";
  std::string got(data.size(), '\0');
  ASSERT_EQ(::pread(dst.get(), got.data(), got.size(), 100 << 20), 1 << 16);
  EXPECT_EQ(got, data);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace space::runtime::firecracker
