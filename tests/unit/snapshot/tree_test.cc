// Walking untrusted trees and restoring beneath a directory: symlinks (to /etc, outside the
// tree) are recorded, never followed or read; open_beneath refuses symlinks and escapes with
// openat2 and with its component-walk fallback; limits on entries, depth and path length give
// clear errors; a file written during the snapshot fails it; device nodes are skipped with a
// note; scan() and diff() report what changed.
#include <gtest/gtest.h>

#include <fstream>

#include "snapshot/cas.h"
#include "snapshot/internal.h"
#include "test_tree.h"

namespace space::snapshot {
namespace {

using testing::open_dir;
using testing::random_string;
using testing::TempDir;
using testing::write_file;

const std::string kKey(32, 'z');

class TreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*Store::open(tmp_ / "store", kKey));
    src_ = tmp_ / "src";
    ::mkdir(src_.c_str(), 0755);
  }
  Result<Manifest> take(const std::string& id, const Manifest* parent = nullptr,
                        std::function<void(uint64_t)> progress = {}) {
    UniqueFd fd = open_dir(src_);
    return store_->take(fd.get(), id, parent, {}, progress);
  }
  static const Entry* find(const Manifest& m, const std::string& path) {
    for (const Entry& e : m.entries)
      if (e.path == path) return &e;
    return nullptr;
  }
  std::set<std::string> stored_chunk_ids() {
    std::set<std::string> ids;
    for (auto& p : std::filesystem::recursive_directory_iterator(tmp_ / "store/chunks"))
      if (p.is_regular_file())
        ids.insert(p.path().parent_path().filename().string() + p.path().filename().string());
    return ids;
  }

  TempDir tmp_;
  std::unique_ptr<Store> store_;
  std::string src_;
};

TEST_F(TreeTest, SymlinksAreRecordedNeverFollowed) {
  write_file(src_ + "/real", "the only bytes to read");
  ::symlink("/etc/passwd", (src_ + "/passwd").c_str());
  ::symlink("/etc", (src_ + "/etc").c_str());
  ::mkdir((src_ + "/d").c_str(), 0755);
  ::symlink("../../../../../../../etc/shadow", (src_ + "/d/shadow").c_str());
  ::symlink("/proc/self/root/etc/passwd", (src_ + "/d/magic").c_str());
  uint64_t read = 0;
  auto m = take("snap_1", nullptr, [&](uint64_t n) { read = n; });
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(read, 22u);  // "real" only
  EXPECT_EQ(find(*m, "passwd")->type, Entry::Type::kSymlink);
  EXPECT_EQ(find(*m, "passwd")->target, "/etc/passwd");
  EXPECT_EQ(find(*m, "etc")->type, Entry::Type::kSymlink);
  EXPECT_EQ(find(*m, "etc/passwd"), nullptr);  // not descended into
  EXPECT_EQ(find(*m, "d/shadow")->target, "../../../../../../../etc/shadow");
  // No stored chunk holds /etc/passwd.
  std::ifstream in("/etc/passwd", std::ios::binary);
  std::string passwd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(stored_chunk_ids().contains(detail::sha256_hex(passwd.data(), passwd.size())));
  EXPECT_EQ(stored_chunk_ids().size(), 1u);
}

TEST_F(TreeTest, OpenBeneathRefusesSymlinksAndEscapes) {
  ::mkdir((tmp_ / "outside").c_str(), 0700);
  write_file(tmp_ / "outside/target", "outside");
  ::mkdir((src_ + "/d").c_str(), 0755);
  write_file(src_ + "/d/f", "inside");
  ::symlink((tmp_ / "outside").c_str(), (src_ + "/out").c_str());
  ::symlink("d", (src_ + "/rel").c_str());
  ::symlink("f", (src_ + "/d/lf").c_str());
  UniqueFd root = open_dir(src_);
  for (bool walk : {false, true}) {
    detail::g_force_component_walk = walk;
    SCOPED_TRACE(walk ? "component walk" : "openat2");
    EXPECT_TRUE(detail::open_beneath(root.get(), "d/f", O_RDONLY));
    EXPECT_TRUE(detail::open_beneath(root.get(), "d", O_PATH | O_DIRECTORY));
    EXPECT_TRUE(detail::open_beneath(root.get(), "", O_PATH | O_DIRECTORY));
    for (const char* bad : {"out/target", "out", "rel/f", "rel", "d/lf"})
      EXPECT_FALSE(detail::open_beneath(root.get(), bad, O_RDONLY)) << bad;
  }
  detail::g_force_component_walk = false;
}

