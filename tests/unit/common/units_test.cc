// parse_size / parse_duration: the accepted forms, and the garbage, negative and overflowing
// inputs they must refuse.
#include "common/units.h"

#include <gtest/gtest.h>

namespace space {
namespace {

TEST(ParseSize, AcceptsBinaryUnits) {
  EXPECT_EQ(*parse_size("1024"), 1024u);
  EXPECT_EQ(*parse_size("0"), 0u);
  EXPECT_EQ(*parse_size("512M"), 512ull << 20);
  EXPECT_EQ(*parse_size("2G"), 2ull << 30);
  EXPECT_EQ(*parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(*parse_size("64k"), 64ull << 10);
  EXPECT_EQ(*parse_size("64K"), 64ull << 10);
  EXPECT_EQ(*parse_size("512Mi"), 512ull << 20);
  EXPECT_EQ(*parse_size("512MB"), 512ull << 20);
  EXPECT_EQ(*parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(*parse_size("3T"), 3ull << 40);
  EXPECT_EQ(*parse_size("100B"), 100u);
  EXPECT_EQ(*parse_size("0.5K"), 512u);
  EXPECT_EQ(*parse_size("1.0001K"), 1024u);  // rounded down to whole bytes
  EXPECT_EQ(*parse_size("15E"), 15ull << 60);
  EXPECT_EQ(*parse_size("18446744073709551615"), UINT64_MAX);
}

TEST(ParseSize, RefusesGarbage) {
  for (const char* bad :
       {"",   " ",   "M",   "-1",  "-1G", "+5",  "1.5",   "1e9", "0x10", "1 G",  " 1G", "1G ",
        "1Q", "1GG", "1Gx", "1iB", ".5G", "5.G", "1..5G", "nan", "inf",  "1G\n", "１G"}) {
    auto r = parse_size(bad);
    EXPECT_FALSE(r) << "accepted \"" << bad << "\"";
    if (!r) {
      EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
      EXPECT_NE(r.error().message().find("512M"), std::string::npos) << r.error().message();
    }
  }
}

TEST(ParseSize, RefusesOverflow) {
  EXPECT_FALSE(parse_size("18446744073709551616"));
  EXPECT_FALSE(parse_size("99999999999999999999999999"));
  EXPECT_FALSE(parse_size("16E"));
  EXPECT_FALSE(parse_size("17179869184G"));  // 2^34 G = 2^64
  EXPECT_TRUE(parse_size("17179869183G"));
  EXPECT_FALSE(parse_size("15.99999999999999999999E"));  // too many decimals
}

TEST(ParseDuration, AcceptsUnits) {
  EXPECT_DOUBLE_EQ(*parse_duration("30"), 30);
  EXPECT_DOUBLE_EQ(*parse_duration("30s"), 30);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5"), 1.5);
  EXPECT_DOUBLE_EQ(*parse_duration("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_duration("5m"), 300);
  EXPECT_DOUBLE_EQ(*parse_duration("1h"), 3600);
  EXPECT_DOUBLE_EQ(*parse_duration("2d"), 172800);
  EXPECT_DOUBLE_EQ(*parse_duration("0"), 0);
}

TEST(ParseDuration, RefusesGarbageAndOverflow) {
  for (const char* bad : {"", "s", "-1", "-1s", "1e3", "inf", "nan", "1 s", "1x", "1sec", "1hh",
                          "0x1", ".5", "5.", "1mm", "36500000d", "99999999999999999999"}) {
    EXPECT_FALSE(parse_duration(bad)) << "accepted \"" << bad << "\"";
  }
}

TEST(FormatSize, ShortForms) {
  EXPECT_EQ(format_size(1000), "1000B");
  EXPECT_EQ(format_size(512ull << 20), "512M");
  EXPECT_EQ(format_size(3ull << 29), "1.50G");
  EXPECT_EQ(*parse_size(format_size(3ull << 29)), 3ull << 29);
  EXPECT_EQ(format_size(1ull << 60), "1E");
}

TEST(FormatDuration, Compact) {
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(90), "1m30s");
  EXPECT_EQ(format_duration(7200), "2h");
  EXPECT_EQ(format_duration(90000), "1d1h");
  EXPECT_EQ(format_duration(1.5), "1.5s");
}

}  // namespace
}  // namespace space
