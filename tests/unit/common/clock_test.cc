// Wall-clock helpers (common/clock.h): RFC 3339 out and back.
#include "common/clock.h"

#include <gtest/gtest.h>

namespace space {
namespace {

TEST(Clock, Rfc3339) {
  EXPECT_EQ(rfc3339(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(rfc3339(1796434708.1239), "2026-12-05T01:38:28.123Z");
}

TEST(Clock, ParseRfc3339) {
  EXPECT_EQ(parse_rfc3339("2026-12-05T01:38:28Z"), 1796434708.0);
  EXPECT_EQ(parse_rfc3339("2026-12-05T01:38:28.123Z"), 1796434708.0);
  EXPECT_EQ(parse_rfc3339(rfc3339(1796434708.5)), 1796434708.0);
  EXPECT_FALSE(parse_rfc3339("2026-12-05T01:38:28"));
  EXPECT_FALSE(parse_rfc3339("2026-12-05T01:38:28+01:00"));
  EXPECT_FALSE(parse_rfc3339("yesterday"));
  // Lenient: the CLI reads the leading date-time of what the daemon wrote.
  EXPECT_EQ(parse_rfc3339("2026-12-05T01:38:28", false), 1796434708.0);
  EXPECT_EQ(parse_rfc3339("2026-12-05T01:38:28.5Z", false), 1796434708.0);
  EXPECT_FALSE(parse_rfc3339("nope", false));
}

TEST(Clock, NowIsUnixSeconds) {
  double now = now_s();
  EXPECT_GT(now, 1.7e9);
  EXPECT_LT(now - static_cast<double>(::time(nullptr)), 2.0);
}

}  // namespace
}  // namespace space
