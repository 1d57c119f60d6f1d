// The firecracker runtime's orchestration, driven for real against a stand-in for Firecracker
// and its jailer (fake_firecracker.py: it speaks Firecracker's API and vsock protocols and runs
// the real space-agent as its "guest", unconfined, on the host). What this proves is SPACE's
// side: the jail directory and what is linked into it, the jailer's command line, the API
// sequence of a boot, of a template build and of a restore, the vsock handshake to the agent,
// template reuse, snapshot files (full, then diffs applied over them), reattach after a daemon
// restart, and that destroy and every failure leave no process, cgroup or file. Isolation
// needs KVM and the real binaries: tests/kvm (make test-kvm).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "host/cgroup.h"
#include "proto/frame.h"
#include "runtime/firecracker/firecracker_runtime.h"

#ifndef SPACE_AGENT_BIN_DEFAULT
#error "SPACE_AGENT_BIN_DEFAULT (the space-agent binary) must be defined by the build"
#endif
#ifndef SPACE_TEST_FIXTURES
#error "SPACE_TEST_FIXTURES must be defined by the build"
#endif

namespace space::runtime::firecracker {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FirecrackerOrchestrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (the stand-in jailer drops to a uid)";
    char tmpl[] = "/tmp/space-fc-orch-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    fs::path fake = fs::path(SPACE_TEST_FIXTURES) / "runtime/firecracker/fake_firecracker.py";
    fs::create_directories(base_ / "bin");
    for (const char* name : {"fake-firecracker", "fake-jailer"}) {
      fs::copy_file(fake, base_ / "bin" / name);
      fs::permissions(base_ / "bin" / name, fs::perms(0755));
    }
    write_fake({});
    {
      std::ofstream(base_ / "vmlinux") << "\x7f"
                                          "ELF stand-in kernel";
    }
    { std::ofstream(base_ / "initrd") << "stand-in initramfs"; }
    { std::ofstream(base_ / "image.ext4") << std::string(1 << 16, 'i'); }
    { std::ofstream(base_ / "kvm") << ""; }
    cgroup_name_ = "space-test-fc-" + std::to_string(::getpid());
    config_.firecracker = base_ / "bin" / "fake-firecracker";
    config_.jailer = base_ / "bin" / "fake-jailer";
    config_.kvm_device = base_ / "kvm";
    config_.kvm_check = [](const fs::path&) { return std::string(); };  // the stand-in's "KVM"
    config_.kernel = base_ / "vmlinux";
    config_.initrd = base_ / "initrd";
    config_.dir = base_ / "fc";
    config_.cgroup_name = cgroup_name_;
    config_.boot_timeout = std::chrono::seconds(15);
    config_.stop_timeout = std::chrono::seconds(5);
  }

  void TearDown() override {
    if (base_.empty()) return;
    auto layout = host::detect_cgroups();
    if (layout) {
      for (const auto& [name, mount] : layout->v1) {
        EXPECT_FALSE(fs::exists(mount / cgroup_name_)) << "left behind: " << mount / cgroup_name_;
      }
      if (!layout->unified.empty()) {
        EXPECT_FALSE(fs::exists(layout->unified / cgroup_name_));
      }
    }
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  void write_fake(json extra) {
    extra["agent"] = SPACE_AGENT_BIN_DEFAULT;
    std::ofstream(base_ / "bin" / "fake.json") << extra.dump();
  }

  SandboxSpec spec(int n) {
    SandboxSpec s;
    s.id = "sb_fco" + std::to_string(::getpid()) + "x" + std::to_string(n);
    s.image.name = "img";
    s.image.vm_disk = base_ / "image.ext4";
    s.limits.memory_bytes = 128ull << 20;
    s.limits.disk_bytes = 16ull << 20;
    s.limits.pids = 64;
    s.dir = base_ / "sandboxes" / s.id;
    fs::create_directories(s.dir);
    s.uid_base = 3000000 + static_cast<uint32_t>(n) * SandboxSpec::kIdRange;
    return s;
  }

  // The stand-in's log: one JSON object per request (method, path, body) or jailer start.
  std::vector<json> calls() {
    std::vector<json> out;
    std::ifstream in(config_.dir / "fake-calls.log");
    std::string line;
    while (std::getline(in, line)) out.push_back(json::parse(line));
    return out;
  }
  std::vector<std::string> requests() {
    std::vector<std::string> out;
    for (auto& c : calls())
      out.push_back(c.contains("jailer")
                        ? std::string("jailer")
                        : c["method"].get<std::string>() + " " + c["path"].get<std::string>());
    return out;
  }

  fs::path jail(const SandboxSpec& s) {
    std::string id = s.id;
    for (char& c : id)
      if (c == '_') c = '-';
    return config_.dir / "jails" / "fake-firecracker" / id;
  }

  // The agent's first frame on the channel is its hello.
  void expect_hello(Instance& inst) {
    proto::Decoder d;
    char buf[4096];
    for (int i = 0; i < 100; ++i) {
      ssize_t n = ::read(inst.channel_fd(), buf, sizeof buf);
      ASSERT_GT(n, 0) << "the channel closed before the agent's hello";
      d.feed(std::span<const char>(buf, static_cast<size_t>(n)));
      auto f = d.next();
      ASSERT_TRUE(f);
      if (f->has_value()) {
        EXPECT_EQ((*f)->type, proto::FrameType::kHello);
        return;
      }
    }
    FAIL() << "no complete frame";
  }

  uid_t owner(const fs::path& p) {
    struct stat st;
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_uid;
  }
  mode_t mode(const fs::path& p) {
    struct stat st;
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }

  fs::path base_;
  std::string cgroup_name_;
  Config config_;
};

