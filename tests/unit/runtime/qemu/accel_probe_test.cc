// The qemu runtime's accelerator verdict (runtime/qemu/accel_probe.h): KVM's known non-starters
// decide without booting anything; the boot probe really boots the guest kernel and initramfs
// (under TCG here, which every host has) and is cached until one of its inputs changes.
#include "runtime/qemu/accel_probe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/qemu/qemu_runtime.h"
#include "runtime/vm_host.h"

namespace space::runtime::qemu {
namespace {
namespace fs = std::filesystem;

fs::path temp_dir() {
  char tmpl[] = "/tmp/space-accel-test-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

TEST(AccelProbe, NoKvmDeviceDecidesWithoutBooting) {
  fs::path dir = temp_dir();
  AccelInputs in{.qemu = "/nonexistent/qemu",
                 .kernel = dir / "vmlinux",
                 .initrd = dir / "initrd",
                 .cache = dir / "cache.json",
                 .kvm_device = dir / "kvm"};
  AccelVerdict v = decide_kvm(in);
  EXPECT_FALSE(v.usable);
  EXPECT_EQ(v.how, "device facts");
  EXPECT_NE(v.reason.find("no " + (dir / "kvm").string()), std::string::npos) << v.reason;
  EXPECT_FALSE(fs::exists(in.cache));  // nothing probed, nothing cached
  auto j = v.to_json();
  EXPECT_EQ(j["usable"], false);
  EXPECT_EQ(j["decided_by"], "device facts");
  fs::remove_all(dir);
}

TEST(AccelProbe, KeyFollowsItsInputs) {
  fs::path dir = temp_dir();
  std::ofstream(dir / "initrd") << "a";
  AccelInputs in{.qemu = "/bin/true", .kernel = "/bin/true", .initrd = dir / "initrd"};
  std::string k1 = probe_key(in);
  EXPECT_EQ(probe_key(in), k1);
  EXPECT_NE(k1.find("boot "), std::string::npos);
  fs::last_write_time(dir / "initrd",
                      fs::last_write_time(dir / "initrd") + std::chrono::seconds(1));
  EXPECT_NE(probe_key(in), k1);
  in.qemu = "/bin/false";
  EXPECT_NE(probe_key(in), k1);
  fs::remove_all(dir);
}

// A QEMU that fails at once: the reason says so, and the failure is cached like a success.
TEST(AccelProbe, FailingQemuIsAReasonAndCached) {
  fs::path dir = temp_dir();
  std::ofstream(dir / "vmlinux") << "k";
  std::ofstream(dir / "initrd") << "i";
  AccelInputs in{.qemu = "/bin/false",
                 .kernel = dir / "vmlinux",
                 .initrd = dir / "initrd",
                 .cache = dir / "cache.json",
                 .timeout = std::chrono::milliseconds(5000)};
  AccelVerdict v = probe_cached(in, "kvm");
  EXPECT_FALSE(v.usable);
  EXPECT_EQ(v.how, "boot probe");
  EXPECT_NE(v.reason.find("QEMU failed"), std::string::npos) << v.reason;
  AccelVerdict again = probe_cached(in, "kvm");
  EXPECT_EQ(again.how, "boot probe (cached)");
  EXPECT_FALSE(again.usable);
  EXPECT_EQ(again.reason, v.reason);
  // Only the cache file is left: the probe's work directory is gone.
  int entries = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 3);
  fs::remove_all(dir);
}

struct Guest {
  fs::path qemu, kernel, initrd;
};
std::optional<Guest> guest_or_skip_reason(std::string& why) {
  auto q = vm::find_in_path("qemu-system-x86_64");
  fs::path dir = SPACE_GUEST_DIR;
  if (!q)
    why = "no qemu-system-x86_64 (apt-get install qemu-system-x86)";
  else if (!fs::exists(dir / "vmlinux") || !fs::exists(dir / "initrd.img"))
    why = "no guest kernel in " + dir.string() + " (make build)";
  else
    return Guest{*q, dir / "vmlinux", dir / "initrd.img"};
  return std::nullopt;
}

// The real thing under TCG: the guest's init prints the marker, the verdict is cached, and a
// changed initramfs probes again.
TEST(AccelProbe, GuestBootsUnderTcgAndIsCachedPerInputs) {
  std::string why;
  auto g = guest_or_skip_reason(why);
  if (!g) GTEST_SKIP() << why;
  fs::path dir = temp_dir();
  fs::copy_file(g->initrd, dir / "initrd.img");
  AccelInputs in{.qemu = g->qemu,
                 .kernel = g->kernel,
                 .initrd = dir / "initrd.img",
                 .cache = dir / "cache.json",
                 .timeout = std::chrono::milliseconds(90000)};
  AccelVerdict v = probe_cached(in, "tcg");
  EXPECT_TRUE(v.usable) << v.reason;
  EXPECT_EQ(v.how, "boot probe");
  EXPECT_EQ(probe_cached(in, "tcg").how, "boot probe (cached)");
  // Another accelerator is another question.
  std::ifstream f(in.cache);
  auto cached = nlohmann::json::parse(f);
  EXPECT_NE(cached["key"].get<std::string>().find("accel tcg"), std::string::npos);
  fs::last_write_time(in.initrd, fs::last_write_time(in.initrd) + std::chrono::seconds(2));
  EXPECT_EQ(probe_cached(in, "tcg").how, "boot probe");
  fs::remove_all(dir);
}

// A guest that never reaches init (no initramfs it can run): refused with what the console said.
TEST(AccelProbe, GuestWithoutInitFails) {
  std::string why;
  auto g = guest_or_skip_reason(why);
  if (!g) GTEST_SKIP() << why;
  fs::path dir = temp_dir();
  std::ofstream(dir / "initrd.img") << "not a cpio archive";
  AccelInputs in{.qemu = g->qemu,
                 .kernel = g->kernel,
                 .initrd = dir / "initrd.img",
                 .timeout = std::chrono::milliseconds(90000)};
  AccelVerdict v = probe_cached(in, "tcg");
  EXPECT_FALSE(v.usable);
  EXPECT_NE(v.reason.find("a test boot of the guest kernel under tcg failed"), std::string::npos)
      << v.reason;
  fs::remove_all(dir);
}

// vm.accel: "auto" falls back to TCG with the reason; "kvm" refuses with it; "tcg" never asks.
TEST(QemuAccel, AutoFallsBackKvmFailsClearly) {
  fs::path dir = temp_dir();
  std::ofstream(dir / "vmlinux") << "k";
  std::ofstream(dir / "initrd") << "i";
  QemuRuntime::Config c;
  c.qemu = "/bin/true";  // found; never started: the device facts decide
  c.kernel = dir / "vmlinux";
  c.initrd = dir / "initrd";
  c.kvm_device = dir / "kvm";
  c.probe_cache = dir / "cache.json";
  c.accel = "auto";
  auto autort = QemuRuntime::create(c);
  EXPECT_EQ(autort->accelerator().value(), "tcg");
  auto doc = autort->doctor();
  EXPECT_EQ(doc["accelerator"], "tcg");
  EXPECT_EQ(doc["kvm"]["usable"], false);
  EXPECT_NE(doc["note"].get<std::string>().find("no " + (dir / "kvm").string()), std::string::npos)
      << doc.dump();
  c.accel = "kvm";
  auto kvmrt = QemuRuntime::create(c);
  auto r = kvmrt->accelerator();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_NE(r.error().message().find("vm.accel is \"kvm\" but KVM cannot run the guest here: no "),
            std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("\"auto\""), std::string::npos);
  EXPECT_EQ(kvmrt->doctor()["available"], false);
  c.accel = "tcg";
  auto tcgrt = QemuRuntime::create(c);
  EXPECT_EQ(tcgrt->accelerator().value(), "tcg");
  EXPECT_EQ(tcgrt->kvm_verdict().how, "config");
  EXPECT_FALSE(fs::exists(c.probe_cache));
  fs::remove_all(dir);
}

// QEMU and the guest kernel installed after spaced started are found by the next create or
// doctor, without a restart.
TEST(QemuAccel, ToolsInstalledLaterAreFound) {
  fs::path dir = temp_dir();
  QemuRuntime::Config c;
  c.qemu = dir / "bin" / "qemu-system-x86_64";
  c.kernel = dir / "vmlinux";
  c.initrd = dir / "initrd";
  c.accel = "tcg";
  auto rt = QemuRuntime::create(c);
  auto doc = rt->doctor();
  EXPECT_EQ(doc["available"], false);
  EXPECT_NE(doc["reason"].get<std::string>().find("not found: install QEMU"), std::string::npos)
      << doc.dump();
  fs::create_directories(dir / "bin");
  fs::copy_file("/bin/true", c.qemu);  // "installed"
  doc = rt->doctor();
  EXPECT_EQ(doc["available"], false);
  EXPECT_NE(doc["reason"].get<std::string>().find("guest kernel"), std::string::npos) << doc.dump();
  std::ofstream(dir / "vmlinux") << "k";
  std::ofstream(dir / "initrd") << "i";
  doc = rt->doctor();
  EXPECT_EQ(doc["available"], true) << doc.dump();
  EXPECT_EQ(doc["qemu"], c.qemu.string());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace space::runtime::qemu