TEST_F(TreeTest, LimitsGiveClearErrors) {
  for (int i = 0; i < 20; ++i) write_file(src_ + "/f" + std::to_string(i), "x");
  StoreOptions few;
  few.max_entries = 10;
  auto small = Store::open(tmp_ / "store_small", kKey, few);
  UniqueFd fd = open_dir(src_);
  auto r = (*small)->take(fd.get(), "snap_1", nullptr, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kResourceExhausted);
  EXPECT_NE(r.error().message().find("more than 10 entries"), std::string::npos)
      << r.error().message();
  EXPECT_TRUE((*small)->list().empty());

  std::string deep = src_;
  for (int i = 0; i < 6; ++i) ::mkdir((deep += "/d").c_str(), 0755);
  StoreOptions shallow;
  shallow.max_depth = 4;
  auto r2 = Store::scan(fd.get(), shallow);
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message().find("deeper than 4"), std::string::npos) << r2.error().message();

  StoreOptions short_paths;
  short_paths.max_path = 8;
  auto r3 = Store::scan(fd.get(), short_paths);
  ASSERT_FALSE(r3);
  EXPECT_NE(r3.error().message().find("longer than 8 bytes"), std::string::npos)
      << r3.error().message();
  EXPECT_TRUE(Store::scan(fd.get()));
}

TEST_F(TreeTest, AFileWrittenDuringTheSnapshotFailsIt) {
  write_file(src_ + "/growing", random_string(12 << 20, 1));
  bool appended = false;
  auto r = take("snap_1", nullptr, [&](uint64_t) {
    if (appended) return;
    appended = true;
    std::ofstream(src_ + "/growing", std::ios::app) << "more";
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kConflict);
  EXPECT_NE(r.error().message().find("changed while snapshotting"), std::string::npos)
      << r.error().message();
  EXPECT_TRUE(store_->list().empty());
}

TEST_F(TreeTest, DeviceNodesAreSkippedWithANote) {
  ASSERT_EQ(::mknod((src_ + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(::mknod((src_ + "/wh").c_str(), S_IFCHR, makedev(0, 0)), 0);
  auto m = take("snap_1");
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(find(*m, "null"), nullptr);
  EXPECT_EQ(find(*m, "wh")->type, Entry::Type::kWhiteout);
  ASSERT_EQ(m->skipped.size(), 1u);
  EXPECT_EQ(m->skipped[0], "null: device node, not captured");
  EXPECT_EQ(store_->load("snap_1")->skipped, m->skipped);
}

TEST_F(TreeTest, ScanAndDiff) {
  write_file(src_ + "/same", "same");
  write_file(src_ + "/edit", "before");
  write_file(src_ + "/gone", "gone");
  ::mkdir((src_ + "/dir").c_str(), 0755);
  auto s1 = take("snap_1");
  ASSERT_TRUE(s1);
  write_file(src_ + "/edit", "after!");  // same size, new mtime
  ::unlink((src_ + "/gone").c_str());
  write_file(src_ + "/dir/new", "new");  // also moves dir's mtime: not a change by itself
  ASSERT_EQ(::mknod((src_ + "/image-file").c_str(), S_IFCHR, makedev(0, 0)), 0);
  ::chmod((src_ + "/same").c_str(), 0600);
  UniqueFd fd = open_dir(src_);
  auto now = Store::scan(fd.get());
  ASSERT_TRUE(now) << now.error().message();
  EXPECT_TRUE(find(*now, "edit")->chunks.empty());  // metadata only
  nlohmann::json d = Store::diff(&*s1, *now);
  EXPECT_EQ(d["added"], nlohmann::json({"/dir/new"}));
  EXPECT_EQ(d["changed"], nlohmann::json({"/edit", "/same"}));
  EXPECT_EQ(d["deleted"], nlohmann::json({"/gone", "/image-file"}));
  nlohmann::json all = Store::diff(nullptr, *now);
  EXPECT_EQ(all["added"], nlohmann::json({"/dir", "/dir/new", "/edit", "/same"}));
  EXPECT_EQ(all["deleted"], nlohmann::json({"/image-file"}));
  // Same size and mtime but other bytes: two taken manifests compare their chunks.
  auto s2 = take("snap_2");
  ASSERT_TRUE(s2);
  struct stat st;
  ::stat((src_ + "/edit").c_str(), &st);
  write_file(src_ + "/edit", "AFTER!");
  testing::set_mtime(src_ + "/edit", st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  auto s3 = take("snap_3");
  ASSERT_TRUE(s3);
  EXPECT_EQ(Store::diff(&*s2, *s3)["changed"], nlohmann::json({"/edit"}));
  EXPECT_EQ(Store::diff(&*s3, *s3), nlohmann::json({{"added", nlohmann::json::array()},
                                                    {"changed", nlohmann::json::array()},
                                                    {"deleted", nlohmann::json::array()}}));
}

}  // namespace
}  // namespace space::snapshot