TEST_F(FirecrackerOrchestrationTest, TemplateBuildThenRestoresSnapshotsReattachAndCleanup) {
  auto rt = FirecrackerRuntime::create(config_);
  ASSERT_TRUE(rt->missing().empty()) << rt->missing().front();
  SandboxSpec s1 = spec(1);
  auto i1 = rt->create(s1);
  ASSERT_TRUE(i1) << i1.error().message();
  expect_hello(**i1);
  EXPECT_TRUE((*i1)->resumed_from_template());

  // The template VM booted (its API sequence, then paused and snapshotted), then the sandbox
  // was loaded from it: no boot of its own.
  std::vector<std::string> want = {
      "jailer",           "PUT /machine-config",  "PUT /boot-source", "PUT /drives/image",
      "PUT /drives/disk", "PUT /vsock",           "PUT /entropy",     "PUT /actions",
      "PATCH /vm",        "PUT /snapshot/create", "jailer",           "PUT /snapshot/load"};
  EXPECT_EQ(requests(), want);
  auto log = calls();
  EXPECT_EQ(log[1]["body"]["track_dirty_pages"], true);
  EXPECT_EQ(log[4]["body"]["is_read_only"], false);
  EXPECT_EQ(log[3]["body"]["is_read_only"], true);
  std::string boot_args = log[2]["body"]["boot_args"];
  EXPECT_NE(boot_args.find("space.channel=vsock:1024"), std::string::npos) << boot_args;
  EXPECT_EQ(log[11]["body"]["mem_backend"]["backend_type"], "File");
  EXPECT_EQ(log[11]["body"]["resume_vm"], true);
  // The jailer's arguments: the sandbox's uid for Firecracker, the jail base.
  auto& jargv = log[10]["jailer"];
  EXPECT_NE(std::find(jargv.begin(), jargv.end(), std::to_string(s1.uid_base)), jargv.end());

  // The template: root's, read-only, beside its key.
  std::vector<fs::path> templates;
  for (auto& e : fs::directory_iterator(config_.dir / "templates")) templates.push_back(e.path());
  ASSERT_EQ(templates.size(), 1u);
  for (const char* f : {"vmstate", "memory", "disk.img"}) {
    EXPECT_EQ(owner(templates[0] / f), 0u) << f;
    EXPECT_EQ(mode(templates[0] / f), 0444u) << f;
  }
  EXPECT_TRUE(fs::exists(templates[0] / "machine.json"));
  // The template VM's jail is gone; the sandbox's holds its own disk (its uid, 0600) and a
  // read-only link of the template's memory.
  fs::path root = jail(s1) / "root";
  EXPECT_EQ(owner(root / "disk.img"), s1.uid_base);
  EXPECT_EQ(mode(root / "disk.img"), 0600u);
  EXPECT_EQ(owner(root / "load.mem"), 0u);
  EXPECT_FALSE(fs::exists(root / "load.vmstate"));
  size_t jails = 0;
  for (auto& e : fs::directory_iterator(config_.dir / "jails" / "fake-firecracker")) {
    (void)e;
    ++jails;
  }
  EXPECT_EQ(jails, 1u);
  // Firecracker runs as the sandbox's uid.
  std::string status = slurp("/proc/" + std::to_string((*i1)->agent_pid()) + "/status");
  EXPECT_NE(status.find("Uid:\t" + std::to_string(s1.uid_base)), std::string::npos) << status;

  // A second sandbox reuses the template: one more jailer, one more load, no boot.
  SandboxSpec s2 = spec(2);
  auto i2 = rt->create(s2);
  ASSERT_TRUE(i2) << i2.error().message();
  expect_hello(**i2);
  want.push_back("jailer");
  want.push_back("PUT /snapshot/load");
  EXPECT_EQ(requests(), want);
  ASSERT_TRUE((*i2)->destroy());

  // Pause and resume are PATCH /vm.
  ASSERT_TRUE((*i1)->pause());
  EXPECT_TRUE((*i1)->paused());
  ASSERT_TRUE((*i1)->resume());
  EXPECT_FALSE((*i1)->paused());

  // Snapshots: a full one, then a diff applied over it; each saved machine is complete.
  fs::path save1 = base_ / "save1", save2 = base_ / "save2";
  for (const fs::path& d : {save1, save2}) {
    fs::create_directories(d);
    UniqueFd fd(::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE((*i1)->save_machine(fd.get()));
    ASSERT_TRUE((*i1)->resume());
  }
  log = calls();
  std::vector<json> creates;
  for (auto& c : log)
    if (c.value("path", "") == "/snapshot/create") creates.push_back(c["body"]);
  ASSERT_EQ(creates.size(), 3u);  // the template's, then ours
  EXPECT_EQ(creates[1]["snapshot_type"], "Full");
  EXPECT_EQ(creates[2]["snapshot_type"], "Diff");
  std::string mem1 = slurp(save1 / "memory"), mem2 = slurp(save2 / "memory");
  EXPECT_TRUE(mem1 == std::string(1 << 20, 'F')) << "the full snapshot's memory changed";
  std::string want2(1 << 20, 'F');
  want2.replace(512 << 10, 4096, std::string(4096, 'D'));
  EXPECT_TRUE(mem2 == want2) << "the diff was not applied over the full memory";
  for (const char* f : {"vmstate", "disk.img", "machine.json"})
    EXPECT_TRUE(fs::exists(save2 / f)) << f;
  EXPECT_TRUE((*i1)->check_resumable(s1.image));

  // A restarted daemon reattaches: same process, a new API and vsock connection.
  json persisted = (*i1)->persist();
  int pid = (*i1)->agent_pid();
  auto rt2 = FirecrackerRuntime::create(config_);
  auto again = rt2->reattach(s1, persisted);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ((*again)->agent_pid(), pid);
  expect_hello(**again);
  i1->reset();  // the old handle goes without destroying anything

  // A restore of the diff-built snapshot: the saved files move into a new jail and load.
  SandboxSpec s3 = spec(3);
  s3.restore_machine = [&](int dir_fd) -> Result<void> {
    for (auto& e : fs::directory_iterator(save2))
      if (::linkat(AT_FDCWD, e.path().c_str(), dir_fd, e.path().filename().c_str(), 0) != 0)
        return fail_sys("linkat", e.path().string());
    return {};
  };
  auto i3 = rt->create(s3);
  ASSERT_TRUE(i3) << i3.error().message();
  expect_hello(**i3);
  EXPECT_FALSE((*i3)->resumed_from_template());
  EXPECT_EQ(calls().back()["path"], "/snapshot/load");
  EXPECT_EQ(owner(jail(s3) / "root" / "load.mem"), s3.uid_base);
  EXPECT_FALSE(fs::exists(s3.dir / "restore"));

  // Destroy leaves no process, jail or cgroup (TearDown checks the cgroups).
  for (auto* inst : {&*again, &*i3}) {
    int p = (*inst)->agent_pid();
    ASSERT_TRUE((*inst)->destroy());
    // The reattached one is still this process's child (in spaced it would be the old
    // daemon's): reap it before looking.
    (void)::waitpid(p, nullptr, WNOHANG);
    EXPECT_NE(::kill(p, 0), 0) << "Firecracker " << p << " still exists";
  }
  EXPECT_FALSE(fs::exists(jail(s1)));
  EXPECT_FALSE(fs::exists(jail(s3)));
}

TEST_F(FirecrackerOrchestrationTest, ARefusedRequestFailsTheCreateAndLeavesNothing) {
  config_.templates = false;
  write_fake({{"fail_at", "PUT /drives/disk"}});
  auto rt = FirecrackerRuntime::create(config_);
  SandboxSpec s = spec(4);
  auto inst = rt->create(s);
  ASSERT_FALSE(inst);
  EXPECT_EQ(inst.error().code(), Code::kInvalidArgument);
  EXPECT_NE(inst.error().message().find("Firecracker refused PUT /drives/disk (400): stand-in "
                                        "refuses PUT /drives/disk"),
            std::string::npos)
      << inst.error().message();
  EXPECT_FALSE(fs::exists(jail(s)));
  EXPECT_FALSE(fs::exists(config_.dir / "templates"));
}

TEST_F(FirecrackerOrchestrationTest, AProfileRateLimitsTheDiskOfEveryRestoredCopy) {
  auto rt = FirecrackerRuntime::create(config_);
  SandboxSpec s = spec(5);
  s.vm.disk_bytes_per_s = 50 << 20;
  s.vm.disk_ops_per_s = 2000;
  auto inst = rt->create(s);
  ASSERT_TRUE(inst) << inst.error().message();
  auto log = calls();
  // The template is built without limits; the sandbox's are patched on after the load.
  for (auto& c : log) {
    if (c.value("path", "") == "/drives/disk" && c["method"] == "PUT") {
      EXPECT_FALSE(c["body"].contains("rate_limiter")) << c.dump();
    }
  }
  ASSERT_EQ(log.back()["method"], "PATCH");
  ASSERT_EQ(log.back()["path"], "/drives/disk");
  EXPECT_EQ(log.back()["body"]["rate_limiter"]["bandwidth"]["size"], 50 << 20);
  EXPECT_EQ(log.back()["body"]["rate_limiter"]["ops"]["size"], 2000);
  EXPECT_EQ(log.back()["body"]["rate_limiter"]["bandwidth"]["refill_time"], 1000);
  ASSERT_TRUE((*inst)->destroy());
}

}  // namespace
}  // namespace space::runtime::firecracker
