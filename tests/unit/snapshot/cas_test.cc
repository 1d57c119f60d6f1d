// The snapshot store end to end on real files: a tree with every kind of entry restores exactly;
// an incremental snapshot reuses unchanged files without opening them and restores the new
// state while the parent still restores the old one; identical content dedups across trees;
// gc frees what no manifest references and never what an unreadable manifest might. Runs as
// root (chown, mknod, trusted.* xattrs).
#include "snapshot/cas.h"

#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <condition_variable>
#include <csignal>
#include <future>
#include <mutex>
#include <set>

#include "snapshot/internal.h"
#include "test_tree.h"

namespace space::snapshot {
namespace {

using testing::compare_trees;
using testing::open_dir;
using testing::random_string;
using testing::TempDir;
using testing::write_file;

const std::string kKey(32, 'k');

void make_socket(const std::string& path) {
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
  ::close(s);
}

// A tree with every kind of entry an overlay upper directory holds.
void build_rich_tree(const std::string& r) {
  ASSERT_EQ(::mkdir(r.c_str(), 0755), 0);
  write_file(r + "/empty", "");
  write_file(r + "/one", "x");
  write_file(r + "/mid", random_string((1 << 20) + 1, 1));
  write_file(r + "/big", random_string(9 << 20, 2));
  ASSERT_EQ(::mkdir((r + "/private").c_str(), 0700), 0);
  write_file(r + "/private/secret", "s3cret\n");
  ASSERT_EQ(::mkdir((r + "/tmp").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((r + "/tmp").c_str(), 01777), 0);
  ASSERT_EQ(::mkdir((r + "/sgid").c_str(), 0755), 0);
  ASSERT_EQ(::chown((r + "/sgid").c_str(), 100000, 100050), 0);
  ASSERT_EQ(::chmod((r + "/sgid").c_str(), 02775), 0);
  write_file(r + "/sgid/file", "in a setgid dir");
  write_file(r + "/setuid", "#!/bin/true\n");
  ASSERT_EQ(::chmod((r + "/setuid").c_str(), 04755), 0);
  ASSERT_EQ(::mkdir((r + "/links").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/etc/passwd", (r + "/links/abs").c_str()), 0);
  ASSERT_EQ(::symlink("../one", (r + "/links/rel").c_str()), 0);
  ASSERT_EQ(::symlink("nowhere/at/all", (r + "/links/dangling").c_str()), 0);
  ASSERT_EQ(::symlink("../../../../../../etc", (r + "/links/outside").c_str()), 0);
  ASSERT_EQ(::lchown((r + "/links/rel").c_str(), 100001, 100001), 0);
  ASSERT_EQ(::lsetxattr((r + "/links/rel").c_str(), "trusted.on-link", "L", 1, 0), 0);
  ASSERT_EQ(::mkdir((r + "/hard").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((r + "/hard/deep").c_str(), 0755), 0);
  write_file(r + "/hard/a", random_string(300000, 3));
  ASSERT_EQ(::link((r + "/hard/a").c_str(), (r + "/hard/b").c_str()), 0);
  ASSERT_EQ(::link((r + "/hard/a").c_str(), (r + "/hard/deep/c").c_str()), 0);
  ASSERT_EQ(::chown((r + "/hard/a").c_str(), 100002, 100002), 0);
  write_file(r + "/xattrs", "has xattrs");
  ASSERT_EQ(::setxattr((r + "/xattrs").c_str(), "user.note", "hello", 5, 0), 0);
  const char bin[] = {'\0', '\1', '\xff', '\x80'};
  ASSERT_EQ(::setxattr((r + "/xattrs").c_str(), "trusted.secret", bin, sizeof bin, 0), 0);
  write_file(r + "/owned", "owned by the sandbox's root");
  ASSERT_EQ(::chown((r + "/owned").c_str(), 100000, 100000), 0);
  // A file capability (VFS_CAP_REVISION_2, CAP_NET_BIND_SERVICE): chown clears it, so restore
  // must set xattrs after the owner.
  const uint32_t cap[5] = {0x02000000, 1u << 10, 0, 0, 0};
  write_file(r + "/capped", "binary");
  ASSERT_EQ(::chown((r + "/capped").c_str(), 100000, 100000), 0);
  ASSERT_EQ(::chmod((r + "/capped").c_str(), 0755), 0);
  ASSERT_EQ(::setxattr((r + "/capped").c_str(), "security.capability", cap, sizeof cap, 0), 0);
  ASSERT_EQ(::mknod((r + "/whiteout").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
  ASSERT_EQ(::lsetxattr((r + "/whiteout").c_str(), "trusted.overlay.test", "w", 1, 0), 0);
  ASSERT_EQ(::mkdir((r + "/opaque").c_str(), 0755), 0);
  ASSERT_EQ(::setxattr((r + "/opaque").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
  ASSERT_EQ(::setxattr((r + "/opaque").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  write_file(r + "/opaque/inside", "only this shows");
  ASSERT_EQ(::mkfifo((r + "/fifo").c_str(), 0640), 0);
  make_socket(r + "/sock");
  write_file(r + "/name-\xff\xfe-not-utf8", "odd name");
  // Times last, leaves first, with nanoseconds.
  int64_t t = 1600000000;
  for (const std::string& rel : testing::list_tree(r))
    if (!rel.empty()) testing::set_mtime(r + "/" + rel, t++, 123456789);
  for (const char* d :
       {"/hard/deep", "/hard", "/links", "/opaque", "/private", "/sgid", "/tmp", ""})
    testing::set_mtime(r + d, t++, 987654321);
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::open(tmp_ / "store", kKey);
    ASSERT_TRUE(s) << s.error().message();
    store_ = std::move(*s);
  }
  Manifest take(const std::string& dir, const std::string& id, const Manifest* parent = nullptr,
                uint64_t* bytes_read = nullptr) {
    UniqueFd fd = open_dir(dir);
    auto m = store_->take(fd.get(), id, parent, {{"sandbox", "sb_test"}}, [&](uint64_t n) {
      if (bytes_read) *bytes_read = n;
    });
    EXPECT_TRUE(m) << m.error().message();
    return m ? *m : Manifest{};
  }
  Result<void> restore_into(const Manifest& m, const std::string& dir) {
    ::mkdir(dir.c_str(), 0700);
    UniqueFd fd = open_dir(dir);
    return store_->restore(m, fd.get());
  }
  size_t count_tmp() {
    size_t n = 0;
    for (auto& p : std::filesystem::recursive_directory_iterator(tmp_ / "store/chunks"))
      n += p.path().filename().string().ends_with(".tmp");
    return n;
  }
  const Entry* find(const Manifest& m, const std::string& path) {
    for (const Entry& e : m.entries)
      if (e.path == path) return &e;
    return nullptr;
  }

  TempDir tmp_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, RoundTripKeepsEveryProperty) {
  build_rich_tree(tmp_ / "src");
  Manifest m = take(tmp_ / "src", "snap_1");
  EXPECT_TRUE(m.skipped.empty());
  EXPECT_EQ(m.labels.at("sandbox"), "sb_test");
  const Entry* c = find(m, "hard/deep/c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->hardlink_to, "hard/a");
  EXPECT_TRUE(c->chunks.empty());
  EXPECT_EQ(find(m, "whiteout")->type, Entry::Type::kWhiteout);
  EXPECT_EQ(find(m, "fifo")->type, Entry::Type::kOther);
  EXPECT_GE(find(m, "big")->chunks.size(), 3u);  // 9 MiB: at least three chunks
  EXPECT_EQ(find(m, "empty")->chunks.size(), 0u);

  // What was written loads back identical, and restores to an identical tree.
  auto loaded = store_->load("snap_1");
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(detail::to_json(*loaded), detail::to_json(m));
  auto r = restore_into(*loaded, tmp_ / "dst");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(compare_trees(tmp_ / "src", tmp_ / "dst"), "");
  // The comparison can fail: a changed mtime is noticed.
  testing::set_mtime(tmp_ / "dst/one", 1);
  EXPECT_NE(compare_trees(tmp_ / "src", tmp_ / "dst"), "");
}

// A sparse file (16 GiB, a few KiB of data in the middle and at the end) is taken without
// reading its holes and restored with holes: byte-identical where read, the same size, and
// still sparse. Reading 16 GiB would take minutes here; the test bounds the bytes read.
TEST_F(StoreTest, SparseFilesKeepTheirHolesAndAreNotReadWhole) {
  const std::string src = tmp_ / "src";
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  const std::string f = src + "/sparse";
  const uint64_t size = uint64_t{16} << 30;
  {
    UniqueFd fd(::open(f.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd);
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
    std::string mid = random_string(5000, 9), tail = random_string(3000, 10);
    ASSERT_EQ(::pwrite(fd.get(), mid.data(), mid.size(), off_t{7} << 30),
              static_cast<ssize_t>(mid.size()));
    ASSERT_EQ(::pwrite(fd.get(), tail.data(), tail.size(), static_cast<off_t>(size - 3000)),
              static_cast<ssize_t>(tail.size()));
  }
  uint64_t bytes_read = 0;
  Manifest m = take(src, "snap_sparse", nullptr, &bytes_read);
  EXPECT_LT(bytes_read, uint64_t{64} << 20) << "the holes were read";
  const Entry* e = find(m, "sparse");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->size, size);
  ASSERT_TRUE(restore_into(m, tmp_ / "dst"));
  const std::string out = tmp_ / "dst/sparse";
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{64} << 20) << "holes were filled";
  UniqueFd a(::open(f.c_str(), O_RDONLY | O_CLOEXEC)), b(::open(out.c_str(), O_RDONLY | O_CLOEXEC));
  for (off_t at :
       {off_t{0}, (off_t{7} << 30) - 100, static_cast<off_t>(size - 5000), off_t{12} << 30}) {
    std::string x(6000, '\1'), y(6000, '\1');
    ASSERT_EQ(::pread(a.get(), x.data(), x.size(), at), ::pread(b.get(), y.data(), y.size(), at));
    EXPECT_EQ(x, y) << "at " << at;
  }
  EXPECT_TRUE(store_->verify(m));
}

TEST_F(StoreTest, RestoreRefusesANonEmptyTarget) {
  build_rich_tree(tmp_ / "src");
  Manifest m = take(tmp_ / "src", "snap_1");
  ::mkdir((tmp_ / "dst").c_str(), 0700);
  write_file(tmp_ / "dst/already", "x");
  auto r = restore_into(m, tmp_ / "dst");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kConflict);
}

// inotify on a directory reports every open of an entry in it; a reused file must see none.
class OpenWatch {
 public:
  explicit OpenWatch(const std::string& dir) : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    ::inotify_add_watch(fd_.get(), dir.c_str(), IN_OPEN | IN_ACCESS);
  }
  std::set<std::string> opened() {
    std::set<std::string> names;
    alignas(inotify_event) char buf[65536];
    ssize_t n;
    while ((n = ::read(fd_.get(), buf, sizeof buf)) > 0) {
      for (char* p = buf; p < buf + n;) {
        auto* ev = reinterpret_cast<inotify_event*>(p);
        if (ev->len > 0) names.insert(ev->name);
        p += sizeof(inotify_event) + ev->len;
      }
    }
    return names;
  }

 private:
  UniqueFd fd_;
};

TEST_F(StoreTest, IncrementalReusesUnchangedFilesWithoutOpeningThem) {
  const std::string src = tmp_ / "src";
  build_rich_tree(src);
  write_file(src + "/changed", random_string(200000, 10));
  write_file(src + "/deleted", "going away");
  write_file(src + "/chmodded", "same bytes, new mode");
  Manifest s1 = take(src, "snap_1");
  ASSERT_TRUE(restore_into(s1, tmp_ / "r1"));
  ASSERT_EQ(compare_trees(src, tmp_ / "r1"), "");

  write_file(src + "/changed", random_string(200000, 11));
  ASSERT_EQ(::unlink((src + "/deleted").c_str()), 0);
  write_file(src + "/added", "new file");
  ASSERT_EQ(::chmod((src + "/chmodded").c_str(), 0600), 0);
  ASSERT_EQ(::mknod((src + "/whiteout2").c_str(), S_IFCHR, makedev(0, 0)), 0);

  OpenWatch watch(src);
  uint64_t bytes_read = 0;
  Manifest s2 = take(src, "snap_2", &s1, &bytes_read);
  std::set<std::string> opened = watch.opened();
  // Read: the changed, added and chmodded files and nothing else.
  EXPECT_TRUE(opened.contains("changed"));  // the watch works
  EXPECT_TRUE(opened.contains("added"));
  for (const char* same : {"big", "mid", "one", "xattrs", "owned", "capped", "setuid"})
    EXPECT_FALSE(opened.contains(same)) << same << " was opened";
  EXPECT_EQ(bytes_read, 200000u + 8 + 20);
  // Every file of s1 but the three touched, and but hard/b and hard/deep/c: a hardlink's other
  // names are taken from its first name, not counted again.
  uint64_t files = 0;
  for (const Entry& e : s1.entries) files += e.type == Entry::Type::kFile;
  EXPECT_EQ(s2.reused_files, files - 3 - 2);
  EXPECT_EQ(s2.parent, "snap_1");
  EXPECT_EQ(find(s2, "deleted"), nullptr);
  EXPECT_NE(find(s2, "added"), nullptr);
  EXPECT_EQ(find(s2, "big")->chunks, find(s1, "big")->chunks);
  EXPECT_NE(find(s2, "changed")->chunks, find(s1, "changed")->chunks);
  EXPECT_GT(s2.new_bytes, 190000u);         // the changed file's bytes (incompressible) ...
  EXPECT_LT(s2.new_bytes, 200000u + 1000);  // ... and little else

  // The new snapshot restores the new state; the parent still restores the old one exactly.
  auto l2 = store_->load("snap_2");
  ASSERT_TRUE(l2) << l2.error().message();
  ASSERT_TRUE(restore_into(*l2, tmp_ / "r2"));
  EXPECT_EQ(compare_trees(src, tmp_ / "r2"), "");
  auto l1 = store_->load("snap_1");
  ASSERT_TRUE(l1);
  ASSERT_TRUE(restore_into(*l1, tmp_ / "r1b"));
  EXPECT_EQ(compare_trees(tmp_ / "r1", tmp_ / "r1b"), "");
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "r2/deleted"));
  EXPECT_TRUE(std::filesystem::exists(tmp_ / "r1b/deleted"));
}

TEST_F(StoreTest, IncrementalRereadsAFileWhoseChunksAreGone) {
  const std::string src = tmp_ / "src";
  ::mkdir(src.c_str(), 0755);
  write_file(src + "/f", random_string(5000, 1));
  Manifest s1 = take(src, "snap_1");
  ASSERT_TRUE(store_->remove("snap_1"));
  ASSERT_TRUE(store_->gc());  // frees f's chunk; s1 is still in memory
  uint64_t read = 0;
  Manifest s2 = take(src, "snap_2", &s1, &read);
  EXPECT_EQ(s2.reused_files, 0u);
  EXPECT_EQ(read, 5000u);
  ASSERT_TRUE(restore_into(s2, tmp_ / "dst"));
  EXPECT_EQ(compare_trees(src, tmp_ / "dst"), "");
}

TEST_F(StoreTest, IdenticalContentDedupsAcrossTrees) {
  for (const char* dir : {"/a", "/b"}) {
    const std::string r = tmp_.path() + dir;
    ::mkdir(r.c_str(), 0755);
    ::mkdir((r + "/sub").c_str(), 0755);
    for (int i = 0; i < 5; ++i)
      write_file(r + (dir[1] == 'a' ? "/file" : "/sub/other") + std::to_string(i),
                 random_string(700000 + i, 100 + i));
    write_file(r + "/large", random_string(6 << 20, 99));
  }
  Manifest a = take(tmp_ / "a", "snap_a");
  StoreStats before = store_->stats();
  Manifest b = take(tmp_ / "b", "snap_b");
  EXPECT_GT(a.new_bytes, 9u << 20);
  EXPECT_EQ(b.new_bytes, 0u);
  EXPECT_EQ(b.reused_files, 0u);  // no parent: read, hashed, found stored
  EXPECT_EQ(store_->stats().chunks, before.chunks);
  EXPECT_EQ(store_->stats().stored_bytes, before.stored_bytes);
  EXPECT_EQ(before.stored_bytes, a.new_bytes);
  // Within one tree too: two copies of the same bytes are stored once.
  const std::string c = tmp_ / "c";
  ::mkdir(c.c_str(), 0755);
  std::string same = random_string(3 << 20, 7);
  write_file(c + "/x", same);
  write_file(c + "/y", same);
  Manifest mc = take(c, "snap_c");
  EXPECT_LT(mc.new_bytes, (3u << 20) + 4096);
  EXPECT_EQ(find(mc, "x")->chunks, find(mc, "y")->chunks);
}

TEST_F(StoreTest, ListLoadRemove) {
  ::mkdir((tmp_ / "src").c_str(), 0755);
  take(tmp_ / "src", "snap_1");
  take(tmp_ / "src", "snap_2");
  EXPECT_EQ(store_->list(), (std::vector<std::string>{"snap_1", "snap_2"}));
  ASSERT_TRUE(store_->remove("snap_1"));
  EXPECT_EQ(store_->list(), (std::vector<std::string>{"snap_2"}));
  EXPECT_EQ(store_->load("snap_1").error().code(), Code::kNotFound);
  EXPECT_EQ(store_->remove("snap_1").error().code(), Code::kNotFound);
  EXPECT_EQ(store_->load("../x").error().code(), Code::kInvalidArgument);
  UniqueFd fd = open_dir(tmp_ / "src");
  auto again = store_->take(fd.get(), "snap_2", nullptr, {});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kAlreadyExists);
  EXPECT_EQ(store_->take(fd.get(), "a/b", nullptr, {}).error().code(), Code::kInvalidArgument);
  EXPECT_FALSE(Store::open(tmp_ / "store2", "short key"));
}

TEST_F(StoreTest, GcFreesOnlyUnreferencedChunksWithAnInjectedClock) {
  double now = 1000;
  StoreOptions opts;
  opts.clock = [&] { return now; };
  auto s = Store::open(tmp_ / "store_clock", kKey, opts);
  ASSERT_TRUE(s);
  store_ = std::move(*s);
  const std::string src = tmp_ / "src";
  ::mkdir(src.c_str(), 0755);
  write_file(src + "/kept", random_string(400000, 1));
  write_file(src + "/dropped", random_string(400000, 2));
  Manifest s1 = take(src, "snap_1");
  EXPECT_EQ(s1.created_at, 1000);
  ::unlink((src + "/dropped").c_str());
  now = 1000 + 86400;
  Manifest s2 = take(src, "snap_2", &s1);
  EXPECT_EQ(s2.created_at, 1000 + 86400);
  EXPECT_EQ(store_->load("snap_1")->created_at, 1000);

  auto none = store_->gc();  // both referenced
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_EQ(none->chunks, 0u);
  // Retention drops the older snapshot (the daemon's policy); gc frees what only it used.
  ASSERT_TRUE(store_->remove("snap_1"));
  StoreStats before = store_->stats();
  auto freed = store_->gc();
  ASSERT_TRUE(freed) << freed.error().message();
  EXPECT_EQ(freed->chunks, 1u);
  EXPECT_GT(freed->bytes, 390000u);
  EXPECT_EQ(store_->stats().chunks, before.chunks - 1);
  EXPECT_EQ(store_->stats().stored_bytes, before.stored_bytes - freed->bytes);
  ASSERT_TRUE(restore_into(*store_->load("snap_2"), tmp_ / "dst"));
  EXPECT_EQ(compare_trees(src, tmp_ / "dst"), "");
}

TEST_F(StoreTest, GcDeletesNothingWhileAManifestDoesNotLoad) {
  const std::string src = tmp_ / "src";
  ::mkdir(src.c_str(), 0755);
  write_file(src + "/a", random_string(10000, 1));
  take(src, "snap_1");
  write_file(src + "/a", random_string(10000, 2));
  take(src, "snap_2");
  // snap_1 is damaged: its chunk may still be needed by whoever repairs it.
  const std::string path = tmp_ / "store/manifests/snap_1.json";
  std::string text = testing::read_file(path);
  write_file(path, text.substr(0, text.size() / 2));
  ASSERT_TRUE(store_->remove("snap_2"));  // snap_2's chunk is now unreferenced
  StoreStats before = store_->stats();
  auto r = store_->gc();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_NE(r.error().message().find("snap_1"), std::string::npos) << r.error().message();
  EXPECT_EQ(store_->stats().chunks, before.chunks);
}

// gc() waits for a take() in progress (flock on the store's lock file): the chunks that take
// has written but no manifest references yet are not freed under it.
TEST_F(StoreTest, GcWaitsForATakeInProgress) {
  const std::string src = tmp_ / "src";
  ::mkdir(src.c_str(), 0755);
  for (int i = 0; i < 3; ++i) write_file(src + "/f" + std::to_string(i), random_string(5 << 20, i));
  detail::ChunkWriter::batch_chunks = 1;  // chunks committed, not yet in a manifest
  std::mutex mu;
  std::condition_variable cv;
  bool reading = false, go_on = false;
  auto taking = std::async(std::launch::async, [&] {
    UniqueFd fd = open_dir(src);
    return store_->take(fd.get(), "snap_1", nullptr, {}, [&](uint64_t n) {
      std::unique_lock<std::mutex> lock(mu);
      if (n < (6u << 20) || reading) return;  // the first file's chunks are stored by now
      reading = true;
      cv.notify_all();
      cv.wait(lock, [&] { return go_on; });
    });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reading; });
  }
  EXPECT_GT(store_->stats().chunks, 0u);
  auto collecting = std::async(std::launch::async, [&] { return store_->gc(); });
  EXPECT_EQ(collecting.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  {
    std::lock_guard<std::mutex> lock(mu);
    go_on = true;
  }
  cv.notify_all();
  auto m = taking.get();
  detail::ChunkWriter::batch_chunks = 4096;
  ASSERT_TRUE(m) << m.error().message();
  auto freed = collecting.get();
  ASSERT_TRUE(freed) << freed.error().message();
  EXPECT_EQ(freed->chunks, 0u);
  ASSERT_TRUE(restore_into(*store_->load("snap_1"), tmp_ / "dst"));
  EXPECT_EQ(compare_trees(src, tmp_ / "dst"), "");
}

// A take() that dies part-way: first in-process (a chunk write fails), then a child process
// killed with SIGKILL in the middle of reading. Earlier snapshots stay intact; gc() then removes
// the orphans.
TEST_F(StoreTest, CrashMidSnapshotLeavesEarlierSnapshotsIntact) {
  const std::string src = tmp_ / "src";
  build_rich_tree(src);
  Manifest s1 = take(src, "snap_1");
  ASSERT_TRUE(restore_into(s1, tmp_ / "r1"));
  const StoreStats clean = store_->stats();
  for (int i = 0; i < 8; ++i)
    write_file(src + "/more" + std::to_string(i), random_string(3 << 20, 50 + i));

  detail::ChunkWriter::fail_after_for_test = 2;
  UniqueFd fd = open_dir(src);
  auto failed = store_->take(fd.get(), "snap_fail", &s1, {});
  detail::ChunkWriter::fail_after_for_test = UINT64_MAX;
  ASSERT_FALSE(failed);
  EXPECT_EQ(store_->load("snap_fail").error().code(), Code::kNotFound);
  EXPECT_EQ(count_tmp(), 0u);  // the failed take removed its uncommitted chunks

  // Small batches, so the killed take leaves committed chunks no manifest references as well as
  // temporary files.
  detail::ChunkWriter::batch_chunks = 3;
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = Store::open(tmp_ / "store", kKey);
    if (!s) ::_exit(1);
    UniqueFd d = open_dir(src);
    bool told = false;
    (void)(*s)->take(d.get(), "snap_killed", &s1, {}, [&](uint64_t n) {
      if (n > (10u << 20) && !told) {
        told = true;
        char c = 1;
        (void)::write(ready[1], &c, 1);
        ::pause();  // killed here, mid-snapshot
      }
    });
    ::_exit(2);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  detail::ChunkWriter::batch_chunks = 4096;
  ASSERT_TRUE(WIFSIGNALED(status));
  // As a crash in the middle of writing a manifest leaves it.
  write_file(tmp_ / "store/manifests/.snap_x.json.0123.tmp", "partial");

  EXPECT_EQ(store_->list(), std::vector<std::string>{"snap_1"});
  EXPECT_GT(store_->stats().chunks, clean.chunks);  // committed orphans
  EXPECT_GT(count_tmp(), 0u);                       // uncommitted ones
  auto l1 = store_->load("snap_1");
  ASSERT_TRUE(l1) << l1.error().message();
  ASSERT_TRUE(restore_into(*l1, tmp_ / "r1b"));
  EXPECT_EQ(compare_trees(tmp_ / "r1", tmp_ / "r1b"), "");

  auto freed = store_->gc();
  ASSERT_TRUE(freed) << freed.error().message();
  EXPECT_GT(freed->chunks, 0u);
  EXPECT_EQ(store_->stats().chunks, clean.chunks);
  EXPECT_EQ(store_->stats().stored_bytes, clean.stored_bytes);
  EXPECT_EQ(count_tmp(), 0u);
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "store/manifests/.snap_x.json.0123.tmp"));
  // And the store still works: a new snapshot of the grown tree restores.
  Manifest s3 = take(src, "snap_3", &s1);
  ASSERT_TRUE(restore_into(s3, tmp_ / "r3"));
  EXPECT_EQ(compare_trees(src, tmp_ / "r3"), "");
}

}  // namespace
}  // namespace space::snapshot
