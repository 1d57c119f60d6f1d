// The upper-layer listing format (runtime/upper_listing.h): what space-upper-reader prints
// round-trips, and the parser refuses everything that is not a complete, well-formed listing
// (it reads the output of a process that parsed a guest's disk).
#include "runtime/upper_listing.h"

#include <gtest/gtest.h>

namespace space::runtime {
namespace {

const std::string kHead = std::string(kListingHeader) + "\n";

TEST(UpperListing, RoundTrip) {
  std::vector<UpperEntry> in = {
      {.path = "etc", .type = UpperEntry::Type::kDir, .size = 4096, .mtime_ns = 1},
      {.path = "etc/passwd",
       .type = UpperEntry::Type::kOther,
       .size = 12,
       .mtime_ns = 1700000000123456789},
      {.path = "etc/group", .type = UpperEntry::Type::kWhiteout},
      {.path = "root/opaque", .type = UpperEntry::Type::kDir, .opaque = true, .mtime_ns = -5},
      {.path = std::string("odd/a b\nc%\x01\xff", 12), .type = UpperEntry::Type::kOther},
  };
  std::string text = kHead;
  for (auto& e : in) text += encode_entry(e);
  text += "end 5\n";
  EXPECT_NE(text.find("odd/a%20b%0Ac%25%01%FF\n"), std::string::npos) << text;
  auto out = parse_listing(text, 5);
  ASSERT_TRUE(out) << out.error().message();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ((*out)[i].path, in[i].path);
    EXPECT_EQ((*out)[i].type, in[i].type);
    EXPECT_EQ((*out)[i].opaque, in[i].opaque);
    EXPECT_EQ((*out)[i].size, in[i].size);
    EXPECT_EQ((*out)[i].mtime_ns, in[i].mtime_ns);
  }
  EXPECT_TRUE(parse_listing(kHead + "end 0\n", 0)) << "an empty upper layer";
}

TEST(UpperListing, LimitsAndTheReadersOwnWords) {
  std::string two = kHead + "e o 0 1 0 a\ne o 0 1 0 b\nend 2\n";
  auto r = parse_listing(two, 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kResourceExhausted);
  EXPECT_NE(r.error().message().find("more than 1 changed paths"), std::string::npos);
  r = parse_listing(kHead + "e o 0 1 0 a\nlimit 1\n", 100);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kResourceExhausted);
  r = parse_listing(kHead + "error Bad magic number in super-block\x1b[31m\n", 100);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  EXPECT_EQ(r.error().message(), "Bad magic number in super-block?[31m");
}

TEST(UpperListing, RefusesMalformedListings) {
  const char* bad[] = {
      "",                                          // nothing
      "space-upper 2\nend 0\n",                    // another version
      "e o 0 1 0 a\nend 1\n",                      // no header
      "@e o 0 1 0 a\n",                            // no end
      "@e o 0 1 0 a\nend 2\n",                     // wrong count
      "@end 0\nend 0\n",                           // lines after the end
      "@end 0",                                    // no final newline
      "@e x 0 1 0 a\nend 1\n",                     // unknown type
      "@e o 2 1 0 a\nend 1\n",                     // bad opaque flag
      "@e o 0 -1 0 a\nend 1\n",                    // negative size
      "@e o 0 +1 0 a\nend 1\n",                    // a sign
      "@e o 0 1 99999999999999999999 a\nend 1\n",  // out of range
      "@e o 0 1 0\nend 1\n",                       // no path
      "@e o 0 1 0 /a\nend 1\n",                    // absolute
      "@e o 0 1 0 a//b\nend 1\n",                  // empty part
      "@e o 0 1 0 a/../b\nend 1\n",                // ..
      "@e o 0 1 0 ./a\nend 1\n",                   // .
      "@e o 0 1 0 a/\nend 1\n",                    // trailing slash
      "@e o 0 1 0 a b\nend 1\n",                   // raw space
      "@e o 0 1 0 a%2\nend 1\n",                   // short escape
      "@e o 0 1 0 a%zz\nend 1\n",                  // bad escape
      "@e o 0 1 0 a%00b\nend 1\n",                 // NUL
      "@e o 0 1 0 %2E%2E\nend 1\n",                // .. escaped
      "@e o 0 1 0 a%2F..\nend 1\n",                // a slash escaped makes ".." a part
      "@what\nend 0\n",                            // unknown record
  };
  for (const char* b : bad) {
    std::string text = b;
    if (!text.empty() && text[0] == '@') text = kHead + text.substr(1);
    auto r = parse_listing(text, 100);
    EXPECT_FALSE(r) << "accepted: " << text;
    if (!r) {
      EXPECT_EQ(r.error().code(), Code::kProtocol) << text;
    }
  }
  std::string long_path = kHead + "e o 0 1 0 " + std::string(kMaxUpperPath + 1, 'a') + "\nend 1\n";
  EXPECT_FALSE(parse_listing(long_path, 100));
  std::string max_path = kHead + "e o 0 1 0 " + std::string(kMaxUpperPath, 'a') + "\nend 1\n";
  EXPECT_TRUE(parse_listing(max_path, 100));
}

}  // namespace
}  // namespace space::runtime
