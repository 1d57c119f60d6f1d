// Untrusted tar entry names: normalized or refused, never allowed to climb out.
#include "daemon/archive_names.h"

#include <gtest/gtest.h>

namespace space::daemon {
namespace {

TEST(ArchiveNamesTest, Normalizes) {
  EXPECT_EQ(*clean_archive_name("./a//b/"), "a/b");
  EXPECT_EQ(*clean_archive_name("/etc/passwd"), "etc/passwd");
  EXPECT_EQ(*clean_archive_name("."), "");
  EXPECT_EQ(*clean_archive_name("./"), "");
  EXPECT_EQ(*clean_archive_name("a/./b"), "a/b");
  EXPECT_EQ(*clean_archive_name("...x/..y"), "...x/..y");  // dots inside names are fine
}

TEST(ArchiveNamesTest, RefusesParentComponents) {
  for (const char* bad : {"..", "../x", "a/../../x", "/../etc", "a/..", "./../b"}) {
    auto r = clean_archive_name(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  }
  EXPECT_FALSE(clean_archive_name(std::string("a\0b", 3)));
  EXPECT_FALSE(clean_archive_name(std::string(5000, 'a')));
}

}  // namespace
}  // namespace space::daemon
