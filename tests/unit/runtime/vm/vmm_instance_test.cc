// The steps every microVM instance shares (vmm.h, VmmInstance): pause, resume, reading the
// writable disk and saving the machine, each written once around the VMM's own operations,
// which a stand-in VMM counts here; and the shared steps of starting one (vm_steps.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "runtime/vm_host.h"
#include "runtime/vm_steps.h"
#include "runtime/vmm.h"

namespace space::runtime::vm {
namespace {
namespace fs = std::filesystem;

class FakeVm final : public VmmInstance {
 public:
  explicit FakeVm(std::unique_ptr<VmmParts> p) : VmmInstance(*p), p_(std::move(p)) {}
  nlohmann::json persist() const override { return persist_base(); }

  std::vector<std::string> calls;  // the VMM operations, in order
  bool connected = true;
  bool stop_fails = false;
  fs::path disk;

 protected:
  bool has_control() const override { return connected; }
  void close_control() override { connected = false; }
  Result<void> vmm_stop() override {
    calls.push_back("stop");
    if (stop_fails) return fail(Code::kUnavailable, "the VMM said no");
    return {};
  }
  Result<void> vmm_cont() override {
    calls.push_back("cont");
    return {};
  }
  Result<UniqueFd> open_writable_disk() override {
    calls.push_back("open");
    UniqueFd fd(::open(disk.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return fail_sys("open", disk.string());
    return fd;
  }
  Result<void> vmm_save(int dir_fd) override {
    calls.push_back("save");
    UniqueFd f(::openat(dir_fd, kSavedMemory, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!f) return fail_sys("openat", kSavedMemory);
    return {};
  }

 private:
  std::unique_ptr<VmmParts> p_;
};

class VmmInstanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-vmm-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ / "disk.img") << "the disk";
    auto parts = std::make_unique<VmmParts>();
    parts->id = "sb_test";
    parts->machine = {{"memory_bytes", 1}, {"vcpus", 1}};
    vm_ = std::make_unique<FakeVm>(std::move(parts));
    vm_->disk = dir_ / "disk.img";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  using Calls = std::vector<std::string>;
  fs::path dir_;
  std::unique_ptr<FakeVm> vm_;
};

TEST_F(VmmInstanceTest, PauseAndResumeStopAndContinueOnce) {
  EXPECT_FALSE(vm_->paused());
  ASSERT_TRUE(vm_->pause());
  ASSERT_TRUE(vm_->pause());  // already paused: nothing to do
  EXPECT_TRUE(vm_->paused());
  ASSERT_TRUE(vm_->resume());
  ASSERT_TRUE(vm_->resume());
  EXPECT_FALSE(vm_->paused());
  EXPECT_EQ(vm_->calls, (Calls{"stop", "cont"}));
}

TEST_F(VmmInstanceTest, AFailedStopLeavesTheVmRunning) {
  vm_->stop_fails = true;
  auto r = vm_->pause();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "pausing VM sb_test: the VMM said no");
  EXPECT_FALSE(vm_->paused());
}

TEST_F(VmmInstanceTest, ReadsTheDiskWhileStoppedAndGoesOn) {
  std::string seen;
  auto read = [&](int fd) -> Result<void> {
    EXPECT_EQ(vm_->calls.back(), "stop");  // the vCPUs are stopped while it reads
    char buf[64];
    ssize_t n = ::pread(fd, buf, sizeof buf, 0);
    seen.assign(buf, n > 0 ? n : 0);
    EXPECT_LT(::write(fd, "x", 1), 0);  // read-only
    return {};
  };
  ASSERT_TRUE(vm_->read_writable_disk(read));
  EXPECT_EQ(seen, "the disk");
  EXPECT_EQ(vm_->calls, (Calls{"open", "stop", "cont"}));
  EXPECT_FALSE(vm_->paused());
}

TEST_F(VmmInstanceTest, APausedVmStaysPausedThroughADiskRead) {
  ASSERT_TRUE(vm_->pause());
  vm_->calls.clear();
  ASSERT_TRUE(vm_->read_writable_disk([](int) -> Result<void> { return {}; }));
  EXPECT_EQ(vm_->calls, (Calls{"open"}));
  EXPECT_TRUE(vm_->paused());
}

TEST_F(VmmInstanceTest, AReadsErrorComesBackAfterTheVmGoesOn) {
  auto r = vm_->read_writable_disk(
      [](int) -> Result<void> { return fail(Code::kProtocol, "unreadable"); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_EQ(vm_->calls, (Calls{"open", "stop", "cont"}));
}

TEST_F(VmmInstanceTest, SaveStopsTheVmWritesItAndItsMachineAndLeavesItStopped) {
  fs::path saved = dir_ / "saved";
  ASSERT_EQ(::mkdir(saved.c_str(), 0700), 0);
  UniqueFd d(::open(saved.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(vm_->save_machine(d.get()));
  EXPECT_EQ(vm_->calls, (Calls{"stop", "save"}));
  EXPECT_TRUE(vm_->paused());
  EXPECT_TRUE(fs::exists(saved / kSavedMemory));
  auto m = read_machine_file(d.get(), kSavedMachine);
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(*m, (nlohmann::json{{"memory_bytes", 1}, {"vcpus", 1}}));
  // A second save of the stopped VM does not stop it again.
  fs::path again = dir_ / "again";
  ASSERT_EQ(::mkdir(again.c_str(), 0700), 0);
  UniqueFd d2(::open(again.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(vm_->save_machine(d2.get()));
  EXPECT_EQ(vm_->calls, (Calls{"stop", "save", "save"}));
}

TEST_F(VmmInstanceTest, WithoutItsControlConnectionEveryStepFails) {
  vm_->connected = false;
  for (auto r : {vm_->pause(), vm_->read_writable_disk([](int) -> Result<void> { return {}; }),
                 vm_->save_machine(-1)}) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kConflict);
    EXPECT_NE(r.error().message().find("VM sb_test is destroyed"), std::string::npos)
        << r.error().message();
  }
  EXPECT_TRUE(vm_->calls.empty());
}

TEST(VmSteps, ChecksWhatEveryVmNeedsOfItsSpec) {
  SandboxSpec spec;
  spec.id = "sb_1";
  spec.image.name = "img";
  spec.image.vm_disk = "/nonexistent/disk.ext4";
  EXPECT_TRUE(check_vm_spec(spec, "starting VM sb_1"));
  auto code = [&](const SandboxSpec& s) -> std::optional<Code> {
    auto r = check_vm_spec(s, "starting VM sb_1");
    if (r) return std::nullopt;
    return r.error().code();
  };
  SandboxSpec s = spec;
  s.populate_upper = [](int) -> Result<void> { return {}; };
  EXPECT_EQ(code(s), Code::kUnimplemented);
  s = spec;
  s.image.vm_disk.clear();
  EXPECT_EQ(code(s), Code::kConflict);
  s = spec;
  s.limits.memory_bytes = kMinMemory - 1;
  EXPECT_EQ(code(s), Code::kInvalidArgument);
  s = spec;
  s.limits.disk_bytes = kMinDisk - 1;
  EXPECT_EQ(code(s), Code::kInvalidArgument);
}

TEST(VmSteps, ASavedMachineMustBeThisMachine) {
  nlohmann::json mine = {{"image_disk", {{"ino", 1}}}, {"memory_bytes", 1}, {"vcpus", 2}};
  Image image{.name = "img"};
  EXPECT_TRUE(check_saved_machine(mine, mine, image));
  nlohmann::json with_ram = mine;
  with_ram["ram"] = "backend";  // the memory's layout is not compared
  EXPECT_TRUE(check_saved_machine(mine, with_ram, image));
  nlohmann::json other = mine;
  other["vcpus"] = 1;
  auto r = check_saved_machine(other, mine, image);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kConflict);
  EXPECT_EQ(vcpu_count({.cpus = 0.1}), 1);
  EXPECT_EQ(vcpu_count({.cpus = 2.5}), 3);
}

TEST(VmSteps, ReceivesASavedMachineAndLetsItGo) {
  char tmpl[] = "/tmp/space-saved-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path dir = tmpl;
  SandboxSpec spec;
  auto write = [](int d, const char* name, const std::string& text) {
    UniqueFd f(::openat(d, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    ASSERT_TRUE(f);
    ASSERT_EQ(::write(f.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  };
  {
    SavedMachine saved(dir);
    spec.restore_machine = [&](int d) -> Result<void> {
      write(d, kSavedMemory, "ram");
      write(d, kSavedDisk, "disk");
      write(d, kSavedMachine, R"({"vcpus": 1})");
      return {};
    };
    ASSERT_TRUE(saved.receive(spec, {kSavedMemory, kSavedDisk}, "qemu"));
    EXPECT_EQ(saved.machine(), (nlohmann::json{{"vcpus", 1}}));
    EXPECT_TRUE(fs::exists(saved.path() / kSavedDisk));
  }
  EXPECT_FALSE(fs::exists(dir / "restore"));  // gone with the object
  {
    SavedMachine saved(dir);
    spec.restore_machine = [&](int d) -> Result<void> {
      write(d, kSavedMachine, "{}");
      return {};
    };
    auto r = saved.receive(spec, {kSavedMemory}, "firecracker");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kProtocol);
    EXPECT_EQ(r.error().message(),
              "the saved machine has no memory: it is not a firecracker snapshot");
  }
  EXPECT_FALSE(fs::exists(dir / "restore"));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(VmSteps, ATemplateIsBuiltAsideAndAppearsWhole) {
  char tmpl[] = "/tmp/space-tplbuild-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path templates = fs::path(tmpl) / "templates";
  fs::path build_dir;
  {
    auto b = TemplateBuild::begin(templates, "abc", 0755);
    ASSERT_TRUE(b) << b.error().message();
    build_dir = (*b)->dir();
    EXPECT_EQ(build_dir, templates / ".build-abc");
    EXPECT_EQ(fs::status(build_dir).permissions(), fs::perms::owner_all);
    UniqueFd f(::openat((*b)->out_fd(), "state", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
    ASSERT_TRUE(f);
    EXPECT_FALSE(fs::exists(templates / "abc"));  // nothing half-made under its name
    auto done = (*b)->commit();
    ASSERT_TRUE(done) << done.error().message();
    EXPECT_EQ(*done, templates / "abc");
  }
  EXPECT_TRUE(fs::exists(templates / "abc" / "state"));
  EXPECT_FALSE(fs::exists(build_dir));  // the build's sandbox directory goes
  {
    // One that fails half-way leaves nothing behind.
    auto b = TemplateBuild::begin(templates, "def", 0700);
    ASSERT_TRUE(b);
  }
  EXPECT_FALSE(fs::exists(templates / ".build-def"));
  EXPECT_FALSE(fs::exists(templates / "def"));
  std::error_code ec;
  fs::remove_all(tmpl, ec);
}

TEST(VmSteps, SaysWhatGuestFileIsMissing) {
  EXPECT_EQ(guest_file_missing("/proc/self/status", true), "");
  EXPECT_NE(guest_file_missing("", true).find("guest kernel not configured"), std::string::npos);
  EXPECT_NE(guest_file_missing("/nonexistent/initrd", false)
                .find("guest initramfs /nonexistent/initrd not found"),
            std::string::npos);
}

}  // namespace
}  // namespace space::runtime::vm
