// Shared fixture for the linux runtime tests: a throw-away image (an empty skeleton rootfs plus
// a read-only bind of the host's /usr), per-sandbox directories under a private temp dir, a
// test-only cgroup parent, and a client for the stand-in agent (probe/runtime_probe.c).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "runtime/linux/linux_runtime.h"

namespace space::runtime::linux::testing {

namespace fs = std::filesystem;

// The probe binary this build made (tests/CMakeLists.txt passes its path).
inline fs::path probe_path() { return SPACE_RUNTIME_PROBE; }

// Why this host cannot run sandboxes, or "" if it can.
inline std::string missing_facility() {
  if (::geteuid() != 0) return "needs root";
  if (::access("/proc/self/ns/user", F_OK) != 0) return "no user namespaces";
  if (::access(probe_path().c_str(), X_OK) != 0) return "probe binary not built";
  auto layout = host::detect_cgroups();
  if (!layout) return "no usable cgroups: " + layout.error().message();
  return "";
}

#define SKIP_IF_NO_SANDBOXES()                                              \
  do {                                                                      \
    std::string why = ::space::runtime::linux::testing::missing_facility(); \
    if (!why.empty()) GTEST_SKIP() << why;                                  \
  } while (0)

// Line client for the probe: sends a command, reads "key=value" lines up to "end=1".
class ProbeClient {
 public:
  explicit ProbeClient(int fd) : fd_(fd) {}

  // Empty map on timeout or EOF.
  std::map<std::string, std::string> ask(
      const std::string& cmd, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    std::string line = cmd + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return {};
    std::map<std::string, std::string> kv;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      size_t nl;
      while ((nl = buf_.find('\n')) != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        size_t eq = l.find('=');
        if (eq == std::string::npos) continue;
        if (l.substr(0, eq) == "end") return kv;
        kv[l.substr(0, eq)] = l.substr(eq + 1);
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return {};
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return {};
      char tmp[4096];
      ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n <= 0) return {};
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buf_;
};

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_IF_NO_SANDBOXES();
    char tmpl[] = "/tmp/space-rt-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;  // mode 0700: the sandbox reaches the image only through the launcher's fd
    rootfs_ = base_ / "rootfs";
    fs::create_directories(rootfs_ / "etc");
    fs::create_directories(rootfs_ / "usr");
    fs::permissions(rootfs_, fs::perms(0755));
    for (const char* l : {"bin", "lib", "lib64", "sbin"}) {
      fs::create_symlink(std::string("usr/") + l, rootfs_ / l);
    }
    cgroup_name_ = "space-test-" + std::to_string(::getpid());
    config_.agent_path = probe_path();
    config_.cgroup_name = cgroup_name_;
    auto rt = LinuxRuntime::create(config_);
    ASSERT_TRUE(rt) << rt.error().message();
    runtime_ = std::move(*rt);
  }

  void TearDown() override {
    if (!base_.empty()) {
      std::error_code ec;
      fs::remove_all(base_, ec);
    }
  }

  SandboxSpec spec(const std::string& suffix = "") {
    static std::atomic<int> counter{0};
    int n = counter++;
    SandboxSpec s;
    s.id = "sb_test" + std::to_string(::getpid()) + "_" + std::to_string(n) + suffix;
    s.image.name = "test";
    s.image.rootfs = rootfs_;
    s.image.ro_binds = {"/usr"};
    s.limits.memory_bytes = 256ull << 20;
    s.limits.disk_bytes = 64ull << 20;
    s.limits.pids = 64;
    s.limits.cpus = 1.0;
    s.dir = base_ / "sandboxes" / s.id;
    fs::create_directories(s.dir);
    s.uid_base = 1000000 + static_cast<uint32_t>(n % 64) * SandboxSpec::kIdRange;
    return s;
  }

  std::unique_ptr<LinuxInstance> start(const SandboxSpec& s) {
    auto inst = runtime_->create(s);
    EXPECT_TRUE(inst) << inst.error().message();
    if (!inst) return nullptr;
    return std::unique_ptr<LinuxInstance>(static_cast<LinuxInstance*>(inst->release()));
  }

  fs::path base_, rootfs_;
  std::string cgroup_name_;
  Config config_;
  std::unique_ptr<LinuxRuntime> runtime_;
};

}  // namespace space::runtime::linux::testing
