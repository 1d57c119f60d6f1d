// Cost of an incremental snapshot: a 256 MiB tree (240 files of 1 MiB in 8 directories and one
// file of 16 MiB), then about 1% changed (two small files rewritten, 64 KiB overwritten in the
// middle of the big one). The second snapshot must store under 5% of the first's bytes and read
// only the changed files (a counter, not a timing); timings are printed for the record. SPACE's
// 1 GB figure scales the same way: cost follows the changed files, not the tree.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "snapshot/cas.h"
#include "test_tree.h"

namespace space::snapshot {
namespace {

using testing::open_dir;
using testing::random_string;
using testing::TempDir;
using testing::write_file;

TEST(Incremental, OnePercentChangedCostsAboutOnePercent) {
  TempDir tmp;
  auto store = std::move(*Store::open(tmp / "store", std::string(32, 'i')));
  const std::string src = tmp / "src";
  ::mkdir(src.c_str(), 0755);
  uint64_t seed = 1;
  for (int d = 0; d < 8; ++d) {
    const std::string dir = src + "/dir" + std::to_string(d);
    ::mkdir(dir.c_str(), 0755);
    for (int f = 0; f < 30; ++f)
      write_file(dir + "/f" + std::to_string(f), random_string(1 << 20, seed++));
  }
  write_file(src + "/big", random_string(16 << 20, seed++));

  using Clock = std::chrono::steady_clock;
  auto timed_take = [&](const std::string& id, const Manifest* parent, uint64_t* read,
                        double* seconds) {
    UniqueFd fd = open_dir(src);
    auto t0 = Clock::now();
    auto m = store->take(fd.get(), id, parent, {}, [&](uint64_t n) { *read = n; });
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_TRUE(m) << m.error().message();
    return *m;
  };
  uint64_t read1 = 0, read2 = 0;
  double t1 = 0, t2 = 0;
  Manifest s1 = timed_take("snap_1", nullptr, &read1, &t1);
  EXPECT_EQ(read1, 256u << 20);
  EXPECT_GT(s1.new_bytes, 255u << 20);  // random bytes: zstd keeps them near their size

  write_file(src + "/dir3/f7", random_string(1 << 20, 1000));
  write_file(src + "/dir6/f21", random_string(1 << 20, 1001));
  {
    std::string patch = random_string(64 << 10, 1002);
    UniqueFd big(::open((src + "/big").c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_EQ(::pwrite(big.get(), patch.data(), patch.size(), 8 << 20),
              static_cast<ssize_t>(patch.size()));
  }
  Manifest s2 = timed_take("snap_2", &s1, &read2, &t2);
  EXPECT_EQ(s2.reused_files, 238u);
  EXPECT_EQ(read2, (2u << 20) + (16u << 20));  // the three changed files, nothing else
  EXPECT_LT(s2.new_bytes, s1.new_bytes / 20);
  EXPECT_GT(s2.new_bytes, 2u << 20);  // the two rewritten files at least
  std::printf(
      "[ figures  ] first: %.1f MiB read, %.1f MiB stored, %.2f s; after 1%% change: %.1f MiB "
      "read, %.2f MiB stored (%.2f%%), %.2f s, %llu files reused\n",
      read1 / 1048576.0, s1.new_bytes / 1048576.0, t1, read2 / 1048576.0, s2.new_bytes / 1048576.0,
      100.0 * s2.new_bytes / s1.new_bytes, t2, static_cast<unsigned long long>(s2.reused_files));

  // And the incremental snapshot is complete on its own.
  ::mkdir((tmp / "dst").c_str(), 0700);
  UniqueFd dst = open_dir(tmp / "dst");
  auto loaded = store->load("snap_2");
  ASSERT_TRUE(loaded);
  ASSERT_TRUE(store->restore(*loaded, dst.get()));
  EXPECT_EQ(testing::compare_trees(src, tmp / "dst"), "");
}

}  // namespace
}  // namespace space::snapshot
