// KVM's device facts and their verdict (runtime/kvm.h), and the private device node that the
// qemu runtime hands its jailed QEMU: the node is tried by the uid it is for and by another.
#include "runtime/kvm.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace space::runtime::vm {
namespace {
namespace fs = std::filesystem;

fs::path temp_dir() {
  char tmpl[] = "/tmp/space-kvm-test-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

// Facts of a /dev/kvm that passes every device check, with `modules` behind it.
KvmFacts working(const std::string& modules) {
  KvmFacts f;
  f.present = f.is_kvm_node = true;
  f.api_version = kKvmApiVersion;
  f.create_vm_errno = 0;
  f.sysfs_seen = true;
  f.vendor_modules = modules;
  return f;
}

TEST(KvmVerdict, KnownNonStarters) {
  KvmFacts none;
  EXPECT_NE(kvm_non_starter(none).find("no /dev/kvm"), std::string::npos);
  EXPECT_EQ(kvm_non_starter(none).find("PVM"), std::string::npos);
  // This project's machines of one day: kvm_pvm loaded, yet no node at all.
  KvmFacts pvm_no_node = working("kvm_pvm");
  pvm_no_node.present = pvm_no_node.is_kvm_node = false;
  std::string why = kvm_non_starter(pvm_no_node);
  EXPECT_NE(why.find("no /dev/kvm"), std::string::npos) << why;
  EXPECT_NE(why.find("kvm_pvm module is loaded"), std::string::npos) << why;

  KvmFacts file = working("kvm_intel");
  file.is_kvm_node = false;
  EXPECT_NE(kvm_non_starter(file).find("not the KVM device"), std::string::npos);

  KvmFacts denied = working("kvm_intel");
  denied.open_errno = EACCES;
  EXPECT_NE(kvm_non_starter(denied).find("EACCES"), std::string::npos);
  EXPECT_NE(kvm_non_starter(denied).find("run spaced as root"), std::string::npos);

  KvmFacts api = working("kvm_amd");
  api.api_version = 11;
  EXPECT_NE(kvm_non_starter(api).find("API 11"), std::string::npos);

  KvmFacts novm = working("kvm_amd");
  novm.create_vm_errno = ENOMEM;
  EXPECT_NE(kvm_non_starter(novm).find("KVM_CREATE_VM"), std::string::npos);

  // This project's build machines: nested PVM opens and creates VMs, but boots no stock kernel.
  std::string pvm = kvm_non_starter(working("kvm_pvm"));
  EXPECT_NE(pvm.find("nested PVM"), std::string::npos) << pvm;
  EXPECT_NE(kvm_non_starter(working("")).find("no vendor module"), std::string::npos);
}

TEST(KvmVerdict, HardwareKvmIsLeftToTheBootProbe) {
  EXPECT_EQ(kvm_non_starter(working("kvm_intel")), "");
  EXPECT_EQ(kvm_non_starter(working("kvm_amd")), "");
  // A host with PVM beside a hardware module: the hardware one makes /dev/kvm.
  EXPECT_EQ(kvm_non_starter(working("kvm_intel,kvm_pvm")), "");
  // No /sys/module to look at (a container without sysfs): nothing known against it.
  KvmFacts blind = working("");
  blind.sysfs_seen = false;
  EXPECT_EQ(kvm_non_starter(blind), "");
}

TEST(KvmVerdict, FactsAloneJudgeAndSaySo) {
  KvmVerdict pvm = judge_kvm_facts(working("kvm_pvm"));
  EXPECT_FALSE(pvm.usable);
  EXPECT_EQ(pvm.reason, kvm_non_starter(working("kvm_pvm")));
  auto j = pvm.to_json();
  EXPECT_EQ(j["usable"], false);
  EXPECT_EQ(j["decided_by"], "device facts");
  EXPECT_EQ(j["reason"], pvm.reason);
  EXPECT_EQ(j["modules"], "kvm_pvm");
  KvmVerdict hw = judge_kvm_facts(working("kvm_intel"));
  EXPECT_TRUE(hw.usable);
  EXPECT_FALSE(hw.to_json().contains("reason"));
}

TEST(KvmFacts, GatheredFromTheNodeAndSysModule) {
  fs::path dir = temp_dir();
  KvmFacts missing = gather_kvm_facts(dir / "kvm", dir / "module");
  EXPECT_FALSE(missing.present);
  EXPECT_FALSE(missing.sysfs_seen);
  EXPECT_EQ(missing.to_json()["present"], false);

  std::ofstream(dir / "file") << "x";
  KvmFacts file = gather_kvm_facts(dir / "file", dir / "module");
  EXPECT_TRUE(file.present);
  EXPECT_FALSE(file.is_kvm_node);
  EXPECT_FALSE(file.sysfs_seen);

  // /dev/null is a character device, but not 10:232: never opened as KVM.
  fs::create_directories(dir / "module" / "kvm");
  fs::create_directories(dir / "module" / "kvm_pvm");
  KvmFacts null = gather_kvm_facts("/dev/null", dir / "module");
  EXPECT_TRUE(null.present);
  EXPECT_FALSE(null.is_kvm_node);
  EXPECT_EQ(null.api_version, -1);
  EXPECT_TRUE(null.sysfs_seen);
  EXPECT_EQ(null.vendor_modules, "kvm_pvm");
  // The modules are read even where the node is missing.
  KvmFacts no_node = gather_kvm_facts(dir / "kvm", dir / "module");
  EXPECT_FALSE(no_node.present);
  EXPECT_EQ(no_node.vendor_modules, "kvm_pvm");
  EXPECT_EQ(no_node.to_json()["modules"], "kvm_pvm");
  fs::create_directories(dir / "module" / "kvm_intel");
  EXPECT_EQ(gather_kvm_facts("/dev/null", dir / "module").vendor_modules, "kvm_intel,kvm_pvm");
  fs::remove_all(dir);
}

// Runs `fn` in a child as uid/gid `uid` (no supplementary groups); the child's exit code.
template <class F>
int as_uid(uid_t uid, F fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
        ::setresuid(uid, uid, uid) != 0)
      ::_exit(100);
    ::_exit(fn());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

constexpr uid_t kOwner = 1734567, kOther = 1734568;

TEST(PrivateDeviceNode, OnlyItsUidOpensIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  fs::path dir = temp_dir();
  ::chmod(dir.c_str(), 0711);  // both uids may reach the node; its own mode decides
  fs::path node = dir / "null";
  // /dev/null's number stands in for KVM's, which this host may not have.
  auto r = make_private_device_node(node, makedev(1, 3), kOwner);
  ASSERT_TRUE(r) << r.error().message();
  struct stat st;
  ASSERT_EQ(::stat(node.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, kOwner);
  EXPECT_EQ(st.st_gid, kOwner);
  auto try_open = [&] {
    int fd = ::open(node.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return errno == EACCES ? 13 : 1;
    ::close(fd);
    return 0;
  };
  EXPECT_EQ(as_uid(kOwner, try_open), 0);
  EXPECT_EQ(as_uid(kOther, try_open), 13);  // the attack: another uid's VMM, refused
  // The node is made once: an existing path (a planted link, say) is refused, not reused.
  EXPECT_FALSE(make_private_device_node(node, makedev(1, 3), kOwner));
  fs::remove_all(dir);
}

// Where /dev/kvm creates VMs, the jail's access path end to end: a private 10:232 node for
// QEMU's uid lets that uid create a VM (KVM_CREATE_VM), while the host's node stays root's.
TEST(PrivateDeviceNode, KvmNodeCreatesVmsForItsUidOnly) {
  KvmFacts host = gather_kvm_facts();
  if (!host.present || host.create_vm_errno != 0)
    GTEST_SKIP() << "no /dev/kvm that creates VMs here: " << kvm_non_starter(host);
  fs::path dir = temp_dir();
  ::chmod(dir.c_str(), 0711);
  fs::path node = dir / "kvm";
  ASSERT_TRUE(make_private_device_node(node, makedev(kKvmMajor, kKvmMinor), kOwner));
  auto create_vm = [](const char* path) {
    return [path] {
      int kvm = ::open(path, O_RDWR | O_CLOEXEC);
      if (kvm < 0) return errno == EACCES ? 13 : 1;
      int vm = ::ioctl(kvm, KVM_CREATE_VM, 0UL);
      return vm >= 0 ? 0 : 2;
    };
  };
  EXPECT_EQ(as_uid(kOwner, create_vm(node.c_str())), 0);
  EXPECT_EQ(as_uid(kOther, create_vm(node.c_str())), 13);
  struct stat st;
  ASSERT_EQ(::stat("/dev/kvm", &st), 0);
  if (st.st_uid == 0 && (st.st_mode & 0006) == 0) {  // the host's node, unwidened
    EXPECT_EQ(as_uid(kOwner, create_vm("/dev/kvm")), 13);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace space::runtime::vm
