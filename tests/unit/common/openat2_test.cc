// The openat2 wrapper (common/openat2.h): the kernel, not string checks, keeps a lookup inside
// its root.
#include "common/openat2.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../temp_dir.h"
#include "common/fd.h"

namespace space {
namespace {

TEST(Openat2, ResolvesBeneathItsRootOnly) {
  test_support::TempDir dir("space-openat2");
  std::filesystem::create_directory(dir.path() / "root");
  std::ofstream(dir.path() / "root" / "file") << "x";
  std::ofstream(dir.path() / "outside") << "y";
  std::filesystem::create_symlink("../outside", dir.path() / "root" / "link");
  UniqueFd root(::open((dir.path() / "root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root);
  const uint64_t beneath = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  UniqueFd f(sys_openat2(root.get(), "file", O_RDONLY | O_CLOEXEC, beneath));
  if (!f && errno == ENOSYS) GTEST_SKIP() << "no openat2 on this kernel";
  ASSERT_TRUE(f) << strerror(errno);
  auto open_in = [&](const char* path, uint64_t resolve) {
    UniqueFd fd(sys_openat2(root.get(), path, O_RDONLY | O_CLOEXEC, resolve));
    return fd ? 0 : errno;
  };
  EXPECT_EQ(open_in("../outside", beneath), EXDEV);
  EXPECT_EQ(open_in("link", beneath), EXDEV);  // the symlink points out
  EXPECT_EQ(open_in("link", beneath | RESOLVE_NO_SYMLINKS), ELOOP);
  // RESOLVE_IN_ROOT: ".." and "/" stop at the root.
  EXPECT_EQ(open_in("/file", RESOLVE_IN_ROOT), 0);
  EXPECT_EQ(open_in("../outside", RESOLVE_IN_ROOT), ENOENT);
}

}  // namespace
}  // namespace space
