// The E2B door's parsers of untrusted bytes (src/e2b/wire.cc).
#include "e2b/wire.h"

#include <gtest/gtest.h>

namespace space::e2b {
namespace {

TEST(E2bWire, EnvelopesRoundTripAndRefuseCompressedOrHuge) {
  std::string two = envelope(0, R"({"a":1})") + envelope(2, "{}");
  size_t used = 0;
  uint8_t flags = 9;
  auto m = parse_envelope(two, &used, &flags);
  ASSERT_TRUE(m && *m);
  EXPECT_EQ(**m, R"({"a":1})");
  EXPECT_EQ(used, 12u);
  EXPECT_EQ(flags, 0);
  m = parse_envelope(std::string_view(two).substr(used), &used, &flags);
  ASSERT_TRUE(m && *m);
  EXPECT_EQ(**m, "{}");
  EXPECT_EQ(flags, 2);
  // Incomplete: no message yet, no error.
  m = parse_envelope(std::string_view(two).substr(0, 8), &used);
  ASSERT_TRUE(m);
  EXPECT_FALSE(*m);
  EXPECT_FALSE(parse_envelope(envelope(1, "x"), &used));
  std::string huge("\x00\x7f\xff\xff\xff{}", 7);
  auto h = parse_envelope(huge, &used);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code(), Code::kPayloadTooLarge);
}

TEST(E2bWire, HostRouting) {
  auto r = route_host("49983-sb_0123abcdef01.e2b.example:8080", "e2b.example");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 49983);
  EXPECT_EQ(r->second, "sb_0123abcdef01");
  EXPECT_FALSE(route_host("49983-sb_x.e2b.example", ""));
  EXPECT_FALSE(route_host("49983-sb_x.other.example", "e2b.example"));
  EXPECT_FALSE(route_host("49983-sb_x.xe2b.example", "e2b.example"));
  EXPECT_FALSE(route_host("0-sb_x.e2b.example", "e2b.example"));
  EXPECT_FALSE(route_host("65536-sb_x.e2b.example", "e2b.example"));
  EXPECT_FALSE(route_host("8080-.e2b.example", "e2b.example"));
  EXPECT_FALSE(route_host("e2b.example", "e2b.example"));
  EXPECT_EQ(parse_port("49999"), 49999);
  EXPECT_FALSE(parse_port("049999"));
  EXPECT_FALSE(parse_port("+1"));
}

TEST(E2bWire, KeysConvertBothWays) {
  std::string token = "spt_0123456789ab_" + std::string(64, 'c');
  std::string key = e2b_key_from_token(token);
  EXPECT_EQ(key, "e2b_0123456789ab" + std::string(64, 'c'));
  EXPECT_EQ(token_from_e2b_key(key), token);
  EXPECT_FALSE(token_from_e2b_key("e2b_0123456789AB" + std::string(64, 'c')));  // upper case
  EXPECT_FALSE(token_from_e2b_key("e2b_0123"));
  EXPECT_FALSE(token_from_e2b_key(token));
  EXPECT_EQ(e2b_key_from_token("spt_short"), "");
}

TEST(E2bWire, Multipart) {
  std::string body =
      "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"a%22b.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--XyZ\r\n"
      "content-disposition: form-data; name=\"file\"; filename=\"/home/user/c\"\r\n\r\n"
      "\r\n--XyZ--\r\n";
  auto parts = parse_multipart(body, "XyZ");
  ASSERT_TRUE(parts) << parts.error().message();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].filename, "a\"b.txt");
  EXPECT_EQ((*parts)[0].data, "hello");
  EXPECT_EQ((*parts)[1].filename, "/home/user/c");
  EXPECT_EQ((*parts)[1].data, "");
  EXPECT_FALSE(parse_multipart("no delimiter", "XyZ"));
  EXPECT_FALSE(parse_multipart("--XyZ\r\nContent-Disposition: x", "XyZ"));
  EXPECT_FALSE(parse_multipart("--XyZ\r\n\r\nnever closed", "XyZ"));
  EXPECT_FALSE(parse_multipart("--XyZ--\r\n", "XyZ"));  // no part
  EXPECT_FALSE(parse_multipart("----\r\n", ""));
  EXPECT_EQ(header_param("multipart/form-data; boundary=\"a b\"", "boundary"), "a b");
  EXPECT_EQ(header_param("multipart/form-data;boundary=xy ; x=1", "BOUNDARY"), "xy");
  EXPECT_FALSE(header_param("multipart/form-data", "boundary"));
}

}  // namespace
}  // namespace space::e2b
