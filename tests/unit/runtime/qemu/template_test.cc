// The qemu runtime's templates (qemu_template.h): what a key covers, the sealed RAM that no
// clone's QEMU can change however it tries, loading from disk, and pruning stale templates.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/qemu/qemu_template.h"
#include "runtime/sparse_file.h"
#include "runtime/vm_host.h"

namespace space::runtime::qemu {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

class TemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-qemu-template-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* f : {"vmlinux", "initrd", "qemu", "image.ext4"}) write(dir_ / f, f);
    config_.kernel = dir_ / "vmlinux";
    config_.initrd = dir_ / "initrd";
    config_.qemu = dir_ / "qemu";
    spec_.image.name = "bb";
    spec_.image.vm_disk = dir_ / "image.ext4";
    spec_.limits.memory_bytes = 1 << 20;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  // A stored template `name` made from `key`, with `ram` as its RAM file.
  fs::path store(const json& key, const std::string& ram) {
    fs::path t = dir_ / "templates" / template_name(key);
    fs::create_directories(t);
    write(t / kTemplateState, "state");
    write(t / kTemplateDisk, "disk");
    {
      std::ofstream f(t / kTemplateRam);
      f << ram;
    }
    fs::resize_file(t / kTemplateRam, key["memory_bytes"].get<uint64_t>());
    UniqueFd d(::open(t.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(vm::write_machine_file(d.get(), kTemplateMachine,
                                       {{"key", key}, {"cmdline", "console=ttyS0"}}));
    return t;
  }

  fs::path dir_;
  Config config_;
  SandboxSpec spec_;
};

TEST_F(TemplateTest, KeyCoversImageKernelQemuAcceleratorAndLimits) {
  json key = template_key(config_, spec_, "tcg");
  std::string name = template_name(key);
  EXPECT_EQ(name.size(), 16u);
  EXPECT_EQ(template_name(template_key(config_, spec_, "tcg")), name);  // stable
  EXPECT_NE(template_name(template_key(config_, spec_, "kvm")), name);
  SandboxSpec more = spec_;
  more.limits.memory_bytes *= 2;
  EXPECT_NE(template_name(template_key(config_, more, "tcg")), name);
  more = spec_;
  more.limits.pids = 77;
  EXPECT_NE(template_name(template_key(config_, more, "tcg")), name);
  // A rebuilt image disk is a new file: a new key.
  fs::remove(dir_ / "image.ext4");
  write(dir_ / "image.ext4", "rebuilt");
  EXPECT_NE(template_name(template_key(config_, spec_, "tcg")), name);
}

TEST_F(TemplateTest, SealedRamCannotBeChangedButMapsPrivately) {
  UniqueFd ram = *new_template_ram(1 << 20);
  ASSERT_EQ(::pwrite(ram.get(), "template", 8, 4096), 8);
  ASSERT_TRUE(seal_template_ram(ram.get()));
  // What a compromised QEMU holding the fd could try: every way to change the shared pages.
  EXPECT_EQ(::pwrite(ram.get(), "attacker", 8, 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::ftruncate(ram.get(), 0), -1);
  EXPECT_EQ(::ftruncate(ram.get(), 2 << 20), -1);
  EXPECT_EQ(::fallocate(ram.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 8192), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, ram.get(), 0), MAP_FAILED);
  EXPECT_EQ(::fcntl(ram.get(), F_ADD_SEALS, 0), -1);  // F_SEAL_SEAL: the seals stay
  // Reopened through /proc (as QEMU's mem-path does) it is the same sealed file.
  UniqueFd again(::open(("/proc/self/fd/" + std::to_string(ram.get())).c_str(), O_RDWR));
  ASSERT_TRUE(again);
  EXPECT_EQ(::pwrite(again.get(), "attacker", 8, 4096), -1);
  // A private mapping (a clone's RAM) may be written; the template does not change.
  void* m = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, again.get(), 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* bytes = static_cast<char*>(m);
  EXPECT_EQ(std::string(bytes + 4096, 8), "template");
  std::memcpy(bytes + 4096, "my-copy!", 8);
  char back[8];
  ASSERT_EQ(::pread(ram.get(), back, 8, 4096), 8);
  EXPECT_EQ(std::string(back, 8), "template");
  ::munmap(m, 1 << 20);
}

TEST_F(TemplateTest, RamIsAllocatedAndStoredWithoutItsZeroPages) {
  UniqueFd ram = *new_template_ram(64 << 20);
  struct stat st;
  ASSERT_EQ(::fstat(ram.get(), &st), 0);
  EXPECT_EQ(st.st_blocks * 512, 64 << 20);  // no hole for a clone's fault to fill
  std::string data(4096, 'd');
  ASSERT_EQ(::pwrite(ram.get(), data.data(), data.size(), (8 << 20) + 8192), 4096);
  ASSERT_EQ(::pwrite(ram.get(), "x", 1, (40 << 20) + 4095), 1);  // a page with one byte
  fs::path file = dir_ / "ram";
  UniqueFd out(::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  auto written = vm::copy_nonzero_pages(ram.get(), out.get());
  ASSERT_TRUE(written);
  EXPECT_EQ(*written, 8192u);
  ASSERT_EQ(::fstat(out.get(), &st), 0);
  EXPECT_EQ(st.st_size, 64 << 20);
  EXPECT_LE(st.st_blocks * 512, 64 << 10);  // the two pages with data (and the fs's rounding)
  char b[4096];
  ASSERT_EQ(::pread(out.get(), b, 4096, (8 << 20) + 8192), 4096);
  EXPECT_EQ(std::string(b, 4096), data);
  ASSERT_EQ(::pread(out.get(), b, 1, (40 << 20) + 4095), 1);
  EXPECT_EQ(b[0], 'x');
  ASSERT_EQ(::pread(out.get(), b, 4096, 20 << 20), 4096);
  EXPECT_EQ(std::string(b, 4096), std::string(4096, '\0'));
}

TEST_F(TemplateTest, LoadsOnlyATemplateOfTheSameKey) {
  json key = template_key(config_, spec_, "tcg");
  fs::path t = store(key, "guest ram");
  auto loaded = load_template(t, key);
  ASSERT_TRUE(loaded);
  ASSERT_TRUE(*loaded);
  EXPECT_EQ((*loaded)->cmdline, "console=ttyS0");
  char buf[9];
  ASSERT_EQ(::pread((*loaded)->ram.get(), buf, 9, 0), 9);
  EXPECT_EQ(std::string(buf, 9), "guest ram");
  EXPECT_EQ(::pwrite((*loaded)->ram.get(), "x", 1, 0), -1);  // sealed
  json other = key;
  other["pids"] = 1;
  auto none = load_template(t, other);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  fs::remove(t / kTemplateState);  // half a template is none
  auto half = load_template(t, key);
  ASSERT_TRUE(half);
  EXPECT_FALSE(*half);
}

TEST_F(TemplateTest, PrunesTemplatesNoCreateCanUse) {
  json key = template_key(config_, spec_, "tcg");
  fs::path current = store(key, "a");
  SandboxSpec big = spec_;
  big.limits.memory_bytes = 2 << 20;
  fs::path other_limits = store(template_key(config_, big, "tcg"), "b");
  json old_kernel = key;
  old_kernel["kernel"]["ino"] = 1;
  fs::path stale_kernel = store(old_kernel, "c");
  json old_disk = key;
  old_disk["image_disk"]["mtime_ns"] = 1;
  fs::path stale_disk = store(old_disk, "d");
  json gone = key;
  gone["image_disk_path"] = (dir_ / "deleted.ext4").string();
  fs::path gone_image = store(gone, "e");
  fs::path building = dir_ / "templates" / ".build-0123";
  fs::create_directories(building);
  prune_templates(dir_ / "templates", key, 16);
  EXPECT_TRUE(fs::exists(current));
  EXPECT_TRUE(fs::exists(other_limits));  // same image, other limits: still usable
  EXPECT_TRUE(fs::exists(building));      // its builder's
  EXPECT_FALSE(fs::exists(stale_kernel));
  EXPECT_FALSE(fs::exists(stale_disk));
  EXPECT_FALSE(fs::exists(gone_image));
}

TEST_F(TemplateTest, KeepsTheMostRecentlyUsedOnly) {
  json key = template_key(config_, spec_, "tcg");
  fs::path current = store(key, "a");
  std::vector<fs::path> others;
  for (int i = 0; i < 4; ++i) {
    SandboxSpec s = spec_;
    s.limits.pids = 100 + i;
    others.push_back(store(template_key(config_, s, "tcg"), "x"));
    // Oldest first: i = 0 was used longest ago.
    fs::last_write_time(others.back() / kTemplateMachine,
                        fs::file_time_type::clock::now() - std::chrono::hours(10 - i));
  }
  fs::last_write_time(current / kTemplateMachine,
                      fs::file_time_type::clock::now() - std::chrono::hours(100));
  prune_templates(dir_ / "templates", key, 3);
  EXPECT_TRUE(fs::exists(current));  // the one wanted now, however old
  EXPECT_FALSE(fs::exists(others[0]));
  EXPECT_FALSE(fs::exists(others[1]));
  EXPECT_TRUE(fs::exists(others[2]));
  EXPECT_TRUE(fs::exists(others[3]));
}

}  // namespace
}  // namespace space::runtime::qemu
