// The project's one hex encoding (common/hex.h): lowercase out, strict lowercase in.
#include "common/hex.h"

#include <gtest/gtest.h>

namespace space {
namespace {

TEST(Hex, EncodesLowercase) {
  const unsigned char b[] = {0x00, 0x01, 0xab, 0xff};
  EXPECT_EQ(to_hex(b, sizeof b), "0001abff");
  EXPECT_EQ(to_hex(std::string_view("\x7f\x80", 2)), "7f80");
  EXPECT_EQ(to_hex(std::string_view()), "");
}

TEST(Hex, DecodesOnlyWhatToHexWrites) {
  std::string out;
  ASSERT_TRUE(from_hex("0001abff", &out));
  EXPECT_EQ(out, std::string("\x00\x01\xab\xff", 4));
  EXPECT_TRUE(from_hex("", &out));
  EXPECT_EQ(out, "");
  EXPECT_FALSE(from_hex("abc", &out));   // odd length
  EXPECT_FALSE(from_hex("ABCD", &out));  // one spelling per value
  EXPECT_FALSE(from_hex("0g", &out));
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  ASSERT_TRUE(from_hex(to_hex(all), &out));
  EXPECT_EQ(out, all);
}

TEST(Hex, DigitsAndChecks) {
  EXPECT_EQ(hex_value('0'), 0);
  EXPECT_EQ(hex_value('a'), 10);
  EXPECT_EQ(hex_value('F'), 15);
  EXPECT_EQ(hex_value('g'), -1);
  EXPECT_TRUE(is_lower_hex("0123456789abcdef"));
  EXPECT_FALSE(is_lower_hex("0A"));
  EXPECT_TRUE(is_lower_hex(""));
}

}  // namespace
}  // namespace space
